//! Every validation rule of the public contract (`/work/shared/spec/contract.md`), of
//! `src/validate.rs` and of `src/api/body.rs`, as one table of requests over HTTP.
//!
//! Each row is a request body (raw bytes or JSON), optional headers, the service flags it
//! runs under, and what must come back. For every refused row the runner checks the status,
//! the `x-systemone-error-code` header, `error.code` (equal to the header), a non-empty
//! `error.message` and `error.type`, for a 422 a FastAPI-style `detail` list whose first
//! `loc` starts with `"body"` (and, where the row says so, equals a precise path), the
//! substrings the message must name (limit, value), and that the fake vLLM server received
//! no chat request at all. For every accepted row it checks a 200 with one answer per
//! question, in question order, of the asked type, and that the fake received exactly the
//! `usage.upstream_requests` the answer reports.

mod common;

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use common::fake_vllm::FakeVllm;
use common::PNG;

/// A request body: JSON to serialise, or exact bytes.
#[derive(Debug, Clone)]
enum Body {
    Json(Value),
    Raw(Vec<u8>),
}

impl From<Value> for Body {
    fn from(v: Value) -> Self {
        Body::Json(v)
    }
}

impl From<&str> for Body {
    fn from(s: &str) -> Self {
        Body::Raw(s.as_bytes().to_vec())
    }
}

impl From<String> for Body {
    fn from(s: String) -> Self {
        Body::Raw(s.into_bytes())
    }
}

impl From<Vec<u8>> for Body {
    fn from(b: Vec<u8>) -> Self {
        Body::Raw(b)
    }
}

impl Body {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Body::Json(v) => v.to_string().into_bytes(),
            Body::Raw(b) => b.clone(),
        }
    }
}

/// What a row expects back.
#[derive(Debug, Clone)]
enum Expect {
    /// 200; `upstream` is the exact number of chat requests, when the row pins it.
    Ok { upstream: Option<usize> },
    /// An error with this status and code.
    Err {
        status: u16,
        code: &'static str,
        /// The exact `detail[0].loc` of a 422 (including the leading `"body"`), if pinned.
        loc: Option<Vec<String>>,
        /// Substrings `error.message` must contain (the limit, the value).
        mentions: Vec<String>,
    },
}

/// One row of the table.
#[derive(Debug, Clone)]
struct Row {
    name: String,
    body: Body,
    /// `Content-Type` to send; `None` sends none.
    content_type: Option<&'static str>,
    headers: Vec<(&'static str, String)>,
    /// Extra service flags; rows with the same flags share one service.
    flags: Vec<&'static str>,
    expect: Expect,
}

/// A row that must be answered with 200.
fn pass(name: impl Into<String>, body: impl Into<Body>) -> Row {
    Row {
        name: name.into(),
        body: body.into(),
        content_type: Some("application/json"),
        headers: Vec::new(),
        flags: Vec::new(),
        expect: Expect::Ok { upstream: None },
    }
}

/// A row that must be refused with `status` and `code`.
fn fail(name: impl Into<String>, body: impl Into<Body>, status: u16, code: &'static str) -> Row {
    Row {
        expect: Expect::Err {
            status,
            code,
            loc: None,
            mentions: Vec::new(),
        },
        ..pass(name, body)
    }
}

/// A row whose raw body repeats `key`: refused with 422 `system_one_duplicate_key` naming it.
fn duplicate(name: &str, body: &str, key: &str) -> Row {
    fail(name, body, 422, "system_one_duplicate_key").mentions(&[key])
}

impl Row {
    /// Pins the exact `detail[0].loc` (the leading `"body"` is added here).
    fn at(mut self, path: &[&str]) -> Self {
        match &mut self.expect {
            Expect::Err { loc, .. } => {
                let mut l = vec!["body".to_string()];
                l.extend(path.iter().map(|s| s.to_string()));
                *loc = Some(l);
            }
            Expect::Ok { .. } => panic!("{}: a passing row has no loc", self.name),
        }
        self
    }

    /// Substrings the error message must contain.
    fn mentions(mut self, words: &[&str]) -> Self {
        match &mut self.expect {
            Expect::Err { mentions, .. } => mentions.extend(words.iter().map(|s| s.to_string())),
            Expect::Ok { .. } => panic!("{}: a passing row has no message", self.name),
        }
        self
    }

    /// Pins the number of upstream chat requests of a passing row.
    fn upstream(mut self, n: usize) -> Self {
        match &mut self.expect {
            Expect::Ok { upstream } => *upstream = Some(n),
            Expect::Err { .. } => panic!("{}: a refused row sends nothing", self.name),
        }
        self
    }

    fn content_type(mut self, ct: Option<&'static str>) -> Self {
        self.content_type = ct;
        self
    }

    fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    fn flags(mut self, flags: &[&'static str]) -> Self {
        self.flags = flags.to_vec();
        self
    }
}

const STATE: &str = "A customer writes: my card was charged twice, please refund one charge.";

/// A valid choice question.
fn choice() -> Value {
    json!({"type": "choice", "instructions": "Which team handles this?",
           "criteria": {"billing": "money questions", "bug": "defects", "other": null}})
}

/// A valid noul question.
fn noul() -> Value {
    json!({"type": "noul", "instructions": "Does the customer want a refund?"})
}

/// A valid score question.
fn score() -> Value {
    json!({"type": "score", "instructions": "How urgent is it?",
           "criteria": ["Routine", "Soon", "Immediate"]})
}

/// A valid request with one question `q1`.
fn base() -> Value {
    json!({"state": STATE, "questions": {"q1": choice()}})
}

/// `base()` with one top-level field set.
fn top(field: &str, value: Value) -> Value {
    let mut b = base();
    b[field] = value;
    b
}

/// `base()` without one top-level field.
fn without(field: &str) -> Value {
    let mut b = base();
    b.as_object_mut().expect("object").remove(field);
    b
}

/// A request whose only question `q1` is `q`.
fn q1(q: Value) -> Value {
    json!({"state": STATE, "questions": {"q1": q}})
}

/// A request whose only question `q1` is `q` with `field` set (or removed, for `None`).
fn q1_with(q: Value, field: &str, value: Option<Value>) -> Value {
    let mut q = q;
    let obj = q.as_object_mut().expect("question object");
    match value {
        Some(v) => {
            obj.insert(field.to_string(), v);
        }
        None => {
            obj.remove(field);
        }
    }
    q1(q)
}

/// A choice on `q1` with these criteria.
fn choice_criteria(criteria: Value) -> Value {
    q1_with(choice(), "criteria", Some(criteria))
}

/// A choice on `q1` with `n` options labelled `o0`, `o1`, …
fn choice_n(n: usize) -> Value {
    let criteria: Map<String, Value> = (0..n).map(|i| (format!("o{i}"), Value::Null)).collect();
    choice_criteria(Value::Object(criteria))
}

/// A choice on `q1` with the labels `["ok", label]`.
fn label(label: &str) -> Value {
    let mut criteria = Map::new();
    criteria.insert("ok".into(), json!("fine"));
    criteria.insert(label.into(), json!("the label under test"));
    choice_criteria(Value::Object(criteria))
}

/// A score on `q1` with these levels.
fn levels(levels: Value) -> Value {
    q1_with(score(), "criteria", Some(levels))
}

/// A score on `q1` with `n` string levels.
fn score_n(n: usize) -> Value {
    levels(Value::Array(
        (0..n).map(|i| json!(format!("level {i}"))).collect(),
    ))
}

/// `n` valid noul questions `q0`, `q1`, …
fn n_questions(n: usize) -> Value {
    let questions: Map<String, Value> = (0..n).map(|i| (format!("q{i}"), noul())).collect();
    json!({"state": STATE, "questions": questions})
}

fn rows() -> Vec<Row> {
    let long_state = "x".repeat(2_000);
    vec![
        // ---- 400: not JSON --------------------------------------------------------------
        fail("not json", "this is not json", 400, "system_one_invalid_json"),
        fail("empty body", "", 400, "system_one_invalid_json"),
        fail("truncated json", r#"{"state": "x", "questions": {"#, 400, "system_one_invalid_json"),
        fail(
            "trailing garbage",
            format!("{} garbage", base()),
            400,
            "system_one_invalid_json",
        ),
        fail("two json values", format!("{} {{}}", base()), 400, "system_one_invalid_json"),
        fail(
            "invalid utf-8",
            b"{\"state\": \"\xff\xfe\", \"questions\": {}}".to_vec(),
            400,
            "system_one_invalid_json",
        ),
        fail("nan literal", r#"{"state": NaN, "questions": {}}"#, 400, "system_one_invalid_json"),
        // ---- 422: body shape -------------------------------------------------------------
        fail("body is an array", json!([base()]), 422, "system_one_invalid_body").at(&[]),
        fail("body is a string", json!("state"), 422, "system_one_invalid_body").at(&[]),
        fail("body is null", "null", 422, "system_one_invalid_body").at(&[]),
        fail("body is a number", "42", 422, "system_one_invalid_body").at(&[]),
        // ---- 422: duplicate keys at any level ---------------------------------------------
        duplicate(
            "duplicate top-level key",
            r#"{"state": "a", "state": "b", "questions": {"q1": {"type": "noul", "instructions": "x"}}}"#,
            "state",
        ),
        duplicate(
            "duplicate question id",
            r#"{"state": "a", "questions": {"dupq": {"type": "noul", "instructions": "x"}, "dupq": {"type": "noul", "instructions": "y"}}}"#,
            "dupq",
        ),
        duplicate(
            "duplicate key inside a question",
            r#"{"state": "a", "questions": {"q1": {"type": "noul", "type": "choice", "instructions": "x"}}}"#,
            "type",
        ),
        duplicate(
            "duplicate label inside criteria",
            r#"{"state": "a", "questions": {"q1": {"type": "choice", "criteria": {"dupl": "x", "other": "z", "dupl": "y"}}}}"#,
            "dupl",
        ),
        duplicate(
            "duplicate key deep inside the state",
            r#"{"state": {"a": [{"deep": 1, "deep": 2}]}, "questions": {"q1": {"type": "noul", "instructions": "x"}}}"#,
            "deep",
        ),
        // ---- 422: model ------------------------------------------------------------------
        fail("unknown model", top("model", json!("gpt-4o")), 422, "system_one_unsupported_model")
            .at(&["model"])
            .mentions(&["gpt-4o", "glm-5.3-flash"]),
        fail("empty model name", top("model", json!("")), 422, "system_one_unsupported_model")
            .at(&["model"]),
        fail("model is a number", top("model", json!(7)), 422, "system_one_unsupported_model")
            .at(&["model"]),
        fail("model is a boolean", top("model", json!(true)), 422, "system_one_unsupported_model")
            .at(&["model"]),
        fail("model is an array", top("model", json!(["glm-5.3-flash"])), 422, "system_one_unsupported_model")
            .at(&["model"]),
        fail("model is an object", top("model", json!({"name": "glm-5.3-flash"})), 422, "system_one_unsupported_model")
            .at(&["model"]),
        // ---- 422: state ------------------------------------------------------------------
        fail("missing state", without("state"), 422, "system_one_missing_state").at(&["state"]),
        fail("empty state", top("state", json!("")), 422, "system_one_invalid_state").at(&["state"]),
        fail("whitespace state", top("state", json!(" \n\t ")), 422, "system_one_invalid_state")
            .at(&["state"]),
        fail("null state", top("state", Value::Null), 422, "system_one_invalid_state").at(&["state"]),
        fail("integer state", top("state", json!(42)), 422, "system_one_invalid_state").at(&["state"]),
        fail("float state", top("state", json!(0.5)), 422, "system_one_invalid_state").at(&["state"]),
        fail("true state", top("state", json!(true)), 422, "system_one_invalid_state").at(&["state"]),
        fail("false state", top("state", json!(false)), 422, "system_one_invalid_state").at(&["state"]),
        fail(
            "state with a float overflowing f64",
            r#"{"state": {"amount": 1e400}, "questions": {"q1": {"type": "noul", "instructions": "x"}}}"#,
            422,
            "system_one_invalid_number",
        )
        .at(&["state"]),
        fail(
            "state with a negative float overflowing f64",
            r#"{"state": [1, -2.5e999], "questions": {"q1": {"type": "noul", "instructions": "x"}}}"#,
            422,
            "system_one_invalid_number",
        )
        .at(&["state"]),
        // ---- 422: questions --------------------------------------------------------------
        fail("missing questions", without("questions"), 422, "system_one_invalid_questions")
            .at(&["questions"]),
        fail("questions is an array", top("questions", json!([choice()])), 422, "system_one_invalid_questions")
            .at(&["questions"]),
        fail("questions is a string", top("questions", json!("q1")), 422, "system_one_invalid_questions")
            .at(&["questions"]),
        fail("questions is null", top("questions", Value::Null), 422, "system_one_invalid_questions")
            .at(&["questions"]),
        fail("no questions", top("questions", json!({})), 422, "system_one_no_questions")
            .at(&["questions"])
            .mentions(&["0"]),
        fail("65 questions", n_questions(65), 422, "system_one_too_many_questions")
            .at(&["questions"])
            .mentions(&["65", "64"]),
        fail(
            "questions over --max-questions",
            n_questions(3),
            422,
            "system_one_too_many_questions",
        )
        .flags(&["--max-questions", "2"])
        .at(&["questions"])
        .mentions(&["3", "2"]),
        fail(
            "empty question id",
            top("questions", json!({"": noul()})),
            422,
            "system_one_invalid_question_id",
        )
        .at(&["questions", ""]),
        fail("question is a string", q1(json!("noul")), 422, "system_one_invalid_question")
            .at(&["questions", "q1"]),
        fail("question is null", q1(Value::Null), 422, "system_one_invalid_question")
            .at(&["questions", "q1"]),
        fail("question is an array", q1(json!([noul()])), 422, "system_one_invalid_question")
            .at(&["questions", "q1"]),
        fail("question without type", q1_with(noul(), "type", None), 422, "system_one_invalid_question")
            .at(&["questions", "q1", "type"]),
        fail("type is a number", q1_with(noul(), "type", Some(json!(1))), 422, "system_one_invalid_question")
            .at(&["questions", "q1", "type"]),
        fail("type box", q1_with(noul(), "type", Some(json!("box"))), 422, "system_one_unsupported_question_type")
            .at(&["questions", "q1", "type"]),
        fail("type upper-case", q1_with(choice(), "type", Some(json!("CHOICE"))), 422, "system_one_unsupported_question_type")
            .at(&["questions", "q1", "type"]),
        fail("type empty", q1_with(noul(), "type", Some(json!(""))), 422, "system_one_unsupported_question_type")
            .at(&["questions", "q1", "type"]),
        fail("unknown field in a question", q1_with(choice(), "options", Some(json!(["a"]))), 422, "system_one_unknown_field")
            .at(&["questions", "q1", "options"]),
        fail(
            "second question bad, first valid",
            json!({"state": STATE, "questions": {"q1": choice(), "q2": {"type": "box"}}}),
            422,
            "system_one_unsupported_question_type",
        )
        .at(&["questions", "q2", "type"]),
        fail("instructions is a number", q1_with(noul(), "instructions", Some(json!(3))), 422, "system_one_invalid_instructions")
            .at(&["questions", "q1", "instructions"]),
        fail("instructions is a boolean", q1_with(choice(), "instructions", Some(json!(false))), 422, "system_one_invalid_instructions")
            .at(&["questions", "q1", "instructions"]),
        // ---- 422: choice -----------------------------------------------------------------
        fail("choice without criteria", q1_with(choice(), "criteria", None), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("choice criteria is an array", choice_criteria(json!(["a", "b"])), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("choice criteria is a string", choice_criteria(json!("a")), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("choice criteria is null", choice_criteria(Value::Null), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("choice with 0 options", choice_n(0), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"])
            .mentions(&["0"]),
        fail("choice with 256 options", choice_n(256), 422, "system_one_too_many_options")
            .at(&["questions", "q1", "criteria"])
            .mentions(&["256", "255"]),
        fail("choice with 255 options (model has 191 labels)", choice_n(255), 422, "system_one_too_many_options")
            .at(&["questions", "q1", "criteria"])
            .mentions(&["255", "191"]),
        fail("choice with 192 options (model has 191 labels)", choice_n(192), 422, "system_one_too_many_options")
            .at(&["questions", "q1", "criteria"])
            .mentions(&["192", "191"]),
        fail("choice over --max-options", choice_n(4), 422, "system_one_too_many_options")
            .flags(&["--max-options", "3"])
            .at(&["questions", "q1", "criteria"])
            .mentions(&["4", "3"]),
        fail("empty label", label(""), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("blank label", label("   "), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("label of 129 characters", label(&"l".repeat(129)), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"])
            .mentions(&["129", "128"]),
        fail("label with a newline", label("two\nlines"), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("label with a carriage return", label("a\rb"), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("label with a tab", label("a\tb"), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("label with a C0 control", label("a\u{1}b"), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("label with DEL", label("a\u{7f}b"), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("label with NEL (C1 control)", label("a\u{85}b"), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("label with U+2028", label("a\u{2028}b"), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("label with U+2029", label("a\u{2029}b"), 422, "system_one_invalid_label")
            .at(&["questions", "q1", "criteria"]),
        fail("description is a number", choice_criteria(json!({"a": "x", "b": 2})), 422, "system_one_invalid_description")
            .at(&["questions", "q1", "criteria"]),
        fail("description is a boolean", choice_criteria(json!({"a": true, "b": "y"})), 422, "system_one_invalid_description")
            .at(&["questions", "q1", "criteria"]),
        // ---- 422: noul -------------------------------------------------------------------
        fail("noul with nothing to ask", q1(json!({"type": "noul"})), 422, "system_one_nothing_to_ask")
            .at(&["questions", "q1"]),
        fail(
            "noul with blank instructions and empty descriptions",
            q1(json!({"type": "noul", "instructions": "  ", "criteria": {"true": "", "false": null}})),
            422,
            "system_one_nothing_to_ask",
        )
        .at(&["questions", "q1"]),
        fail(
            "noul with null instructions and null criteria",
            q1(json!({"type": "noul", "instructions": null, "criteria": null})),
            422,
            "system_one_nothing_to_ask",
        )
        .at(&["questions", "q1"]),
        fail(
            "noul criteria with another key",
            q1_with(noul(), "criteria", Some(json!({"true": "yes", "maybe": "?"}))),
            422,
            "system_one_invalid_criteria",
        )
        .at(&["questions", "q1", "criteria"]),
        fail("noul criteria is a string", q1_with(noul(), "criteria", Some(json!("yes"))), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("noul criteria is an array", q1_with(noul(), "criteria", Some(json!(["no", "yes"]))), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("noul description is a number", q1_with(noul(), "criteria", Some(json!({"true": 1}))), 422, "system_one_invalid_description")
            .at(&["questions", "q1", "criteria"]),
        fail("noul description is a boolean", q1_with(noul(), "criteria", Some(json!({"false": false}))), 422, "system_one_invalid_description")
            .at(&["questions", "q1", "criteria"]),
        // ---- 422: score ------------------------------------------------------------------
        fail("score without criteria", q1_with(score(), "criteria", None), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("score criteria is an object", levels(json!({"0": "low"})), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("score with 0 levels", levels(json!([])), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"])
            .mentions(&["0"]),
        fail("score with 11 levels", score_n(11), 422, "system_one_too_many_levels")
            .at(&["questions", "q1", "criteria"])
            .mentions(&["11", "10"]),
        fail("score over --max-levels", score_n(4), 422, "system_one_too_many_levels")
            .flags(&["--max-levels", "3"])
            .at(&["questions", "q1", "criteria"])
            .mentions(&["4", "3"]),
        fail("score with a null level", levels(json!(["low", null, "high"])), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("score with a numeric level", levels(json!(["low", 1, "high"])), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        fail("score with a boolean level", levels(json!([true, "high"])), 422, "system_one_invalid_criteria")
            .at(&["questions", "q1", "criteria"]),
        // ---- 422: temperature ------------------------------------------------------------
        fail("temperature 0", top("temperature", json!(0)), 422, "system_one_bad_temperature")
            .at(&["temperature"]),
        fail("temperature 0.0", top("temperature", json!(0.0)), 422, "system_one_bad_temperature")
            .at(&["temperature"]),
        fail("temperature negative", top("temperature", json!(-1.5)), 422, "system_one_bad_temperature")
            .at(&["temperature"])
            .mentions(&["-1.5"]),
        fail("temperature string", top("temperature", json!("1")), 422, "system_one_bad_temperature")
            .at(&["temperature"]),
        fail("temperature boolean", top("temperature", json!(true)), 422, "system_one_bad_temperature")
            .at(&["temperature"]),
        fail(
            "temperature 1e400",
            format!(r#"{{"state": "s", "temperature": 1e400, "questions": {{"q1": {}}}}}"#, noul()),
            422,
            "system_one_bad_temperature",
        )
        .at(&["temperature"])
        .mentions(&["temperature"]),
        // ---- 422: layout, permutations ---------------------------------------------------
        fail("layout fast", top("layout", json!("fast")), 422, "system_one_bad_layout").at(&["layout"]),
        fail("layout upper-case", top("layout", json!("COST")), 422, "system_one_bad_layout").at(&["layout"]),
        fail("layout number", top("layout", json!(1)), 422, "system_one_bad_layout").at(&["layout"]),
        fail("permutations 0", top("permutations", json!(0)), 422, "system_one_bad_permutations")
            .at(&["permutations"])
            .mentions(&["0", "8"]),
        fail("permutations 9", top("permutations", json!(9)), 422, "system_one_bad_permutations")
            .at(&["permutations"])
            .mentions(&["9", "8"]),
        fail("permutations -1", top("permutations", json!(-1)), 422, "system_one_bad_permutations")
            .at(&["permutations"]),
        fail("permutations 2.5", top("permutations", json!(2.5)), 422, "system_one_bad_permutations")
            .at(&["permutations"]),
        fail("permutations string", top("permutations", json!("2")), 422, "system_one_bad_permutations")
            .at(&["permutations"]),
        // ---- 422: history ----------------------------------------------------------------
        fail("history is a number", top("history", json!(3)), 422, "system_one_bad_history").at(&["history"]),
        fail("history is an array", top("history", json!(["x"])), 422, "system_one_bad_history").at(&["history"]),
        fail("history names an unknown question", top("history", json!({"nope": "x"})), 422, "system_one_bad_history")
            .at(&["history", "nope"]),
        fail("history entry is a number", top("history", json!({"q1": 1})), 422, "system_one_bad_history")
            .at(&["history", "q1"]),
        // ---- 422: images -----------------------------------------------------------------
        fail("images on a text-only model", top("images", json!(["iVBORw0KGgo="])), 422, "system_one_images_unsupported")
            .at(&["images"]),
        fail(
            "assets on a text-only model",
            top("assets", json!({"<image:00ff>": {"type": "image", "format": "png", "data_base64": "iVBORw0KGgo="}})),
            422,
            "system_one_images_unsupported",
        )
        .at(&["assets"]),
        fail("images is a string", top("images", json!("iVBORw0KGgo=")), 422, "system_one_invalid_body")
            .at(&["images"]),
        fail("assets is an array", top("assets", json!([])), 422, "system_one_invalid_body").at(&["assets"]),
        // ---- 415: content type and encoding ----------------------------------------------
        fail("content-type text/plain", base(), 415, "system_one_unsupported_media_type")
            .content_type(Some("text/plain")),
        fail("content-type form", base(), 415, "system_one_unsupported_media_type")
            .content_type(Some("application/x-www-form-urlencoded")),
        fail("content-encoding br", base(), 415, "system_one_unsupported_encoding")
            .header("content-encoding", "br")
            .mentions(&["br"]),
        // ---- 413: sizes ------------------------------------------------------------------
        fail("body over --max-body-bytes", top("state", json!("b".repeat(1_500))), 413, "system_one_body_too_large")
            .flags(&["--max-body-bytes", "1000"])
            .mentions(&["1000"]),
        fail("state over --max-state-tokens", top("state", json!("s".repeat(200))), 413, "system_one_state_too_large")
            .flags(&["--max-state-tokens", "100"])
            .mentions(&["100"]),
        fail(
            "question over --max-question-tokens",
            q1_with(noul(), "instructions", Some(json!("i".repeat(600)))),
            413,
            "system_one_question_too_large",
        )
        .flags(&["--max-question-tokens", "400"])
        .mentions(&["400"]),
        fail(
            "request over --max-request-tokens",
            json!({"state": long_state, "questions": {"q1": choice(), "q2": noul()}, "permutations": 3}),
            413,
            "system_one_request_too_large",
        )
        .flags(&["--max-request-tokens", "5000"])
        .mentions(&["5000"]),
        // ---- 200: what the contract accepts ----------------------------------------------
        pass("valid choice", base()),
        pass("valid noul", q1(noul())).upstream(1),
        pass("valid score", q1(score())).upstream(1),
        pass("default model by name", top("model", json!("glm-5.3-flash"))),
        pass("default model by alias jev-latest", top("model", json!("jev-latest"))),
        pass("model null means the default", top("model", Value::Null)),
        pass("state object", top("state", json!({"ticket": {"text": "refund", "amount": 1e300, "n": 18446744073709551616u128}}))),
        pass("state array", top("state", json!(["refund", 2, null, true]))),
        pass("state empty object", top("state", json!({}))),
        pass("state empty array", top("state", json!([]))),
        pass("state non-blank string", top("state", json!(" x "))),
        pass(
            "three question types in order",
            json!({"state": STATE, "questions": {"zeta": score(), "alpha": choice(), "mid": noul()}}),
        )
        .upstream(3),
        pass("64 questions", n_questions(64)).upstream(64),
        pass("191 options (the model's capacity)", choice_n(191)).upstream(2),
        pass("1-option choice asks nothing", choice_n(1)).upstream(0),
        pass("label of 128 characters", label(&"l".repeat(128))),
        pass("label of 128 two-byte characters", label(&"é".repeat(128))),
        pass("label with inner spaces and unicode", label("Billing & Rückerstattung ✓")),
        pass("descriptions object, array, null", choice_criteria(json!({"a": {"k": 1}, "b": [1, 2], "c": null}))),
        pass("instructions object", q1_with(choice(), "instructions", Some(json!({"task": "route"})))),
        pass("instructions array", q1_with(choice(), "instructions", Some(json!(["route", "it"])))),
        pass("instructions null on a choice", q1_with(choice(), "instructions", Some(Value::Null))),
        pass("noul with only a true description", q1(json!({"type": "noul", "criteria": {"true": "wants a refund"}}))).upstream(1),
        pass("noul with only a false description", q1(json!({"type": "noul", "criteria": {"false": "no refund"}}))).upstream(1),
        pass("noul with null criteria", q1_with(noul(), "criteria", Some(Value::Null))).upstream(1),
        pass("score with 10 levels", score_n(10)).upstream(1),
        pass("score with 1 level asks nothing", score_n(1)).upstream(0),
        pass("score levels of every allowed type", levels(json!(["low", {"mid": 1}, ["high"]]))).upstream(1),
        pass("temperature 1", top("temperature", json!(1))),
        pass("temperature 0.25", top("temperature", json!(0.25))),
        pass("temperature tiny", top("temperature", json!(1e-300))),
        pass("temperature null", top("temperature", Value::Null)),
        pass("layout cost", top("layout", json!("cost"))),
        pass("layout accuracy", top("layout", json!("accuracy"))),
        pass("permutations 1", top("permutations", json!(1))).upstream(1),
        pass("permutations 8", top("permutations", json!(8))).upstream(3),
        pass("history string", top("history", json!("earlier: billing"))),
        pass("history per question", top("history", json!({"q1": "earlier: billing"}))),
        pass("history per question with null", top("history", json!({"q1": null}))),
        pass("images empty", top("images", json!([]))),
        pass("assets empty", top("assets", json!({}))),
        pass("images and assets null", json!({"state": STATE, "questions": {"q1": choice()}, "images": null, "assets": null})),
        pass("keep_alive ignored", top("keep_alive", json!("5m"))),
        pass("unknown top-level fields ignored", top("extra", json!({"anything": [1, {"x": null}]}))),
        pass("missing content-type accepted", base()).content_type(None),
        pass("content-type with charset", base()).content_type(Some("application/json; charset=utf-8")),
        pass("content-encoding identity", base()).header("content-encoding", "identity"),
        pass("any bearer value without configured keys", base()).header("authorization", "Bearer whatever"),
        pass("pretty-printed body", serde_json::to_string_pretty(&base()).expect("json")),
        // ---- 200: the same limits, under them ----------------------------------------------
        pass("body under --max-body-bytes", base()).flags(&["--max-body-bytes", "1000"]),
        pass("state under --max-state-tokens", top("state", json!("s".repeat(50)))).flags(&["--max-state-tokens", "100"]),
        pass("question under --max-question-tokens", q1(noul())).flags(&["--max-question-tokens", "400"]),
        pass(
            "request under --max-request-tokens",
            json!({"state": STATE, "questions": {"q1": choice(), "q2": noul()}}),
        )
        .flags(&["--max-request-tokens", "5000"]),
        pass("questions at --max-questions", n_questions(2)).flags(&["--max-questions", "2"]),
        pass("options at --max-options", choice_n(3)).flags(&["--max-options", "3"]),
        pass("levels at --max-levels", score_n(3)).flags(&["--max-levels", "3"]),
    ]
}

/// The question ids and types of a passing row's body, in order.
fn asked(body: &Body) -> Vec<(String, String)> {
    let v = match body {
        Body::Json(v) => v.clone(),
        Body::Raw(b) if b.starts_with(format!("--{BOUNDARY}").as_bytes()) => {
            serde_json::from_slice(&multipart_request_part(b))
                .expect("a passing multipart row's request part is JSON")
        }
        Body::Raw(b) => serde_json::from_slice(b)
            .or_else(|_| {
                // A compressed row: decompress it the way the service must.
                let mut text = Vec::new();
                let gz = std::io::Read::read_to_end(
                    &mut flate2::read::MultiGzDecoder::new(&b[..]),
                    &mut text,
                );
                let plain = if gz.is_ok() {
                    text
                } else {
                    zstd::decode_all(&b[..]).expect("zstd")
                };
                serde_json::from_slice(&plain)
            })
            .expect("a passing raw row is JSON, possibly compressed"),
    };
    questions_of(&v)
}

/// The `request` part of a body written by [`multipart`].
fn multipart_request_part(body: &[u8]) -> Vec<u8> {
    let find = |from: usize, needle: &[u8]| {
        body[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|i| from + i)
    };
    let start =
        find(0, b"Content-Disposition: form-data; name=\"request\"").expect("a request part");
    let data = find(start, b"\r\n\r\n").expect("part headers end") + 4;
    let end = find(data, format!("\r\n--{BOUNDARY}").as_bytes()).expect("part end");
    body[data..end].to_vec()
}

fn questions_of(v: &Value) -> Vec<(String, String)> {
    v["questions"]
        .as_object()
        .expect("questions")
        .iter()
        .map(|(id, q)| (id.clone(), q["type"].as_str().expect("type").to_string()))
        .collect()
}

/// Sends one row and returns every way it differs from its expectation.
async fn check(row: &Row, service: &common::Service, fake: &FakeVllm) -> Vec<String> {
    let mut problems = Vec::new();
    let mut p = |s: String| problems.push(format!("{}: {s}", row.name));
    let before = fake.chat_requests();
    let mut request = service
        .client
        .post(service.url("/v1/systemone"))
        .body(row.body.bytes());
    if let Some(ct) = row.content_type {
        request = request.header("content-type", ct);
    }
    for (name, value) in &row.headers {
        request = request.header(*name, value.as_str());
    }
    let response = request.send().await.expect("service answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let sent = fake.chat_requests() - before;
    let header_code = headers
        .get("x-systemone-error-code")
        .map(|v| v.to_str().expect("ascii").to_string());
    match headers.get("x-typesafe-request-id").map(|v| v.to_str()) {
        Some(Ok(id)) if id.starts_with("req_") => {
            if headers.get("x-request-id").map(|v| v.as_bytes()) != Some(id.as_bytes()) {
                p("x-request-id differs from x-typesafe-request-id".into());
            }
        }
        other => p(format!("bad x-typesafe-request-id {other:?}")),
    }
    let body: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            p(format!("status {status}, body is not JSON ({e}): {text:?}"));
            return problems;
        }
    };
    match &row.expect {
        Expect::Ok { upstream } => {
            if status != 200 {
                p(format!("expected 200, got {status}: {body}"));
                return problems;
            }
            if let Some(code) = header_code {
                p(format!("a 200 carries x-systemone-error-code {code}"));
            }
            let want = asked(&row.body);
            let answers = body["answers"].as_object().cloned().unwrap_or_default();
            let got: Vec<(String, String)> = answers
                .iter()
                .map(|(id, a)| (id.clone(), a["type"].as_str().unwrap_or("").to_string()))
                .collect();
            if got != want {
                p(format!("answers {got:?}, asked {want:?}"));
            }
            let reported = body["usage"]["upstream_requests"].as_u64();
            if reported != Some(sent as u64) {
                p(format!(
                    "usage.upstream_requests {reported:?}, fake saw {sent}"
                ));
            }
            if let Some(n) = upstream {
                if sent != *n {
                    p(format!("expected {n} upstream requests, fake saw {sent}"));
                }
            }
        }
        Expect::Err {
            status: want_status,
            code,
            loc,
            mentions,
        } => {
            if status != *want_status {
                p(format!(
                    "expected {want_status} {code}, got {status}: {body}"
                ));
            }
            if header_code.as_deref() != Some(code) {
                p(format!(
                    "x-systemone-error-code {header_code:?}, expected {code}"
                ));
            }
            if body["error"]["code"] != json!(code) {
                p(format!(
                    "error.code {}, expected {code}",
                    body["error"]["code"]
                ));
            }
            let message = body["error"]["message"].as_str().unwrap_or("");
            if message.trim().is_empty() {
                p(format!("empty error.message in {body}"));
            }
            if body["error"]["type"].as_str().is_none_or(str::is_empty) {
                p(format!("missing error.type in {body}"));
            }
            for word in mentions {
                if !message.contains(word.as_str()) {
                    p(format!("message {message:?} does not mention {word:?}"));
                }
            }
            if *want_status == 422 {
                let first = &body["detail"][0];
                let got_loc: Option<Vec<String>> = first["loc"].as_array().map(|a| {
                    a.iter()
                        .map(|s| s.as_str().unwrap_or("<not a string>").to_string())
                        .collect()
                });
                match (&got_loc, loc) {
                    (None, _) => p(format!("a 422 without detail[0].loc: {body}")),
                    (Some(g), _) if g.first().map(String::as_str) != Some("body") => {
                        p(format!("detail[0].loc {g:?} does not start with \"body\""))
                    }
                    (Some(g), Some(w)) if g != w => {
                        p(format!("detail[0].loc {g:?}, expected {w:?}"))
                    }
                    _ => {}
                }
                if first["msg"].as_str().is_none_or(|m| m.trim().is_empty()) {
                    p(format!("detail[0].msg empty in {body}"));
                }
                if first["type"].as_str().is_none_or(str::is_empty) {
                    p(format!("detail[0].type empty in {body}"));
                }
            }
            if sent != 0 {
                p(format!(
                    "a refused request sent {sent} chat requests upstream"
                ));
            }
        }
    }
    problems
}

/// Runs rows against services sharing one fake, one service per distinct flag set.
async fn run(rows: &[Row]) -> Vec<String> {
    let fake = FakeVllm::start().await;
    let mut services: HashMap<Vec<&'static str>, common::Service> = HashMap::new();
    let mut problems = Vec::new();
    for row in rows {
        if !services.contains_key(&row.flags) {
            let service = common::start(common::config(&fake.base_url(), &row.flags)).await;
            services.insert(row.flags.clone(), service);
        }
        let service = &services[&row.flags];
        problems.extend(check(row, service, &fake).await);
    }
    problems
}

/// Runs `rows` and asserts that each got exactly its expected outcome.
async fn assert_rows_hold(rows: &[Row]) {
    let problems = run(rows).await;
    assert!(
        problems.is_empty(),
        "{} problems in {} rows:\n{}",
        problems.len(),
        rows.len(),
        problems.join("\n")
    );
}

/// Every row of the table gets exactly its expected outcome: each schema, media-type and
/// size rule is refused with its own status, code, header, message and `detail` location,
/// before any upstream call; everything the contract accepts is answered with 200.
#[tokio::test]
async fn every_validation_rule_has_its_status_code_and_location() {
    let rows = rows();
    let mut names = std::collections::HashSet::new();
    for row in &rows {
        assert!(
            names.insert(row.name.clone()),
            "duplicate row name {}",
            row.name
        );
    }
    let refused = rows
        .iter()
        .filter(|r| matches!(r.expect, Expect::Err { .. }))
        .count();
    assert!(refused >= 100, "only {refused} refused rows");
    assert_rows_hold(&rows).await;
}

// ---- Transport features the official SDK uses (compression, multipart) -------------------

/// CRC-32 (IEEE), as gzip's trailer needs it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A gzip member around a raw deflate stream that inflates to `plain`.
fn gzip_member(deflate: &[u8], plain: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    out.extend_from_slice(deflate);
    out.extend_from_slice(&crc32(plain).to_le_bytes());
    out.extend_from_slice(&(plain.len() as u32).to_le_bytes());
    out
}

/// `data` gzip-compressed with stored (uncompressed) deflate blocks.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut deflate = Vec::new();
    let chunks: Vec<&[u8]> = data.chunks(65_535).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        deflate.push(u8::from(i + 1 == chunks.len()));
        let len = chunk.len() as u16;
        deflate.extend_from_slice(&len.to_le_bytes());
        deflate.extend_from_slice(&(!len).to_le_bytes());
        deflate.extend_from_slice(chunk);
    }
    if chunks.is_empty() {
        deflate.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    gzip_member(&deflate, data)
}

/// Bits packed LSB first, as deflate wants them.
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    used: u32,
}

impl Bits {
    /// Writes `n` bits of `value`, least significant first.
    fn lsb(&mut self, value: u32, n: u32) {
        for i in 0..n {
            if self.used % 8 == 0 {
                self.out.push(0);
            }
            let last = self.out.len() - 1;
            self.out[last] |= (((value >> i) & 1) as u8) << (self.used % 8);
            self.used += 1;
        }
    }
    /// Writes a Huffman code of `n` bits, most significant first.
    fn code(&mut self, code: u32, n: u32) {
        for i in (0..n).rev() {
            self.lsb((code >> i) & 1, 1);
        }
    }
    /// A literal byte with the fixed Huffman code.
    fn literal(&mut self, b: u8) {
        if b < 144 {
            self.code(0x30 + u32::from(b), 8);
        } else {
            self.code(0x190 + u32::from(b - 144), 9);
        }
    }
}

/// A gzip bomb: `prefix`, then `run` copies of `fill`, then `suffix`, compressed with
/// fixed-Huffman back-references (258 bytes each for about 13 bits). Returns the gzip
/// bytes and the inflated size.
fn gzip_bomb(prefix: &[u8], fill: u8, run: usize, suffix: &[u8]) -> (Vec<u8>, usize) {
    assert!(run >= 1 && (run - 1) % 258 == 0, "run must be 1 + 258k");
    let mut bits = Bits::default();
    bits.lsb(1, 1); // BFINAL
    bits.lsb(1, 2); // BTYPE = fixed Huffman
    let mut plain = prefix.to_vec();
    for &b in prefix {
        bits.literal(b);
    }
    bits.literal(fill);
    plain.push(fill);
    for _ in 0..(run - 1) / 258 {
        bits.code(0xC0 + (285 - 280), 8); // length 258
        bits.code(0, 5); // distance 1
        plain.extend(std::iter::repeat_n(fill, 258));
    }
    for &b in suffix {
        bits.literal(b);
    }
    plain.extend_from_slice(suffix);
    bits.code(0, 7); // end of block
    (gzip_member(&bits.out, &plain), plain.len())
}

/// `data` as one zstd frame of raw blocks.
fn zstd_raw(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    out.push(0xa0); // single segment, 4-byte content size, no checksum, no dictionary
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    let chunks: Vec<&[u8]> = data.chunks(128 * 1024).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = u32::from(i + 1 == chunks.len());
        let header = ((chunk.len() as u32) << 3) | last; // block type 0 = raw
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(chunk);
    }
    out
}

const BOUNDARY: &str = "systemone-test-boundary";

/// A `multipart/form-data` body of (part name, content type, bytes).
fn multipart(parts: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, ct, bytes) in parts {
        out.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\nContent-Type: {ct}\r\n\r\n"
            )
            .as_bytes(),
        );
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    out
}

fn transport_rows() -> Vec<Row> {
    let body = base().to_string().into_bytes();
    let big = top("state", json!("z".repeat(4_000)))
        .to_string()
        .into_bytes();
    let (bomb, inflated) = gzip_bomb(b"{\"state\": \"", b'a', 1 + 258 * 400, b"\"}");
    assert!(bomb.len() < 1_000 && inflated > 100_000);
    vec![
        pass("gzip body accepted", gzip_stored(&body)).header("content-encoding", "gzip"),
        pass("zstd body accepted", zstd_raw(&body)).header("content-encoding", "zstd"),
        pass("gzip body of 4 KiB accepted", gzip_stored(&big)).header("content-encoding", "gzip"),
        pass("zstd body of 4 KiB accepted", zstd_raw(&big)).header("content-encoding", "zstd"),
        fail(
            "gzip bomb over --max-body-bytes",
            bomb,
            413,
            "system_one_body_too_large",
        )
        .header("content-encoding", "gzip")
        .flags(&["--max-body-bytes", "1000"]),
        fail(
            "zstd body inflating over --max-body-bytes",
            zstd_raw(&big),
            413,
            "system_one_body_too_large",
        )
        .header("content-encoding", "zstd")
        .flags(&["--max-body-bytes", "1000"]),
        fail(
            "truncated gzip",
            gzip_stored(&body)[..40].to_vec(),
            400,
            "system_one_invalid_json",
        )
        .header("content-encoding", "gzip"),
        fail(
            "deflate is not an accepted encoding",
            body.clone(),
            415,
            "system_one_unsupported_encoding",
        )
        .header("content-encoding", "deflate"),
    ]
}

/// Multipart rows (the SDK's image transport); tests/gateway_images.rs has the rest.
fn multipart_rows() -> Vec<Row> {
    let body = base().to_string().into_bytes();
    let multipart_ct = "multipart/form-data; boundary=systemone-test-boundary";
    let with_assets = top(
        "assets",
        json!({"<image:00ff>": {"type": "image", "part": "asset-0"}}),
    )
    .to_string();
    vec![
        pass(
            "multipart with a request part",
            multipart(&[("request", "application/json", &body)]),
        )
        .content_type(Some(multipart_ct)),
        fail(
            "multipart without a request part",
            multipart(&[("asset-0", "image/png", PNG)]),
            400,
            "system_one_invalid_multipart",
        )
        .content_type(Some(multipart_ct)),
        fail(
            "multipart image on a text-only model",
            multipart(&[
                ("request", "application/json", with_assets.as_bytes()),
                ("asset-0", "image/png", PNG),
            ]),
            422,
            "system_one_images_unsupported",
        )
        .content_type(Some(multipart_ct))
        .at(&["assets"]),
        pass(
            "multipart image on a vision model",
            multipart(&[
                ("request", "application/json", with_assets.as_bytes()),
                ("asset-0", "image/png", PNG),
            ]),
        )
        .content_type(Some(multipart_ct))
        .flags(&["--vision"]),
        fail(
            "multipart GIF on a vision model",
            multipart(&[
                ("request", "application/json", with_assets.as_bytes()),
                (
                    "asset-0",
                    "image/gif",
                    b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
                ),
            ]),
            422,
            "system_one_unsupported_image_format",
        )
        .content_type(Some(multipart_ct))
        .flags(&["--vision"])
        .at(&["assets", "<image:00ff>"])
        .mentions(&["image #0", "GIF"]),
        fail(
            "multipart asset naming a missing part",
            multipart(&[("request", "application/json", with_assets.as_bytes())]),
            422,
            "system_one_invalid_asset",
        )
        .content_type(Some(multipart_ct))
        .flags(&["--vision"])
        .at(&["assets", "<image:00ff>", "part"]),
    ]
}

/// The compressed bodies the official SDK sends: `gzip` and `zstd` bodies are read, a
/// decompression bomb is a 413, a broken stream a 400, an unknown encoding a 415.
#[tokio::test]
async fn compressed_bodies_are_read() {
    assert_rows_hold(&transport_rows()).await;
}

/// A 32 KB zstd frame of RLE blocks that expands to 1 GiB is refused with 413 at the
/// default 24 MiB limit: decompression stops one byte past the limit.
#[tokio::test]
async fn a_zstd_bomb_is_a_413() {
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38]; // magic, no content size, 128 KiB window
    let blocks = (1usize << 30) / (128 * 1024);
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = last | (1 << 1) | ((128 * 1024) << 3); // RLE block of 128 KiB
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(b' ');
    }
    assert!(frame.len() < 40_000);
    let (fake, service) = common::setup(&[]).await;
    let reply = service
        .client
        .post(service.url("/v1/systemone"))
        .header("content-type", "application/json")
        .header("content-encoding", "zstd")
        .body(frame)
        .send()
        .await
        .expect("answers");
    assert_eq!(reply.status(), 413);
    let body: Value = reply.json().await.expect("json");
    assert_eq!(body["error"]["code"], "system_one_body_too_large");
    assert_eq!(fake.chat_requests(), 0);
}

/// The SDK's image transport: `multipart/form-data` with a `request` part is read as the
/// JSON body (without one it is a 400).
#[tokio::test]
async fn multipart_bodies_are_read() {
    assert_rows_hold(&multipart_rows()).await;
}

/// The hand-made gzip, zstd and multipart encoders the transport rows rely on produce what
/// they claim (checked against their own invariants, so an ignored transport test is not
/// ignored because of a broken fixture).
#[test]
fn transport_fixtures_are_well_formed() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    let g = gzip_stored(b"hello");
    assert_eq!(&g[..3], &[0x1f, 0x8b, 8]);
    assert_eq!(&g[10..15], &[1, 5, 0, 0xfa, 0xff]);
    assert_eq!(&g[15..20], b"hello");
    let (bomb, inflated) = gzip_bomb(b"{", b'a', 1 + 258 * 2, b"}");
    assert_eq!(inflated, 2 + 1 + 258 * 2);
    assert_eq!(
        u32::from_le_bytes(bomb[bomb.len() - 4..].try_into().expect("4")),
        inflated as u32
    );
    let z = zstd_raw(b"abc");
    assert_eq!(
        z,
        vec![0x28, 0xb5, 0x2f, 0xfd, 0xa0, 3, 0, 0, 0, 0x19, 0, 0, b'a', b'b', b'c']
    );
    let m = String::from_utf8(multipart(&[("request", "application/json", b"{}")])).expect("utf8");
    assert!(
        m.starts_with("--systemone-test-boundary\r\n")
            && m.ends_with("--systemone-test-boundary--\r\n")
    );
}
