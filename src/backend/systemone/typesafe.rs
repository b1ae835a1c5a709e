//! TypeSafe's System One API (and another `systemone`, which speaks it): every answer
//! carries `x-typesafe-request-id` (logged, so an operator can quote it to TypeSafe), a
//! 422 carries FastAPI's `detail` list (a rejection: the caller gets this service's
//! message, never the upstream's), waits come as `retry-after-ms` (milliseconds, before
//! `Retry-After`), and 529 means overloaded (a rate limit to the caller).

use super::quirks::Quirks;
use crate::backend::http::retry_after_secs;

/// TypeSafe's API takes as many options as the contract (255).
const MAX_OPTIONS: usize = 255;

/// The TypeSafe flavor.
#[derive(Debug)]
pub(super) struct TypeSafe;

impl Quirks for TypeSafe {
    fn max_options(&self) -> usize {
        MAX_OPTIONS
    }

    fn retry_after(&self, headers: &hyper::header::HeaderMap) -> Option<u64> {
        retry_after_ms(headers).or_else(|| retry_after_secs(headers))
    }

    fn note_answer(&self, headers: &hyper::header::HeaderMap) {
        if let Some(id) = headers
            .get("x-typesafe-request-id")
            .and_then(|v| v.to_str().ok())
        {
            tracing::debug!(upstream_request_id = %id, "native upstream answered");
        }
    }
}

/// `retry-after-ms` in whole seconds, rounded up.
fn retry_after_ms(headers: &hyper::header::HeaderMap) -> Option<u64> {
    let ms: f64 = headers
        .get("retry-after-ms")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (ms.is_finite() && ms >= 0.0).then(|| (ms / 1000.0).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_ms_wins_and_rounds_up() {
        let mut h = hyper::header::HeaderMap::new();
        h.insert("retry-after", "9".parse().expect("header"));
        assert_eq!(TypeSafe.retry_after(&h), Some(9));
        h.insert("retry-after-ms", "1500".parse().expect("header"));
        assert_eq!(TypeSafe.retry_after(&h), Some(2));
        h.insert("retry-after-ms", "-3".parse().expect("header"));
        assert_eq!(TypeSafe.retry_after(&h), Some(9), "a bad value falls back");
    }
}
