//! The connection pool every backend exchange goes through, and how an abandoned exchange
//! gives its in-flight slot back: when the backend has let go of its connection.
//!
//! An exchange holds a share of its read's in-flight slot. When its caller stops waiting (a
//! sibling read failed, the read timed out, the client left) before the backend answered,
//! the exchange is dropped; hyper then closes the connection that carried it (its HTTP/1
//! dispatcher sees the answer will never be read), and vLLM aborts a request whose client
//! disconnected (llama-server evaluates the prompt to its end). Freeing the slot at the
//! drop would let a new request reach the backend before the old one is let go (more in
//! flight than the cap); keeping it until the backend would have answered would let a hung
//! backend hold every slot. So the dropped exchange hands its share to the connection it was sent on;
//! the connection shuts its side down, waits until the backend closes its own (it has seen
//! the close and dropped the request) or [`CLOSE_GRACE`] passes, and lets go of the share
//! once the socket is gone: the cap stays exact in the backend's eyes, and a hung backend
//! holds slots only for the read timeout (plus the grace, if it does not even close).
//!
//! The pool is hyper-util's (reqwest, on the same client, does not say which connection
//! carried a request): its connector wraps each new connection's stream with a [`Holder`],
//! and [`capture_connection`] tells an exchange which connection it was given.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::Uri;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{
    capture_connection, CaptureConnection, Connected, Connection, HttpConnector,
};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use crate::in_flight::InFlightPermit;

/// The body of every upstream request: whole, in memory.
pub(crate) type RequestBody = http_body_util::Full<bytes::Bytes>;

/// How long an idle pooled connection is kept (reqwest's default).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The pooled client every backend shares (one pool, HTTP/1, plain or TLS).
pub type Pool = hyper_util::client::legacy::Client<HeldConnector, RequestBody>;

/// A pool whose connections time out connecting after `connect_timeout` and of which at
/// most `max_idle` per host are kept idle (the in-flight cap: no more can be busy).
pub fn pool(connect_timeout: Duration, max_idle: usize) -> Result<Pool, String> {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    let https = HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| format!("cannot set up TLS for backends: {e}"))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_idle)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .build(HeldConnector { inner: https }),
    )
}

/// The slot shares a connection keeps for the exchanges abandoned on it, until its socket
/// is closed.
#[derive(Debug, Default)]
pub(crate) struct Holder(Mutex<Held>);

#[derive(Debug, Default)]
struct Held {
    closed: bool,
    /// Every share handed over and not yet let go. Usually one; more when the pool gave the
    /// connection out again before its dispatcher noticed the first abandonment (it is
    /// closing all the same), so none may be let go before the close.
    slots: Vec<Arc<InFlightPermit>>,
}

impl Holder {
    /// Keeps `slot` until the socket is closed (let go at once if it already is), or for
    /// [`HOLD_BOUND`] at most: hyper closes a connection whose answer will not be read at
    /// once, and the close waits [`CLOSE_GRACE`] at most, so a share still held after that
    /// is on a connection hyper kept (the answer had arrived as its exchange was dropped,
    /// so the backend is done with it), which may idle in the pool for minutes.
    fn hold(self: &Arc<Self>, slot: Arc<InFlightPermit>) {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if held.closed {
            drop(held);
            drop(slot);
            return;
        }
        let share = Arc::downgrade(&slot);
        held.slots.push(slot);
        drop(held);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let holder = Arc::downgrade(self);
        runtime.spawn(async move {
            tokio::time::sleep(HOLD_BOUND).await;
            if let Some(holder) = holder.upgrade() {
                holder.let_go(&share);
            }
        });
    }

    /// Lets go of `share`, if still held (the timer keeps it weakly: it must not hold it).
    fn let_go(&self, share: &std::sync::Weak<InFlightPermit>) {
        let released = {
            let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let at = held
                .slots
                .iter()
                .position(|s| std::ptr::eq(Arc::as_ptr(s), share.as_ptr()));
            at.map(|at| held.slots.swap_remove(at))
        };
        drop(released);
    }

    /// The socket is closed: every share is let go.
    fn close(&self) {
        let released = {
            let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
            held.closed = true;
            std::mem::take(&mut held.slots)
        };
        drop(released);
    }
}

/// Closes its [`Holder`] when dropped: the last field of a [`HeldStream`], so it runs after
/// the stream (and its socket) is dropped.
#[derive(Debug)]
struct CloseOnDrop(Arc<Holder>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// How long a closing connection waits for the backend to close its side: the shares it
/// holds are let go when the backend has seen the close (its end of the socket closed, so
/// a counting proxy or the backend itself has let the request go before the slot serves
/// another), or after this long (a backend too stuck to close).
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The longest a connection keeps an abandoned exchange's share (see [`Holder::hold`]).
const HOLD_BOUND: Duration = Duration::from_secs(5);

/// A connection's stream with its [`Holder`]. Fields drop in order: the socket first.
#[derive(Debug)]
pub struct HeldStream<T> {
    io: T,
    /// Our side is shut down (hyper closes a connection by shutting it down, then dropping
    /// it): what is left is to see the backend close its side.
    shut: bool,
    grace: Option<Pin<Box<tokio::time::Sleep>>>,
    holder: CloseOnDrop,
}

impl<T: Read + Unpin> HeldStream<T> {
    /// Ready once the backend has closed its side (end of stream or an error), or after
    /// [`CLOSE_GRACE`]; anything it still sends is dropped.
    fn poll_backend_closed(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let mut scratch = [0u8; 4096];
        for _ in 0..64 {
            let mut buf = hyper::rt::ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.io).poll_read(cx, buf.unfilled()) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Pending => break,
            }
        }
        let grace = self
            .grace
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(CLOSE_GRACE)));
        match grace.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }
}

type Inner = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;

/// hyper-util's HTTP(S) connector, each new connection given a [`Holder`].
#[derive(Clone)]
pub struct HeldConnector {
    inner: HttpsConnector<HttpConnector>,
}

impl tower_service::Service<Uri> for HeldConnector {
    type Response = HeldStream<Inner>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        async move {
            Ok(HeldStream {
                io: connecting.await?,
                shut: false,
                grace: None,
                holder: CloseOnDrop(Arc::default()),
            })
        }
        .boxed()
    }
}

impl<T: Connection> Connection for HeldStream<T> {
    fn connected(&self) -> Connected {
        self.io.connected().extra(self.holder.0.clone())
    }
}

impl<T: Read + Unpin> Read for HeldStream<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: Read + Write + Unpin> Write for HeldStream<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Shuts our side down, then waits for the backend's ([`HeldStream::poll_backend_closed`]).
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if !self.shut {
            std::task::ready!(Pin::new(&mut self.io).poll_shutdown(cx))?;
            self.shut = true;
        }
        self.poll_backend_closed(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// An exchange's share of its read's slot while it runs. Dropped before the answer was read
/// whole, it hands the share to the connection the request was given: hyper closes that
/// connection, as the answer will never be read. Dropped before the request was given a
/// connection (never sent), the share just goes. Once the answer is read whole (or the
/// send failed), the backend is done: [`Share::answered`].
pub(crate) struct Share {
    slot: Option<Arc<InFlightPermit>>,
    connection: CaptureConnection,
}

impl Share {
    /// A share of `slot` for `request`, which learns its connection when the pool gives one.
    pub(crate) fn new(
        slot: &Arc<InFlightPermit>,
        request: &mut hyper::Request<RequestBody>,
    ) -> Self {
        Share {
            slot: Some(slot.clone()),
            connection: capture_connection(request),
        }
    }

    /// The answer is read whole (not just its head: a counting proxy or the backend may
    /// still be sending the body), or the send failed: the backend is done with it.
    pub(crate) fn answered(&mut self) {
        self.slot = None;
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        let mut extras = hyper::http::Extensions::new();
        if let Some(connected) = self.connection.connection_metadata().as_ref() {
            connected.get_extras(&mut extras);
        }

        if let Some(holder) = extras.get::<Arc<Holder>>() {
            holder.hold(slot);
        }
    }
}
