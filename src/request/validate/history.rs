//! `history`: a record that grows across calls (`docs/request.md`), shared by every question (a
//! string) or given per question (an object question id → string).

use serde_json::{Map, Value};

use super::{refuse, refuse_field_type, refuse_type};
use crate::error::{ApiError, Code};
use crate::question::LoweredQuestion;
use crate::request::History;

/// Absent or null is no history; a string is one history for every question; an object
/// gives some questions a history of their own. Anything else is refused at `history`.
pub(super) fn validate_history(
    history: Option<&Value>,
    questions: &[LoweredQuestion],
) -> Result<History, ApiError> {
    match history {
        None | Some(Value::Null) => Ok(History::None),
        Some(Value::String(s)) => Ok(History::Shared(s.clone())),
        Some(Value::Object(map)) => per_question(map, questions),
        Some(other) => refuse_field_type(
            Code::BadHistory,
            "history",
            "a string or an object question id -> string",
            other,
        ),
    }
}

/// A history per question: every key must be an id in `questions` (a typo would otherwise
/// drop the record silently), checked before any value; each value is a string or null (no
/// history for that question). The result is aligned with `questions`.
fn per_question(
    map: &Map<String, Value>,
    questions: &[LoweredQuestion],
) -> Result<History, ApiError> {
    // Named by position: a key that is no question id is only the caller's text.
    if let Some(index) = map
        .keys()
        .position(|k| !questions.iter().any(|q| &q.id == k))
    {
        return refuse(
            Code::BadHistory,
            vec!["history".into()],
            format!("entry #{index} of history names a question id that is not in questions"),
        );
    }
    let per = questions
        .iter()
        .map(|q| match map.get(&q.id) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => refuse_type(
                Code::BadHistory,
                vec!["history".into(), q.id.clone()],
                "a question's history must be a string",
                other,
            ),
        })
        .collect::<Result<_, _>>()?;
    Ok(History::PerQuestion(per))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::test_support::*;
    use crate::error::Code;
    use crate::request::History;

    #[test]
    #[rustfmt::skip]
    fn history() {
        let shape = |got: &str| {
            format!("history must be a string or an object question id -> string, got {got}")
        };
        let entry = |got: &str| format!("a question's history must be a string, got {got}");
        let unknown = |i: usize| format!("entry #{i} of history names a question id that is not in questions");
        let two = |history: Value| json!({"state": STATE, "questions": {"q1": choice(), "q2": noul()}, "history": history});
        let late =
            json!({"state": STATE, "questions": {"q1": choice()}, "history": 3, "permutations": 0});
        run(vec![
            reject("history is a number", top("history", json!(3)), Code::BadHistory, &["history"], shape("a number")),
            reject("history is an array", top("history", json!(["x"])), Code::BadHistory, &["history"], shape("an array")),
            reject("history is a boolean", top("history", json!(false)), Code::BadHistory, &["history"], shape("a boolean")),
            reject("history names an unknown question", top("history", json!({"nope": "x"})), Code::BadHistory, &["history"], unknown(0)),
            reject("history entry is a number", top("history", json!({"q1": 1})), Code::BadHistory, &["history", "q1"], entry("a number")),
            reject("history entry is an object", top("history", json!({"q1": {"t": "x"}})), Code::BadHistory, &["history", "q1"], entry("an object")),
            reject("unknown ids before bad entries", top("history", json!({"q1": 1, "nope": "x"})), Code::BadHistory, &["history"], unknown(1)),
            reject("bad entries in question order", two(json!({"q2": 1, "q1": true})), Code::BadHistory, &["history", "q1"], entry("a boolean")),
            reject("permutations before history", late, Code::BadPermutations, &["permutations"], "permutations must be an integer from 1 to 8, got 0"),
            accept("no history", base()).holds(|r| *r.history() == History::None),
            accept("history null", top("history", Value::Null)).holds(|r| *r.history() == History::None),
            accept("history string", top("history", json!("earlier: billing"))).holds(|r| *r.history() == History::Shared("earlier: billing".into())),
            accept("history per question", top("history", json!({"q1": "earlier: billing"}))).holds(|r| *r.history() == History::PerQuestion(vec![Some("earlier: billing".into())])),
            accept("history per question with null", top("history", json!({"q1": null}))).holds(|r| *r.history() == History::PerQuestion(vec![None])),
            accept("history aligned with the questions", two(json!({"q2": "b"}))).holds(|r| *r.history() == History::PerQuestion(vec![None, Some("b".into())])),
            accept("history empty object", top("history", json!({}))).holds(|r| *r.history() == History::PerQuestion(vec![None])),
        ]);
    }
}
