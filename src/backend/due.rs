//! [`Due`]: when a piece of background upkeep wants to run again.

/// When a piece of background upkeep (a host probe, a token-table check) wants to run
/// again, as the attempt that just finished decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// After this long (the attempt concluded, or a verdict stands).
    In(std::time::Duration),
    /// The attempt could not conclude and nothing stands yet: soon, with backoff.
    Retry,
    /// Nothing more to keep.
    Never,
}

impl Due {
    /// The sooner of two: a retry before an interval, the shorter interval, never last.
    pub fn sooner(self, other: Due) -> Due {
        match (self, other) {
            (Due::Retry, _) | (_, Due::Retry) => Due::Retry,
            (Due::In(a), Due::In(b)) => Due::In(a.min(b)),
            (Due::In(a), Due::Never) | (Due::Never, Due::In(a)) => Due::In(a),
            (Due::Never, Due::Never) => Due::Never,
        }
    }
}
