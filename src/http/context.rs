//! Which request this is: its id, as every response and the ledger name it, and the
//! [`RequestContext`] the middleware makes for it and hands down to every step.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderName;

use super::ledger_note::LedgerNote;
use super::summary::Summary;
use crate::error::{ApiError, Code};
use crate::quota::UsageCounts;

/// The request id every response carries (`req_<32 hex>`).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl RequestId {
    /// A fresh id: a UUIDv7 (RFC 9562), whose first 48 bits are the Unix time in ms and the
    /// rest random, so ids made later sort later. The ledger's primary key is the request
    /// id: in time order, a batch of records adds to one end of its index instead of
    /// touching a random page of it per record, which SQLite writes whole into its WAL.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        RequestId(format!("req_{}", uuid::Uuid::now_v7().simple()))
    }
}

/// `x-typesafe-request-id`, which the Python SDK reads.
pub static TYPESAFE_REQUEST_ID: HeaderName = HeaderName::from_static("x-typesafe-request-id");
/// `x-request-id`, the same value for everything else.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// One request as the middleware made it: which it is, where it came in, when, and the
/// summary its steps note into. A request extension, taken by a door's handler as an
/// argument and passed down by reference, so that no step (the ledger's record above all)
/// can run without knowing which request it serves.
#[derive(Debug, Clone)]
pub(super) struct RequestContext {
    /// `req_<hex>`.
    pub id: RequestId,
    /// The matched route (`"unmatched"` for none).
    pub route: String,
    /// When it arrived.
    pub started: Instant,
    /// When it arrived, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// What its summary line will say beyond status and latency.
    pub summary: Arc<Summary>,
    /// What the ledger step needs to know of it (who, which model, whether recorded).
    pub ledger: Arc<LedgerNote>,
    /// A batch line's usage: the flow adds it here instead of recording it, and the batch
    /// charges it with the line's output, once (`batch::progress`). `None`: online.
    pub batch_usage: Option<Arc<Mutex<UsageCounts>>>,
}

impl RequestContext {
    /// A fresh request on `route`, arriving now.
    pub(super) fn arriving(route: String) -> Self {
        RequestContext {
            id: RequestId::new(),
            route,
            started: Instant::now(),
            at_ms: crate::ledger::now_ms(),
            summary: Arc::default(),
            ledger: Arc::default(),
            batch_usage: None,
        }
    }

    /// A batch line through the door at `route`, starting now, with its own `request_id`
    /// (the same every time the line runs: see `crate::batch::ids`).
    pub(super) fn batch_line(route: &str, request_id: String) -> Self {
        RequestContext {
            id: RequestId(request_id),
            batch_usage: Some(Arc::default()),
            ..RequestContext::arriving(route.to_string())
        }
    }

    /// The usage a batch line's flow added (nothing for an online request).
    pub(super) fn batch_usage(&self) -> UsageCounts {
        self.batch_usage
            .as_ref()
            .map_or_else(UsageCounts::default, |u| {
                *u.lock().unwrap_or_else(PoisonError::into_inner)
            })
    }

    /// A batch line's request id (the same every time the line runs), `None` online: what
    /// the daily cap counts a line once by.
    pub(super) fn batch_line_id(&self) -> Option<&str> {
        self.batch_usage.as_ref().map(|_| self.id.0.as_str())
    }

    /// Notes the caller's key name, for the summary line and the ledger.
    pub(super) fn note_key(&self, name: &str) {
        self.summary.note_key(name);
        self.ledger.note_key(name);
    }

    /// Notes the model that serves, for the summary line (with the question count) and the
    /// ledger.
    pub(super) fn note_model(&self, name: &str, questions: usize) {
        self.summary.note_model(name, questions);
        self.ledger.note_model(name);
    }

    /// The context of the request `parts` belong to; the middleware made it before any
    /// handler runs, so missing it is a bug (refused as an internal error).
    pub(super) fn of(parts: &Parts) -> Result<&Self, ApiError> {
        parts
            .extensions
            .get::<RequestContext>()
            .ok_or_else(|| ApiError::new(Code::Internal, "internal error"))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestContext {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        RequestContext::of(parts).cloned()
    }
}
