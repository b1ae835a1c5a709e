//! [`Quirks`]: what one flavor of native server does differently (one implementation per
//! flavor file).

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::backend::http::retry_after_secs;
use crate::backend::BackendError;

/// What one flavor of native server does differently. One implementation per file.
pub(super) trait Quirks: Send + Sync + std::fmt::Debug {
    /// Most options one question may have on this server (refused with a 422 before
    /// sending beyond it).
    fn max_options(&self) -> usize;
    /// The request's images as this server takes them (data URLs as they are, by default).
    fn images(&self, images: &[Arc<str>]) -> Value {
        Value::Array(images.iter().map(|i| Value::from(&**i)).collect())
    }
    /// Fields of its own added to every body (from configuration, never from the caller).
    fn add_fields(&self, body: &mut Map<String, Value>) {
        let _ = body;
    }
    /// Seconds to wait, from an error answer's headers.
    fn retry_after(&self, headers: &hyper::header::HeaderMap) -> Option<u64> {
        retry_after_secs(headers)
    }
    /// A status this flavor gives its own meaning (`None`: the common mapping).
    fn refusal(&self, status: u16, model: &str) -> Option<BackendError> {
        let _ = (status, model);
        None
    }
    /// Whether a startup probe must find out if the server serves the model natively.
    fn probes(&self) -> bool {
        false
    }
    /// Logs what the server says about one exchange (its request id), at `debug`.
    fn note_answer(&self, headers: &hyper::header::HeaderMap) {
        let _ = headers;
    }
}
