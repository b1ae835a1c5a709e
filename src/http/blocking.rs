//! CPU-heavy request steps leave the async workers: the strict parse of a large body, its
//! decompression, and validation (exact token counting of a long state with the real
//! tokenizer, decoding and re-encoding images). Inline, one such step stalls every other
//! request on that worker for tens of milliseconds.
//!
//! They go to tokio's blocking pool (`spawn_blocking`) rather than a rayon pool: the pool
//! already exists, grows on demand and needs no bridge back to async, and the work is one
//! short task per request, not data-parallel. Small inputs stay inline, where the hop to
//! another thread would cost more than the work.

use crate::error::{ApiError, Code};

/// Inputs up to this many bytes are handled on the async worker: counting them with a real
/// tokenizer (~2 µs a token, ~4 bytes a token) takes about a millisecond at most, less
/// than a stall worth avoiding; above it the hop to the pool (tens of µs) is cheap by
/// comparison.
pub const INLINE_BYTES: usize = 2 * 1024;

/// Runs `work` inline when `input_bytes` is small, else on the blocking pool, inside the
/// caller's tracing span either way.
pub async fn run<T: Send + 'static>(
    input_bytes: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    if input_bytes <= INLINE_BYTES {
        return Ok(work());
    }
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(work))
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "a blocking request step failed");
            ApiError::new(Code::Internal, "internal error")
        })
}
