//! A question rendered once, in every option order asked: what validation counts is what
//! the prompt sends.

use super::trie;

/// One question as the prompt sends it, in each option order asked.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedQuestion {
    /// Order `r` holds the caller's option `(p + shifts[r]) mod n` at position `p`.
    pub shifts: Vec<usize>,
    /// The question as the layout writes it in each order, aligned with `shifts`: the
    /// question object (Python JSON), or the `compact` layout's lines.
    pub text: Vec<String>,
    /// The masked reads of one order, and how they join into one log-probability per option.
    pub reads: trie::ReadPlan,
}
