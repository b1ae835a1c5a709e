//! [`KeyLimits`]: the limits configured for one key.

use std::num::NonZeroU32;

/// The limits configured for one key (each optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLimits {
    /// Requests per minute (also the burst).
    pub requests_per_minute: Option<NonZeroU32>,
    /// Questions per minute (also the burst).
    pub questions_per_minute: Option<NonZeroU32>,
    /// Questions per UTC day.
    pub daily_questions: Option<u64>,
}
