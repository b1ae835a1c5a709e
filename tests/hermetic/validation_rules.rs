//! Every validation rule of the public contract (`docs/api/systemone.md`), of
//! `src/request/validate/` and of `src/http/body.rs`, as one table of requests over HTTP: JSON
//! syntax, body shape, duplicate keys, model, state, questions and their ids and types,
//! choice options and labels, noul and score criteria, temperature, layout, permutations,
//! history, images, media types and encodings, and the size limits, each refused with its
//! own status, code and location, and everything the contract accepts answered with 200.
//!
//! The rows are run by `tests/hermetic/setup/rows.rs`, which says what it checks of each one; the
//! compressed and multipart bodies of the official SDK's transport are in
//! `tests/hermetic/validation_transport.rs`.

use serde_json::{json, Map, Value};

use crate::setup::rows::{assert_rows_hold, base, choice, fail, pass, top, Expect, Row, STATE};

/// A row whose raw body repeats a key: refused with 422 `system_one_duplicate_key` at `at`,
/// naming the two entries by position (`tests/hermetic/robustness_privacy.rs` checks the key itself
/// is never named).
fn duplicate(name: &str, body: &str, at: &[&str], positions: &str) -> Row {
    fail(name, body, 422, "system_one_duplicate_key")
        .at(at)
        .mentions(&[positions])
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
            &["state"],
            "given twice (keys #0 and #1",
        ),
        duplicate(
            "duplicate question id",
            r#"{"state": "a", "questions": {"dupq": {"type": "noul", "instructions": "x"}, "dupq": {"type": "noul", "instructions": "y"}}}"#,
            &["questions"],
            "question #1 has the same id as question #0",
        ),
        duplicate(
            "duplicate key inside a question",
            r#"{"state": "a", "questions": {"q1": {"type": "noul", "type": "choice", "instructions": "x"}}}"#,
            &["questions", "q1", "type"],
            "given twice (keys #0 and #1",
        ),
        duplicate(
            "duplicate label inside criteria",
            r#"{"state": "a", "questions": {"q1": {"type": "choice", "criteria": {"dupl": "x", "other": "z", "dupl": "y"}}}}"#,
            &["questions", "q1", "criteria"],
            "option #2 has the same key as option #0",
        ),
        duplicate(
            "duplicate key deep inside the state",
            r#"{"state": {"a": [{"deep": 1, "deep": 2}]}, "questions": {"q1": {"type": "noul", "instructions": "x"}}}"#,
            &["state"],
            "(keys #0 and #1 of that object)",
        ),
        duplicate(
            "duplicate key of the state",
            r#"{"state": {"dupk": 1, "dupk": 2}, "questions": {"q1": {"type": "noul", "instructions": "x"}}}"#,
            &["state"],
            "key #1 repeats key #0",
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
            .at(&["questions", "q1"])
            .mentions(&["field #3 is unknown"]),
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
            .at(&["history"])
            .mentions(&["entry #0"]),
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
