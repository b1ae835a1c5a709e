//! [`Refusal`]: which limit said no, with the numbers the caller is told.

use std::time::Duration;

/// Longest `Retry-After` a per-minute limit answers with.
pub const MAX_RATE_RETRY_SECS: u64 = 60;

/// Whole seconds to wait, at least 1, at most [`MAX_RATE_RETRY_SECS`].
pub(super) fn retry_secs(wait: Duration) -> u64 {
    (wait.as_secs_f64().ceil() as u64).clamp(1, MAX_RATE_RETRY_SECS)
}

/// Which limit refused a request (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Requests,
    Questions,
    Daily,
}

impl LimitKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Requests => "requests",
            LimitKind::Questions => "questions",
            LimitKind::Daily => "daily",
        }
    }
}

/// A limit said no. Carries numbers only, never the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A per-minute limit is used up; free again in `retry_after` seconds.
    RateLimited {
        kind: LimitKind,
        limit: u32,
        retry_after: u64,
    },
    /// The request alone has more questions than the key may ask per minute.
    OverMinuteLimit { questions: usize, limit: u32 },
    /// The key's questions for this UTC day are used up (or this request would pass it).
    DailyCap {
        limit: u64,
        used: u64,
        questions: usize,
        retry_after: u64,
    },
}
