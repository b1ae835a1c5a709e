//! What the flow hands back to a door, and the ledger step records: the answered call.

use super::escalate;
use crate::engine::{Answers, TokenUsage};

/// What the flow returns to a door: each request's answers, in order, and their usage summed.
#[derive(Debug)]
pub(in crate::http) struct AnsweredCall {
    /// One per request handed in, in order.
    pub answers: Vec<Answers>,
    /// Every request's usage added up.
    pub usage: TokenUsage,
    /// What escalation when unsure did, for [`super::headers::set_escalation_headers`].
    pub escalation: escalate::Report,
}

impl AnsweredCall {
    /// The model the backend reported for the first request.
    pub(in crate::http) fn model(&self) -> &str {
        self.answers.first().map_or("", |o| o.model.as_str())
    }
}
