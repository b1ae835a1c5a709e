//! A batch input file's lines: OpenAI's JSONL (`{"custom_id", "method": "POST", "url",
//! "body"}` a line), read and checked whole before anything runs. A file that breaks a rule
//! is refused with the rule's code, naming the line by its number: never its text.
//!
//! A line's `body` is the door's business: it is kept as JSON text and handed to the door
//! as an online body would be, so a body the door refuses goes to the error file with the
//! door's error. Only what the strict parse of the whole line would lose (a key repeated
//! inside `body`, which a lenient parse silently merges) is kept as that refusal.

use std::collections::HashMap;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{ApiError, Code};
use crate::json::{parse_strict, Duplicate, JsonError, Step};
use crate::request::validate::duplicate_key;

/// Most lines of one batch, as OpenAI's.
pub const MAX_LINES: usize = 50_000;
/// Longest `custom_id`, in bytes.
pub const MAX_CUSTOM_ID_BYTES: usize = 512;
/// The front doors' routes, in this order: the router mounts them (`http/routes.rs`), the
/// ledger records refusals on them, and a batch may name one as its `endpoint` (and every
/// line as its `url`).
pub const ENDPOINTS: [&str; 4] = ["/v1/systemone", "/v1/decisions", "/v2/rerank", "/v1/rerank"];

/// One line of an input file.
#[derive(Debug, Clone)]
pub struct Line {
    /// The caller's id of the line.
    pub custom_id: String,
    /// The door it names.
    pub url: String,
    /// Its body, as JSON text.
    pub body: String,
    /// A hash of what its prompts' shared head holds (model and state), so the lines of one
    /// state run one after another: their reads find that head in the model server's
    /// prefix cache.
    pub state_key: String,
    /// The door's refusal known already (a key repeated in `body`).
    pub refusal: Option<ApiError>,
}

/// The lines of `bytes`, every rule checked; with `endpoint`, every `url` must be it.
/// Blank lines are skipped (a file may end with a newline).
pub fn parse(bytes: &[u8], endpoint: Option<&str>) -> Result<Vec<Line>, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        not_jsonl(line, "is not UTF-8 text")
    })?;
    let mut lines = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        if lines.len() == MAX_LINES {
            return Err(ApiError::new(
                Code::BatchTooManyLines,
                format!("the file has more than the limit of {MAX_LINES} lines"),
            ));
        }
        let line = one(raw, number, endpoint)?;
        if let Some(first) = seen.insert(line.custom_id.clone(), number) {
            return Err(ApiError::new(
                Code::BatchDuplicateCustomId,
                format!("line {number} repeats the custom_id of line {first}; each line's custom_id must be unique"),
            ));
        }
        lines.push(line);
    }
    if lines.is_empty() {
        return Err(not_jsonl(1, "is missing: the file has no line"));
    }
    Ok(lines)
}

/// Line `number`, its envelope checked.
fn one(raw: &str, number: usize, endpoint: Option<&str>) -> Result<Line, ApiError> {
    let (value, refusal) = read_line(raw, number)?;
    let Value::Object(object) = value else {
        return Err(ApiError::new(
            Code::BatchLineNotObject,
            format!("line {number} is not a JSON object"),
        ));
    };
    let custom_id = custom_id(&object, number)?;
    let url = url(&object, number, endpoint)?;
    let body = match object.get("body") {
        Some(body @ Value::Object(_)) => body,
        _ => {
            return Err(ApiError::new(
                Code::BatchLineNotObject,
                format!("line {number}: body must be a JSON object (the door's request body)"),
            ))
        }
    };
    Ok(Line {
        custom_id,
        state_key: state_key(body),
        body: body.to_string(),
        url,
        refusal,
    })
}

/// The line as JSON, and the door's refusal when only its body repeats a key.
fn read_line(raw: &str, number: usize) -> Result<(Value, Option<ApiError>), ApiError> {
    match parse_strict(raw.as_bytes()) {
        Ok(value) => Ok((value, None)),
        Err(JsonError::DuplicateKey(d)) if body_step(&d) => {
            let value = serde_json::from_str(raw).map_err(|e| not_jsonl(number, &syntax(&e)))?;
            let inner = Duplicate {
                path: d.path[1..].to_vec(),
                ..d
            };
            Ok((value, Some(duplicate_key(&inner))))
        }
        Err(JsonError::DuplicateKey(_)) => Err(ApiError::new(
            Code::DuplicateKey,
            format!("line {number} names a key twice; a JSON object may not repeat a key"),
        )),
        Err(JsonError::Syntax(e)) => Err(not_jsonl(number, &format!("is not JSON ({e})"))),
        Err(JsonError::OverBudget) => Err(not_jsonl(number, "is not JSON")),
    }
}

fn body_step(d: &Duplicate) -> bool {
    matches!(d.path.first(), Some(Step::Key(k)) if k == "body")
}

fn syntax(e: &serde_json::Error) -> String {
    format!("is not JSON (line 1, column {})", e.column())
}

fn custom_id(object: &Map<String, Value>, number: usize) -> Result<String, ApiError> {
    match object.get("custom_id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_CUSTOM_ID_BYTES => {
            Ok(id.clone())
        }
        Some(Value::String(id)) if !id.is_empty() => Err(ApiError::new(
            Code::BatchMissingCustomId,
            format!(
                "line {number}: custom_id is {} bytes, more than the limit of {MAX_CUSTOM_ID_BYTES}",
                id.len()
            ),
        )),
        _ => Err(ApiError::new(
            Code::BatchMissingCustomId,
            format!("line {number} has no custom_id (a non-empty string)"),
        )),
    }
}

fn url(
    object: &Map<String, Value>,
    number: usize,
    endpoint: Option<&str>,
) -> Result<String, ApiError> {
    let method = object.get("method").and_then(Value::as_str);
    if method != Some("POST") {
        return Err(ApiError::new(
            Code::BatchUrlMismatch,
            format!("line {number}: method must be \"POST\""),
        ));
    }
    let url = object.get("url").and_then(Value::as_str).unwrap_or("");
    let Some(door) = ENDPOINTS.iter().find(|e| **e == url) else {
        return Err(ApiError::new(
            Code::BatchUrlMismatch,
            format!(
                "line {number}: url is not one of the doors a batch runs ({})",
                ENDPOINTS.join(", ")
            ),
        ));
    };
    match endpoint {
        Some(endpoint) if endpoint != *door => Err(ApiError::new(
            Code::BatchUrlMismatch,
            format!("line {number}: url {door:?} is not the batch's endpoint {endpoint:?}"),
        )),
        _ => Ok((*door).to_string()),
    }
}

/// What decides a line's prompts' shared head: its model and its state (the rerank doors'
/// query, the Decisions door's input).
fn state_key(body: &Value) -> String {
    let mut hash = Sha256::new();
    for field in ["model", "state", "input", "query"] {
        if let Some(v) = body.get(field) {
            hash.update(field.as_bytes());
            hash.update(v.to_string().as_bytes());
        }
    }
    hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn not_jsonl(number: usize, what: &str) -> ApiError {
    ApiError::new(
        Code::BatchNotJsonl,
        format!("line {number} {what}; a batch file is JSON Lines: one JSON object a line"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(custom_id: &str, url: &str) -> String {
        serde_json::json!({"custom_id": custom_id, "method": "POST", "url": url,
                           "body": {"state": "s", "questions": {}}})
        .to_string()
    }

    #[test]
    fn each_rule_is_its_own_code_naming_the_line() {
        let ok = format!(
            "{}\n{}\n",
            line("a", "/v1/systemone"),
            line("b", "/v1/systemone")
        );
        assert_eq!(
            parse(ok.as_bytes(), Some("/v1/systemone"))
                .expect("valid")
                .len(),
            2
        );
        let cases: Vec<(String, Code, &str)> = vec![
            ("{not json".into(), Code::BatchNotJsonl, "line 1"),
            ("[1]".into(), Code::BatchLineNotObject, "line 1"),
            (
                format!(
                    "{}\n{}",
                    line("a", "/v1/systemone"),
                    line("a", "/v1/systemone")
                ),
                Code::BatchDuplicateCustomId,
                "line 2",
            ),
            (
                line("", "/v1/systemone"),
                Code::BatchMissingCustomId,
                "line 1",
            ),
            (line("a", "/v2/rerank"), Code::BatchUrlMismatch, "line 1"),
            ("".into(), Code::BatchNotJsonl, "line 1"),
        ];
        for (text, code, names) in cases {
            let e = parse(text.as_bytes(), Some("/v1/systemone")).expect_err("refused");
            assert_eq!(e.code, code, "{text}");
            assert!(e.msg.contains(names), "{}", e.msg);
        }
    }

    #[test]
    fn a_key_repeated_in_a_body_is_the_doors_refusal_not_the_files() {
        let text = r#"{"custom_id":"a","method":"POST","url":"/v1/systemone","body":{"state":"x","state":"y"}}"#;
        let lines = parse(text.as_bytes(), None).expect("the file is valid");
        let refusal = lines[0].refusal.as_ref().expect("the door's refusal");
        assert_eq!(refusal.code, Code::DuplicateKey);
    }

    #[test]
    fn one_line_over_the_cap_is_refused() {
        let text = format!("{}\n", line("x", "/v1/systemone")).repeat(1);
        let many: String = (0..=MAX_LINES)
            .map(|i| format!("{}\n", line(&i.to_string(), "/v1/systemone")))
            .collect();
        assert!(parse(text.as_bytes(), None).is_ok());
        assert_eq!(
            parse(many.as_bytes(), None).expect_err("over").code,
            Code::BatchTooManyLines
        );
    }
}
