//! The request body under the body read deadline (and telling whether it was read to its
//! end), and the response body that tells the connection's guard when its request is over.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::guard::InService;

/// The body did not arrive within the body read timeout.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("the body did not arrive within the body read timeout of {} s", .0.as_secs_f64())]
pub struct BodyTimedOut(pub Duration);

impl BodyTimedOut {
    /// The timeout somewhere in `error`'s chain of sources (axum wraps a body's errors).
    pub fn find(error: &(dyn std::error::Error + 'static)) -> Option<BodyTimedOut> {
        let mut cause = Some(error);
        while let Some(e) = cause {
            if let Some(found) = e.downcast_ref::<BodyTimedOut>() {
                return Some(*found);
            }
            cause = e.source();
        }
        None
    }
}

/// A request body that fails with [`BodyTimedOut`] once its deadline passes (counted from
/// the end of the head, when the service gets the request).
pub(super) struct DeadlineBody {
    inner: Incoming,
    deadline: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
    /// Set once the body has been read to its end (at once for an empty one), so the
    /// service can tell a response that leaves part of it unread.
    read_to_end: Arc<AtomicBool>,
}

impl DeadlineBody {
    /// The body with its deadline, and the flag that says whether it was read to its end.
    pub(super) fn new(inner: Incoming, timeout: Option<Duration>) -> (Self, Arc<AtomicBool>) {
        let read_to_end = Arc::new(AtomicBool::new(inner.is_end_stream()));
        let body = DeadlineBody {
            inner,
            deadline: timeout.map(|t| (Box::pin(tokio::time::sleep(t)), t)),
            read_to_end: read_to_end.clone(),
        };
        (body, read_to_end)
    }
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if frame.is_none() || this.inner.is_end_stream() {
                this.read_to_end.store(true, Ordering::SeqCst);
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if let Some((sleep, after)) = &mut this.deadline {
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(Err(Box::new(BodyTimedOut(*after)))));
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body holding its request's [`InService`] token until the body has been
/// sent (or dropped).
pub(super) struct Tracked {
    inner: axum::body::Body,
    token: Option<InService>,
}

impl Tracked {
    pub(super) fn new(inner: axum::body::Body, token: InService) -> Self {
        Tracked {
            inner,
            token: Some(token),
        }
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.token = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
