//! Duplicate keys (`system_one_duplicate_key`, every door): a body whose JSON names a key
//! twice in one object. The parser ([`crate::json::parse_strict`]) finds it before any door
//! reads the body and says where ([`Duplicate`]); this rule tells the caller without
//! repeating the caller's text, since a repeated key is as likely a state key or an option
//! label (caller content, never in a message) as a field name.
//!
//! The `loc` follows the path into the body only while each step is the service's own
//! name or a number:
//!
//! * a top-level field some door reads (`state`, `questions`, `history`, `input`, …);
//! * right under `questions`, a question id (every other rule's `loc` names it too), and
//!   under that a question's own field (`type`, `instructions`, `criteria`, …);
//! * an array index, anywhere along that way.
//!
//! It stops at the first other step (a key inside the state, a history or an asset map, an
//! option label, an unknown field), and the message then says the object is further in.
//! The repeated key itself is named only when it is one of those field names (`state`
//! twice, `type` twice in one question); a repeated question id, label or state key is
//! named by its position in its object.

use super::fields::TOP_LEVEL_FIELDS;
use crate::error::{ApiError, Code};
use crate::json::{Duplicate, Step};

/// The other doors' top-level fields (`/v1/decisions`, `/v2/rerank`), which a `loc` may
/// name as well. A name missing here only makes a `loc` shorter, never leaks anything.
const OTHER_DOORS_FIELDS: &[&str] = &[
    "input",
    "prompt_cache_key",
    "prompt_cache_options",
    "safety_identifier",
    "query",
    "documents",
    "top_n",
    "max_tokens_per_doc",
    "return_documents",
    "relevant_spans",
];

/// A question's own fields, on `/v1/systemone` and `/v1/decisions`.
const QUESTION_FIELDS: &[&str] = &[
    "type",
    "instructions",
    "criteria",
    "name",
    "choices",
    "levels",
];

/// The refusal of a body that repeats a key, at the deepest `loc` that holds only the
/// service's own names and numbers.
pub fn duplicate_key(d: &Duplicate) -> ApiError {
    let (first, again) = (d.first, d.again);
    let mut loc = Vec::with_capacity(d.path.len() + 1);
    for (i, step) in d.path.iter().enumerate() {
        match nameable(&d.path[..i], step) {
            Some(name) => loc.push(name),
            None => {
                let within = if loc.is_empty() { " in the body" } else { "" };
                let msg = format!("an object{within} names a key twice (keys #{first} and #{again} of that object); a JSON object may not repeat a key");
                return ApiError::at(Code::DuplicateKey, loc, msg);
            }
        }
    }
    let msg = match d.path.as_slice() {
        [] | [Step::Key(_), _] if field_of(&d.path, &d.key) => {
            loc.push(d.key.clone());
            format!("given twice (keys #{first} and #{again} of its object); a field may be given once")
        }
        [Step::Key(q)] if q == "questions" => format!(
            "question #{again} has the same id as question #{first}; question ids must be unique"
        ),
        [Step::Key(q), _, Step::Key(c)] if q == "questions" && c == "criteria" => format!(
            "option #{again} has the same key as option #{first}; each key of criteria must be unique"
        ),
        [] => format!("key #{again} of the body repeats key #{first}; a JSON object may not repeat a key"),
        _ => format!("key #{again} repeats key #{first} of this object; a JSON object may not repeat a key"),
    };
    ApiError::at(Code::DuplicateKey, loc, msg)
}

/// How `step`, taken after `before`, may appear in a `loc`: `None` when it may be the
/// caller's own text.
fn nameable(before: &[Step], step: &Step) -> Option<String> {
    match (before, step) {
        (_, Step::Index(i)) => Some(i.to_string()),
        ([Step::Key(q)], Step::Key(id)) if q == "questions" => Some(id.clone()),
        (_, Step::Key(key)) if field_of(before, key) => Some(key.clone()),
        _ => None,
    }
}

/// Whether `key` is a field name of the object at `path`: a top-level field, or a
/// question's own field.
fn field_of(path: &[Step], key: &str) -> bool {
    match path {
        [] => TOP_LEVEL_FIELDS.contains(&key) || OTHER_DOORS_FIELDS.contains(&key),
        [Step::Key(q), _] => q == "questions" && QUESTION_FIELDS.contains(&key),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{parse_strict, JsonError};

    /// The refusal of `body`, which must repeat a key.
    fn refusal(body: &str) -> ApiError {
        match parse_strict(body.as_bytes()) {
            Err(JsonError::DuplicateKey(d)) => duplicate_key(&d),
            other => panic!("{body}: not a duplicate key: {other:?}"),
        }
    }

    const CANARY: &str = "CANARY-dup";

    #[test]
    #[rustfmt::skip]
    fn each_duplicate_is_located_without_the_callers_text() {
        let repeat = "a JSON object may not repeat a key";
        let within = |i: usize, j: usize| format!("an object names a key twice (keys #{i} and #{j} of that object); {repeat}");
        let rows: Vec<(&str, String, Vec<&str>, String)> = vec![
            ("a state key", format!(r#"{{"state": {{"{CANARY}": 1, "{CANARY}": 2}}}}"#), vec!["state"], format!("key #1 repeats key #0 of this object; {repeat}")),
            ("a key deep in the state", format!(r#"{{"state": {{"a": [{{"{CANARY}": 1, "x": 0, "{CANARY}": 2}}]}}}}"#), vec!["state"], within(0, 2)),
            ("a key in a state array", format!(r#"{{"state": [0, {{"{CANARY}": 1, "{CANARY}": 2}}]}}"#), vec!["state", "1"], format!("key #1 repeats key #0 of this object; {repeat}")),
            ("a top-level field", r#"{"state": "a", "questions": {}, "state": "b"}"#.into(), vec!["state"], "given twice (keys #0 and #2 of its object); a field may be given once".into()),
            ("an unknown top-level key", format!(r#"{{"{CANARY}": 1, "{CANARY}": 2}}"#), vec![], format!("key #1 of the body repeats key #0; {repeat}")),
            ("inside an unknown top-level key", format!(r#"{{"{CANARY}": {{"k": 1, "k": 2}}}}"#), vec![], format!("an object in the body names a key twice (keys #0 and #1 of that object); {repeat}")),
            ("a question id", r#"{"questions": {"q1": {}, "q2": {}, "q1": {}}}"#.into(), vec!["questions"], "question #2 has the same id as question #0; question ids must be unique".into()),
            ("a question's field", r#"{"questions": {"q1": {"type": "noul", "type": "choice"}}}"#.into(), vec!["questions", "q1", "type"], "given twice (keys #0 and #1 of its object); a field may be given once".into()),
            ("an unknown field of a question", format!(r#"{{"questions": {{"q1": {{"{CANARY}": 1, "{CANARY}": 2}}}}}}"#), vec!["questions", "q1"], format!("key #1 repeats key #0 of this object; {repeat}")),
            ("an option label", format!(r#"{{"questions": {{"q1": {{"criteria": {{"{CANARY}": 1, "b": 2, "{CANARY}": 3}}}}}}}}"#), vec!["questions", "q1", "criteria"], "option #2 has the same key as option #0; each key of criteria must be unique".into()),
            ("inside a description", format!(r#"{{"questions": {{"q1": {{"criteria": {{"{CANARY}": {{"k": 1, "k": 2}}}}}}}}}}"#), vec!["questions", "q1", "criteria"], within(0, 1)),
            ("inside a score level", r#"{"questions": {"q1": {"criteria": ["low", {"k": 1, "k": 2}]}}}"#.into(), vec!["questions", "q1", "criteria", "1"], format!("key #1 repeats key #0 of this object; {repeat}")),
            ("inside instructions", format!(r#"{{"questions": {{"q1": {{"instructions": {{"{CANARY}": 1, "{CANARY}": 2}}}}}}}}"#), vec!["questions", "q1", "instructions"], format!("key #1 repeats key #0 of this object; {repeat}")),
            ("a history key", format!(r#"{{"history": {{"{CANARY}": "a", "{CANARY}": "b"}}}}"#), vec!["history"], format!("key #1 repeats key #0 of this object; {repeat}")),
            ("an asset key", format!(r#"{{"assets": {{"{CANARY}": {{}}, "{CANARY}": {{}}}}}}"#), vec!["assets"], format!("key #1 repeats key #0 of this object; {repeat}")),
            ("a Decisions choice", format!(r#"{{"questions": [{{"choices": [{{"value": "{CANARY}", "value": 1}}]}}]}}"#), vec!["questions", "0", "choices", "0"], format!("key #1 repeats key #0 of this object; {repeat}")),
            ("a Decisions input item", format!(r#"{{"input": [{{"role": "user", "{CANARY}": 1, "{CANARY}": 2}}]}}"#), vec!["input", "0"], format!("key #2 repeats key #1 of this object; {repeat}")),
            ("a rerank document", format!(r#"{{"documents": ["a", {{"{CANARY}": 1, "{CANARY}": 2}}]}}"#), vec!["documents", "1"], format!("key #1 repeats key #0 of this object; {repeat}")),
        ];
        let mut problems = Vec::new();
        for (name, body, loc, msg) in rows {
            let e = refusal(&body);
            let loc: Vec<String> = loc.iter().map(|s| s.to_string()).collect();
            if e.code != Code::DuplicateKey || e.loc != loc || e.msg != msg {
                problems.push(format!("{name}: got {:?} at {:?}: {:?}", e.code, e.loc, e.msg));
            }
            if e.message().contains(CANARY) {
                problems.push(format!("{name}: the caller's key in {:?}", e.message()));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
