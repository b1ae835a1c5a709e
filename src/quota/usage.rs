//! [`UsageCounts`]: what one key used on one UTC day, and the row that names them.

use serde::Serialize;

/// Counters of one key on one UTC day: the answered requests and what they used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsageCounts {
    /// Requests answered (200).
    pub requests: u64,
    /// Their questions (documents, for rerank).
    pub questions: u64,
    /// Their `usage.input_tokens`.
    pub input_tokens: u64,
    /// Their `usage.cached_tokens`.
    pub cached_tokens: u64,
    /// Their `usage.upstream_requests`.
    pub upstream_requests: u64,
}

impl UsageCounts {
    /// Adds another record's counts, each stopping at `u64::MAX` rather than wrapping: a
    /// wrapped counter would report far less than was used, and it is kept across restarts.
    pub fn add(&mut self, other: &UsageCounts) {
        let (mine, theirs) = (self.to_array(), other.to_array());
        *self = UsageCounts::from_array(std::array::from_fn(|i| mine[i].saturating_add(theirs[i])));
    }

    /// The five counters in the stores' order.
    pub fn to_array(self) -> [u64; 5] {
        [
            self.requests,
            self.questions,
            self.input_tokens,
            self.cached_tokens,
            self.upstream_requests,
        ]
    }

    /// From [`UsageCounts::to_array`]'s order.
    pub fn from_array(a: [u64; 5]) -> Self {
        UsageCounts {
            requests: a[0],
            questions: a[1],
            input_tokens: a[2],
            cached_tokens: a[3],
            upstream_requests: a[4],
        }
    }

    /// Whether every counter is zero.
    pub fn is_empty(&self) -> bool {
        self.to_array() == [0; 5]
    }
}

/// One batch line's usage, charged once: `id` is the line's request id, the same every time
/// the line runs (`batch::ids`), so a store that keeps the ids charges a line run again after
/// a crash nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The line's request id.
    pub id: String,
    /// Its caller's name: the counts go to its usage and to its batch counters
    /// ([`batch_usage_name`]).
    pub name: String,
    /// What the line used.
    pub counts: UsageCounts,
}

/// What a name's batch counters are kept under in the stores: the name and `#batch`. No
/// caller's name holds `#` (key names, token subjects and name claims are all of
/// `A-Z a-z 0-9 - _ .`, with `@` in a claim's), so it names no caller's own usage.
pub fn batch_usage_name(name: &str) -> String {
    format!("{name}{BATCH_SUFFIX}")
}

/// The part of a name's batch counters' name after the name.
pub const BATCH_SUFFIX: &str = "#batch";

/// One key's usage on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// The key's configured name.
    pub key: String,
    /// The UTC day number.
    pub day: u64,
    /// What it used.
    pub counts: UsageCounts,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_add_and_keep_their_order() {
        let mut a = UsageCounts::from_array([1, 2, 3, 4, 5]);
        a.add(&UsageCounts::from_array([10, 20, 30, 40, 50]));
        assert_eq!(a.to_array(), [11, 22, 33, 44, 55]);
        assert!(!a.is_empty());
        assert!(UsageCounts::default().is_empty());
    }

    #[test]
    fn usage_counts_saturate_instead_of_wrapping() {
        let mut a = UsageCounts::from_array([1, 2, u64::MAX - 1, 4, 5]);
        a.add(&UsageCounts::from_array([1, 1, 100, 1, u64::MAX]));
        assert_eq!(a.to_array(), [2, 3, u64::MAX, 5, u64::MAX]);
    }
}
