//! Request bodies the suites build again and again: small, valid `/v1/systemone` requests.

use serde_json::{json, Value};

use super::criteria;

/// The state of most small requests.
pub const INVOICE: &str = "A customer writes: my invoice is wrong.";

/// A request with one choice question `q` of `n` options about [`INVOICE`].
pub fn one_choice(n: usize) -> Value {
    choice_about(json!(INVOICE), n)
}

/// A request with one choice question `q` of `n` options about `state`.
pub fn choice_about(state: Value, n: usize) -> Value {
    json!({
        "state": state,
        "questions": {"q": {"type": "choice", "instructions": "Pick one.", "criteria": criteria(n)}},
    })
}
