//! CPU-heavy request steps leave the async workers: the strict parse of a large body, its
//! decompression, and validation (exact token counting of a long state with the real
//! tokenizer, decoding and re-encoding images). Inline, one such step stalls every other
//! request on that worker for a millisecond or more.
//!
//! They go to tokio's blocking pool (`spawn_blocking`) rather than a rayon pool: the pool
//! already exists, grows on demand and needs no bridge back to async, and the work is one
//! short task per request, not data-parallel. Small inputs stay inline, where the hop to
//! another thread (two wake-ups and context switches, tens of µs of CPU) would cost more
//! than the work; what "small" means depends on the work's [`Weight`] per byte.

use crate::error::{ApiError, Code};

/// How much work a step does per input byte, which decides how large an input stays on the
/// async worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Weight {
    /// Exact token counting with a real tokenizer (~2 µs a token, ~4 bytes a token),
    /// decoding images, decompressing (the output may be far larger than the input):
    /// inline up to [`INLINE_HEAVY_BYTES`].
    Heavy,
    /// Parsing JSON, or validating a request whose tokens are estimated and that holds no
    /// image (a few ns a byte): inline up to [`INLINE_LIGHT_BYTES`].
    Light,
}

/// Heavy inputs up to this many bytes are handled on the async worker: about a millisecond
/// of work at most, less than a stall worth avoiding.
pub(super) const INLINE_HEAVY_BYTES: usize = 2 * 1024;

/// Light inputs up to this many bytes stay inline: parsing and validating a 11.8 KB body
/// of one 150-option question takes ~75 µs (`cargo bench --bench hot_path`,
/// `parse+validate`), about 6 ns a byte, so 64 KiB stays under half a millisecond.
pub(super) const INLINE_LIGHT_BYTES: usize = 64 * 1024;

impl Weight {
    /// Whether `input_bytes` of this work is worth a hop to the blocking pool.
    fn leaves_worker(self, input_bytes: usize) -> bool {
        input_bytes
            > match self {
                Weight::Heavy => INLINE_HEAVY_BYTES,
                Weight::Light => INLINE_LIGHT_BYTES,
            }
    }
}

/// Runs `work` inline when `input_bytes` of work of this `weight` is small, else on the
/// blocking pool, inside the caller's tracing span and trace step either way.
pub(super) async fn run<T: Send + 'static>(
    input_bytes: usize,
    weight: Weight,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    if !weight.leaves_worker(input_bytes) {
        return Ok(work());
    }
    let span = tracing::Span::current();
    let step = crate::telemetry::StepSpan::current();
    tokio::task::spawn_blocking(move || step.in_scope(|| span.in_scope(work)))
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "a blocking request step failed");
            ApiError::new(Code::Internal, "internal error")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn light_work_stays_inline_longer_than_heavy() {
        assert!(!Weight::Heavy.leaves_worker(INLINE_HEAVY_BYTES));
        assert!(Weight::Heavy.leaves_worker(INLINE_HEAVY_BYTES + 1));
        assert!(!Weight::Light.leaves_worker(INLINE_HEAVY_BYTES + 1));
        assert!(!Weight::Light.leaves_worker(INLINE_LIGHT_BYTES));
        assert!(Weight::Light.leaves_worker(INLINE_LIGHT_BYTES + 1));
    }
}
