//! The refusal a request gets when its record missed the commit under `fail_closed`.

/// The record is not on record and the policy is `fail_closed`: the request must be
/// refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the decision ledger did not commit the record within {timeout_ms} ms")]
pub struct Unrecorded {
    /// The configured bound.
    pub timeout_ms: u64,
}
