//! Request bodies the suites build again and again: small, valid `/v1/systemone` requests.

use serde_json::{json, Map, Value};

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

/// A request of `k` choice questions `q0`… with 3 options each (one upstream read per
/// question).
pub fn choices(k: usize) -> Value {
    let qs: Map<String, Value> = (0..k)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "choice", "instructions": format!("Question {i}?"),
                       "criteria": {"a": "first", "b": "second", "c": "third"}}),
            )
        })
        .collect();
    json!({"state": INVOICE, "questions": qs})
}
