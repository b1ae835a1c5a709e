//! One question asked in one option order: what the prompt of either layout family
//! ([`super::prompt`], [`super::compact`]) plans for the engine.

use std::sync::Arc;

use crate::backend::EncodedContent;

/// One question asked in one option order: one user message, read in one or more slices.
#[derive(Debug, Clone)]
pub struct Ask {
    /// Index of the question in the request.
    pub question: usize,
    /// Index of the order (0 = the caller's order).
    pub order: usize,
    /// Position `p` of this order holds the caller's option `(p + shift) mod n`.
    pub shift: usize,
    /// The user message, JSON-encoded once for all its reads.
    pub content: Arc<EncodedContent>,
}
