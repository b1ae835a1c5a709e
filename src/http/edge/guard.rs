//! The bytes between a client's socket and hyper. Each request head is collected here and
//! checked (size, header lines, syntax) before hyper sees any of it, so a bad one is refused
//! with the contract's JSON body and a request id instead of hyper's empty 400 or bare 431;
//! a head that arrives too slowly gets a 408, and a keep-alive connection left idle too long
//! is closed. Bodies pass through counted by `Content-Length`, so the next head (pipelined
//! or not) is found exactly; after a chunked body the connection's later heads are passed
//! through unchecked (hyper still parses them), rather than guessed at. When hyper closes
//! a connection whose client may still be sending a body (its answer came first: a 413,
//! a 401), the close lingers and drains the rest, so the client reads the answer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::refusal::{self, Linger, Refusal};

use crate::error::{ApiError, Code};
use crate::metrics::Metrics;

/// What a connection's service tells its guard: how many requests it is handling, when
/// one finished (so the guard may write a refusal without cutting into a response, and
/// knows when the connection went idle), and whether a response left its request's body
/// unread (so the connection's close drains the rest: see [`Linger`]).
#[derive(Debug, Default)]
pub(super) struct Activity {
    active: AtomicUsize,
    finished: AtomicU64,
    waker: AtomicWaker,
    body_cut: AtomicBool,
}

impl Activity {
    /// A request entered the service; the returned token ends it when dropped (with the
    /// response body, or with the request if the client left first).
    pub(super) fn start(self: &Arc<Self>) -> InService {
        self.active.fetch_add(1, Ordering::SeqCst);
        InService(self.clone())
    }

    fn is_busy(&self) -> bool {
        self.active.load(Ordering::SeqCst) > 0
    }

    /// A response is going out before its request's body was read to the end: the
    /// connection closes after it (hyper reads no further) and must drain when it does.
    pub(super) fn cut_body(&self) {
        self.body_cut.store(true, Ordering::SeqCst);
    }
}

/// One request in the service; dropping it tells the guard the request is over.
#[derive(Debug)]
pub(super) struct InService(Arc<Activity>);

impl Drop for InService {
    fn drop(&mut self) {
        self.0.finished.fetch_add(1, Ordering::SeqCst);
        self.0.active.fetch_sub(1, Ordering::SeqCst);
        self.0.waker.wake();
    }
}

/// The edge's limits on one connection's heads and waits.
#[derive(Debug, Clone)]
pub(super) struct Rules {
    pub header_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub max_head_bytes: usize,
    pub max_headers: usize,
    pub metrics: Metrics,
}

/// Where the connection is in its stream of requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Collecting the next request head (nothing of it given to hyper yet).
    Head,
    /// Passing this many body bytes of the current request to hyper.
    Body(u64),
    /// A chunked body was sent: the rest of the connection is passed through as is.
    Unchecked,
    /// A refusal is being written, or the connection is being closed quietly.
    Closing,
}

/// What the guard's deadline is timing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    None,
    /// The head (from its first byte, or from connecting for the first request).
    Header,
    /// An idle keep-alive connection (from its last response).
    Idle,
}

/// A client connection's IO, guarded.
pub(super) struct Guarded<T> {
    io: T,
    rules: Arc<Rules>,
    activity: Arc<Activity>,
    phase: Phase,
    /// Requests the service had finished when the guard last looked.
    seen_finished: u64,
    /// The head being collected.
    head: BytesMut,
    /// Checked bytes not yet handed to hyper.
    checked: BytesMut,
    wait: Wait,
    deadline: Pin<Box<Sleep>>,
    refusal: Option<Refusal>,
    /// The close in progress, once hyper has asked for one that must drain.
    linger: Option<Linger>,
}

impl<T> Guarded<T> {
    /// Guards a just-accepted connection: its first head is timed from now.
    pub(super) fn new(io: T, rules: Arc<Rules>, activity: Arc<Activity>) -> Self {
        let mut guarded = Guarded {
            io,
            rules,
            activity,
            phase: Phase::Head,
            seen_finished: 0,
            head: BytesMut::new(),
            checked: BytesMut::new(),
            wait: Wait::None,
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
            refusal: None,
            linger: None,
        };
        guarded.arm(Wait::Header);
        guarded
    }

    fn arm(&mut self, wait: Wait) {
        let after = match wait {
            Wait::None => None,
            Wait::Header => self.rules.header_timeout,
            Wait::Idle => self.rules.idle_timeout,
        };
        self.wait = if after.is_some() { wait } else { Wait::None };
        if let Some(after) = after {
            self.deadline.as_mut().reset(Instant::now() + after);
        }
    }

    /// Follows the service: once it has finished a request and holds none, an empty head
    /// buffer means an idle connection; while it holds one, nothing is timed here (the
    /// request has its own deadlines).
    fn follow_activity(&mut self, cx: &mut Context<'_>) {
        if self.phase != Phase::Head || !self.head.is_empty() {
            return;
        }
        // hyper need not read again after its last response: the service's end wakes us.
        self.activity.waker.register(cx.waker());
        let finished = self.activity.finished.load(Ordering::SeqCst);
        if self.activity.is_busy() {
            self.wait = Wait::None;
        } else if finished != self.seen_finished {
            self.seen_finished = finished;
            self.arm(Wait::Idle);
        }
    }

    fn refuse(&mut self, code: Code, message: String, rule: &'static str) {
        self.rules.metrics.count_connection_closed(rule);
        self.refusal = Some(Refusal::new(ApiError::new(code, message), rule));
        self.phase = Phase::Closing;
        self.wait = Wait::None;
    }

    /// Closes without a response (none is due: no request was started).
    fn close_quietly(&mut self, rule: &'static str) {
        self.rules.metrics.count_connection_closed(rule);
        self.phase = Phase::Closing;
        self.wait = Wait::None;
    }

    /// Checks the collected head. A complete good one is handed on with the part of its
    /// body already read; what follows that body is the next head.
    fn check_head(&mut self) {
        let checked = refusal::check_head(
            &self.head,
            self.rules.max_head_bytes,
            self.rules.max_headers,
        );
        match checked {
            Ok(None) => {}
            Ok(Some(head)) => {
                let mut rest = self.head.split_off(head.len);
                self.checked.extend_from_slice(&self.head);
                self.head.clear();
                self.wait = Wait::None;
                match head.body {
                    None => {
                        self.checked.extend_from_slice(&rest);
                        self.phase = Phase::Unchecked;
                    }
                    Some(len) => {
                        let here = rest.len().min(usize::try_from(len).unwrap_or(usize::MAX));
                        self.checked.extend_from_slice(&rest.split_to(here));
                        self.phase = Phase::Body(len - here as u64);
                        self.head = rest;
                    }
                }
            }
            Err(refused) => self.refuse(refused.code, refused.message, refused.rule),
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Guarded<T> {
    /// Reads into the head buffer; `Ready(false)` at end of stream. The scratch is left
    /// uninitialised (the socket writes before anything reads it): zeroing 8 KiB on every
    /// poll, `Pending` ones included, was ~12 % of a one-question request's instructions.
    fn poll_collect(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let mut scratch = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut read = ReadBuf::uninit(&mut scratch);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut read))?;
        if read.filled().is_empty() {
            return Poll::Ready(Ok(false));
        }
        if self.head.is_empty() && self.wait != Wait::Header {
            self.arm(Wait::Header);
        }
        self.head.extend_from_slice(read.filled());
        Poll::Ready(Ok(true))
    }

    /// Passes at most `left` body bytes from the socket (straight into hyper's buffer when
    /// the body is longer than it, else through a scratch buffer so the next head stays
    /// here).
    fn poll_body(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        left: u64,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        if left >= buf.remaining() as u64 {
            ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        } else {
            let mut scratch = vec![0u8; left as usize];
            let mut read = ReadBuf::new(&mut scratch);
            ready!(Pin::new(&mut self.io).poll_read(cx, &mut read))?;
            buf.put_slice(read.filled());
        }
        let n = (buf.filled().len() - before) as u64;
        self.phase = Phase::Body(left - n);
        Poll::Ready(Ok(()))
    }

    /// How hyper's close must linger, if it must: while a body's declared rest is still
    /// to come, or after a response that left its body unread (the rest of a chunked one
    /// is of unknown length), the client may still be sending, and closing a socket with
    /// unread data would reset the connection before the client reads the answer.
    fn linger_on_close(&self) -> Option<Linger> {
        let cut = self.activity.body_cut.load(Ordering::SeqCst);
        match self.phase {
            Phase::Body(left) if left > 0 => Some(Linger::draining(Some(left))),
            Phase::Unchecked if cut => Some(Linger::draining(None)),
            _ if cut => Some(Linger::brief()),
            _ => None,
        }
    }

    /// What an expired deadline does.
    fn expire(&mut self) {
        match self.wait {
            Wait::Idle => self.close_quietly("idle_timeout"),
            Wait::Header if self.head.is_empty() => self.close_quietly("header_timeout"),
            Wait::Header => self.refuse(
                Code::RequestTimeout,
                format!(
                    "the request head did not arrive within the header read timeout of {} s",
                    self.rules.header_timeout.unwrap_or_default().as_secs_f64()
                ),
                "header_timeout",
            ),
            Wait::None => {}
        }
    }

    /// Writes the refusal once no response is being written, then ends the stream with an
    /// error (hyper writes nothing more and drops the connection).
    fn poll_refusal(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.activity.waker.register(cx.waker());
        if self.activity.is_busy() {
            return Poll::Pending;
        }
        let Some(refusal) = self.refusal.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        ready!(refusal.poll_send(&mut self.io, cx))?;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "request refused at the edge",
        )))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.checked.is_empty() {
                let n = this.checked.len().min(buf.remaining());
                buf.put_slice(&this.checked[..n]);
                this.checked.advance(n);
                return Poll::Ready(Ok(()));
            }
            match this.phase {
                Phase::Closing if this.refusal.is_some() => return this.poll_refusal(cx),
                Phase::Closing => return Poll::Ready(Ok(())),
                Phase::Unchecked => return Pin::new(&mut this.io).poll_read(cx, buf),
                Phase::Body(0) => {
                    // The next head may already be here (pipelined).
                    this.phase = Phase::Head;
                    if !this.head.is_empty() {
                        this.arm(Wait::Header);
                        this.check_head();
                    }
                    continue;
                }
                Phase::Body(left) => return this.poll_body(cx, buf, left),
                Phase::Head => {}
            }
            this.follow_activity(cx);
            match this.poll_collect(cx) {
                Poll::Ready(Ok(true)) => this.check_head(),
                // End of stream: a partial head is dropped; hyper sees a clean close.
                Poll::Ready(Ok(false)) => return Poll::Ready(Ok(())),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    if this.wait == Wait::None || this.deadline.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    this.expire();
                }
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    /// hyper's close at the end of a connection, lingering when the client may still be
    /// sending (see [`Guarded::linger_on_close`]).
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.linger.is_none() {
            this.linger = this.linger_on_close();
        }
        match this.linger.as_mut() {
            Some(linger) => linger.poll_close(&mut this.io, cx),
            None => Pin::new(&mut this.io).poll_shutdown(cx),
        }
    }
}
