//! The backend's context window, read in the model's upkeep (vLLM's `/v1/models`
//! `max_model_len`, llama-server's `/props` `n_ctx`), so that a read whose prompt cannot fit
//! is refused before it is sent instead of coming back as one upstream 400 per read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::http::exchange;
use super::{BackendError, Due};
use crate::in_flight::InFlight;

/// How often the window is read again (a backend restarted with another window).
const REFRESH: Duration = Duration::from_secs(600);
/// The bound on one read of it (a hung backend must not hold the model's upkeep).
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The window as last read; unknown until then, and for a host that does not report it.
#[derive(Debug, Default)]
pub struct ContextWindow {
    /// Tokens; 0 while unknown.
    tokens: AtomicUsize,
}

impl ContextWindow {
    /// The window in tokens, if known.
    pub fn get(&self) -> Option<usize> {
        Some(self.tokens.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }

    /// Sends `call` (a GET under a permit of `in_flight`) and keeps what `read` finds in
    /// its JSON answer. A host that answers with a 4xx or without the field does not report
    /// its window: not asked again. One that cannot answer now is asked again with backoff.
    pub(crate) async fn refresh(
        &self,
        call: super::http::Call,
        in_flight: &InFlight,
        read: impl FnOnce(&Value) -> Option<u64>,
    ) -> Due {
        let slot = Arc::new(in_flight.acquire().await);
        let answer = tokio::time::timeout(READ_TIMEOUT, exchange(call, &slot)).await;
        let found = match answer.unwrap_or(Err(BackendError::Timeout)) {
            Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                .ok()
                .as_ref()
                .and_then(read),
            Err(BackendError::Rejected { .. }) => None,
            Err(e) => {
                tracing::debug!(error = %e, "the backend's context window could not be read yet");
                return Due::Retry;
            }
        };
        match found
            .and_then(|t| usize::try_from(t).ok())
            .filter(|t| *t > 0)
        {
            Some(tokens) => {
                if self.tokens.swap(tokens, Ordering::Relaxed) != tokens {
                    tracing::info!(context_tokens = tokens, "the backend's context window");
                }
                Due::In(REFRESH)
            }
            None => {
                tracing::info!("the backend does not report its context window; reads are not checked against it");
                Due::Never
            }
        }
    }
}
