//! `POST /v1/decisions` (OpenAI's Decisions API, as the `openai` SDK 3.51.0's
//! `client.decisions.create` sends it) against the fake vLLM server: every rule of the
//! Decisions body as one table (the body, `input` and its messages and parts, the tool
//! items and refusals it cannot honour, images, `questions`, each question type's fields,
//! choices and levels, OpenAI's options, this service's extensions, the model and the
//! state's size), each refused row in OpenAI's error shape (400 `invalid_request_error`,
//! `param` as OpenAI writes it, this service's code in `code` and in
//! `x-systemone-error-code`, no `detail`), echoing none of the caller's text, with **no
//! chat request upstream**. Then what the front door does with a valid call: the same
//! questions through the same engine (every probability equals `/v1/systemone`'s answer
//! to the System One body `translate.rs` documents), in the `Decision` shape; messages as
//! input; ignored fields named; OpenAI's options accepted; `temperature` passed through;
//! the route counted by name; a key refusal in OpenAI's shape.

use crate::support;
use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::support::fake_vllm::FakeVllm;
use crate::support::{post, Reply, Service};

/// Words of the caller's text in [`call`] and in the rows' own additions: no refusal may
/// repeat them (unless its row says it does).
const SECRETS: &[&str] = &[
    "Zanzibar",
    "marmalade",
    "quietly overdue",
    "volcanic",
    "astray",
];

/// One row: a body, the service flags, and the refusal it must get.
struct Row {
    name: &'static str,
    body: Value,
    flags: &'static [&'static str],
    status: u16,
    code: &'static str,
    /// `error.param`, exactly (`None`: JSON null).
    param: Option<&'static str>,
    mentions: Vec<&'static str>,
    /// Secrets this row's message is expected to repeat.
    echoes: Vec<&'static str>,
}

fn row(name: &'static str, body: Value, code: &'static str, param: Option<&'static str>) -> Row {
    Row {
        name,
        body,
        flags: &[],
        status: 400,
        code,
        param,
        mentions: Vec::new(),
        echoes: Vec::new(),
    }
}

impl Row {
    fn mentions(mut self, words: &[&'static str]) -> Self {
        self.mentions.extend(words);
        self
    }
    fn flags(mut self, flags: &'static [&'static str]) -> Self {
        self.flags = flags;
        self
    }
    fn echoes(mut self, words: &[&'static str]) -> Self {
        self.echoes.extend(words);
        self
    }
}

/// A valid call: a predicate, a choice and a score about a string input.
fn call() -> Value {
    json!({
        "model": "glm-5.3-flash",
        "input": "Ticket: my parcel from Zanzibar never arrived.",
        "questions": [
            {"type": "predicate", "name": "late", "instructions": "Is the parcel quietly overdue?"},
            {"type": "choice", "name": "team", "instructions": "Which team owns the marmalade?",
             "choices": [{"value": "billing"}, {"value": "shipping", "description": "parcels go astray"}]},
            {"type": "score", "instructions": "How cross is the writer?",
             "levels": [{"label": "calm"}, {"label": "furious", "description": "volcanic"}]},
        ],
    })
}

/// `body` with the value at JSON pointer `pointer` set to `value` (or removed, for `None`;
/// an array index one past the end appends).
fn set(mut body: Value, pointer: &str, value: Option<Value>) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("a JSON pointer");
    let target = body
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent} in the body"));
    match (target, value) {
        (Value::Object(map), Some(v)) => {
            map.insert(key.to_string(), v);
        }
        (Value::Object(map), None) => {
            map.remove(key);
        }
        (Value::Array(list), Some(v)) => {
            let i: usize = key.parse().expect("an index");
            if i == list.len() {
                list.push(v);
            } else {
                list[i] = v;
            }
        }
        (Value::Array(list), None) => {
            list.remove(key.parse::<usize>().expect("an index"));
        }
        (other, _) => panic!("{parent} is neither an object nor an array: {other}"),
    }
    body
}

/// `call()` with `pointer` set to `value` (or removed).
fn with(pointer: &str, value: Option<Value>) -> Value {
    set(call(), pointer, value)
}

/// `call()` with these input items.
fn items(items: Value) -> Value {
    with("/input", Some(items))
}

/// `call()` whose input is one user message with this content.
fn user(content: Value) -> Value {
    items(json!([{"role": "user", "content": content}]))
}

/// `call()` whose input is one message of `role` with this content.
fn said(role: &str, content: Value) -> Value {
    items(json!([{"role": role, "content": content}]))
}

/// `n` choices `option 0` … `option {n-1}`.
fn choices(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"value": format!("option {i}")}))
            .collect(),
    )
}

/// `n` levels `level 0` … `level {n-1}`.
fn levels(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"label": format!("level {i}")}))
            .collect(),
    )
}

/// `n` unnamed predicates.
fn predicates(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"type": "predicate", "instructions": format!("Is claim {i} true?")}))
            .collect(),
    )
}

/// A data URL of the smallest PNG.
fn png_url() -> String {
    png_url_n(0)
}

/// A data URL of the smallest PNG with `n` bytes after it: distinct images for `n` apart
/// (the same bytes twice are one image).
fn png_url_n(n: usize) -> String {
    let mut bytes = crate::setup::PNG.to_vec();
    bytes.extend(std::iter::repeat_n(0u8, n));
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// A user message of a text part and an image part with this URL (and extra fields).
fn with_image(url: &str, extra: Value) -> Value {
    let mut image = json!({"type": "input_image", "image_url": url});
    if let Value::Object(fields) = extra {
        for (k, v) in fields {
            image[k] = v;
        }
    }
    user(json!([{"type": "input_text", "text": "Zanzibar photo"}, image]))
}

/// Sends a body to `/v1/decisions`.
async fn decide(service: &Service, body: &Value) -> Reply {
    post(&service.client, &service.url("/v1/decisions"), body).await
}

/// Every way a refused row differs from what it expects.
async fn check(row: &Row, service: &Service, fake: &FakeVllm) -> Vec<String> {
    let mut problems = Vec::new();
    let mut p = |s: String| problems.push(format!("{}: {s}", row.name));
    let before = fake.chat_requests();
    let reply = decide(service, &row.body).await;
    let sent = fake.chat_requests() - before;
    let error = &reply.body["error"];
    if reply.status != row.status || error["code"] != json!(row.code) {
        p(format!(
            "expected {} {}, got {}: {}",
            row.status, row.code, reply.status, reply.text
        ));
    }
    if reply.header("x-systemone-error-code") != Some(row.code) {
        p(format!(
            "header code {:?}",
            reply.header("x-systemone-error-code")
        ));
    }
    if error["type"] != json!("invalid_request_error") {
        p(format!("error.type {}", error["type"]));
    }
    match error.get("param") {
        None => p(format!("no error.param: {}", reply.text)),
        Some(param) if *param != json!(row.param) => {
            p(format!("error.param {param}, expected {:?}", row.param))
        }
        Some(_) => {}
    }
    if !error["message"].is_string() {
        p(format!("no error.message: {}", reply.text));
    }
    if reply.body.get("detail").is_some() || error.get("detail").is_some() {
        p(format!("a detail list: {}", reply.text));
    }
    for word in &row.mentions {
        if !reply.message().contains(word) {
            p(format!(
                "message {:?} does not mention {word:?}",
                reply.message()
            ));
        }
    }
    for secret in SECRETS {
        if !row.echoes.contains(secret) && reply.text.contains(secret) {
            p(format!(
                "the error echoes the caller's {secret:?}: {}",
                reply.text
            ));
        }
    }
    if sent != 0 {
        p(format!("a refused call sent {sent} chat requests upstream"));
    }
    problems
}

/// Proves every rule of the Decisions body refuses its row with OpenAI's error shape (400
/// `invalid_request_error`), its own code (body and header), the `param` OpenAI writes and
/// a message naming the field, the limit and the type sent, echoes none of the caller's
/// text, and sends nothing upstream.
#[tokio::test]
#[rustfmt::skip]
async fn every_decisions_rule_refuses_before_anything_is_sent() {
    let png = png_url();
    let long_key = json!("Zanzibar".repeat(8) + "x");
    let tool_items = [
        ("function_call item", json!({"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"q\": \"Zanzibar\"}"}), "function_call"),
        ("function_call_output item", json!({"type": "function_call_output", "call_id": "c1", "output": "Zanzibar"}), "function_call_output"),
        ("custom_tool_call item", json!({"type": "custom_tool_call", "call_id": "c2", "name": "grep", "input": "Zanzibar"}), "custom_tool_call"),
        ("custom_tool_call_output item", json!({"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "Zanzibar"}]}), "custom_tool_call_output"),
    ];
    let mut rows = vec![
        // The body.
        row("body is an array", json!([call()]), "system_one_invalid_body", None).mentions(&["must be a JSON object", "an array"]),
        row("body is a string", json!("Zanzibar"), "system_one_invalid_body", None).mentions(&["a string"]),
        row("body is null", Value::Null, "system_one_invalid_body", None).mentions(&["null"]),
        // `input`.
        row("input missing", with("/input", None), "system_one_invalid_input", Some("input")).mentions(&["input is required"]),
        row("input null", with("/input", Some(Value::Null)), "system_one_invalid_input", Some("input")).mentions(&["a string or an array of messages", "null"]),
        row("input a number", with("/input", Some(json!(7))), "system_one_invalid_input", Some("input")).mentions(&["a string or an array of messages", "a number"]),
        row("input an object", with("/input", Some(json!({"role": "user", "content": "Zanzibar"}))), "system_one_invalid_input", Some("input")).mentions(&["an object"]),
        row("input an empty array", items(json!([])), "system_one_invalid_input", Some("input")).mentions(&["at least one message"]),
        row("input a blank string", with("/input", Some(json!("  \n\t"))), "system_one_invalid_state", Some("input")).mentions(&["input must not be a blank string"]),
        row("an input item a string", items(json!(["Zanzibar"])), "system_one_invalid_input", Some("input[0]")).mentions(&["must be an object", "a string"]),
        row("an input item's type unknown", items(json!([{"type": "reasoning", "role": "user", "content": "Zanzibar"}])), "system_one_invalid_input", Some("input[0].type")).mentions(&["\"message\""]),
        row("an input item's type a number", items(json!([{"type": 3, "role": "user", "content": "Zanzibar"}])), "system_one_invalid_input", Some("input[0].type")),
        row("a message without role", items(json!([{"content": "Zanzibar"}])), "system_one_invalid_input", Some("input[0].role")).mentions(&["user, system, developer or assistant"]),
        row("a message with role tool", said("tool", json!("Zanzibar")), "system_one_invalid_input", Some("input[0].role")).mentions(&["user, system, developer or assistant"]),
        row("a message with a numeric role", items(json!([{"role": 1, "content": "Zanzibar"}])), "system_one_invalid_input", Some("input[0].role")),
        row("a role checked on the second message", items(json!([{"role": "user", "content": "Zanzibar"}, {"role": "User", "content": "Zanzibar"}])), "system_one_invalid_input", Some("input[1].role")),
        row("an unknown message field", items(json!([{"role": "user", "content": "Zanzibar", "name": "bob"}])), "system_one_invalid_input", Some("input[0].name")).mentions(&["unknown field", "type, role, content"]),
        row("phase on a user message", items(json!([{"role": "user", "content": "Zanzibar", "phase": "final_answer"}])), "system_one_invalid_input", Some("input[0].phase")).mentions(&["unknown field"]),
        row("a bad assistant phase", items(json!([{"role": "assistant", "content": "Zanzibar", "phase": "draft"}])), "system_one_invalid_input", Some("input[0].phase")).mentions(&["commentary, final_answer"]),
        row("content missing", items(json!([{"role": "user"}])), "system_one_invalid_input", Some("input[0].content")).mentions(&["needs content"]),
        row("content a number", user(json!(42)), "system_one_invalid_input", Some("input[0].content")).mentions(&["a string or an array of parts", "a number"]),
        row("content an object", user(json!({"type": "input_text", "text": "Zanzibar"})), "system_one_invalid_input", Some("input[0].content")).mentions(&["an object"]),
        row("content an empty list of parts", user(json!([])), "system_one_invalid_input", Some("input[0].content")).mentions(&["must not be empty"]),
        row("a part a string", user(json!(["Zanzibar"])), "system_one_invalid_input", Some("input[0].content[0]")).mentions(&["a part must be an object", "a string"]),
        row("a part without type", user(json!([{"text": "Zanzibar"}])), "system_one_invalid_input", Some("input[0].content[0].type")).mentions(&["input_text, input_image, input_json"]),
        row("an input_image in a system message", said("system", json!([{"type": "input_image", "image_url": png}])), "system_one_invalid_input", Some("input[0].content[0].type")).mentions(&["input_text"]),
        row("an input_json in a developer message", said("developer", json!([{"type": "input_text", "text": "Zanzibar"}, {"type": "input_json", "data": {"a": 1}}])), "system_one_invalid_input", Some("input[0].content[1].type")).mentions(&["input_text"]),
        row("an output_text in a user message", user(json!([{"type": "output_text", "text": "Zanzibar"}])), "system_one_invalid_input", Some("input[0].content[0].type")).mentions(&["input_text, input_image, input_json"]),
        row("an input_text in an assistant message", said("assistant", json!([{"type": "input_text", "text": "Zanzibar"}])), "system_one_invalid_input", Some("input[0].content[0].type")).mentions(&["output_text, refusal"]),
        row("an unknown text part field", user(json!([{"type": "input_text", "text": "Zanzibar", "cache": true}])), "system_one_invalid_input", Some("input[0].content[0].cache")).mentions(&["unknown field"]),
        row("an unknown image part field", with_image(&png, json!({"file_id": "file-1"})), "system_one_invalid_input", Some("input[0].content[1].file_id")).mentions(&["unknown field"]),
        row("an unknown input_json part field", user(json!([{"type": "input_json", "data": {"a": "Zanzibar"}, "text": "x"}])), "system_one_invalid_input", Some("input[0].content[0].text")).mentions(&["unknown field"]),
        row("a text part without text", user(json!([{"type": "input_text"}])), "system_one_invalid_input", Some("input[0].content[0].text")).mentions(&["text is required"]),
        row("a text part's text a number", user(json!([{"type": "input_text", "text": 5}])), "system_one_invalid_input", Some("input[0].content[0].text")).mentions(&["text must be a string", "a number"]),
        row("an image part without image_url", user(json!([{"type": "input_image", "detail": "low"}])), "system_one_invalid_input", Some("input[0].content[0].image_url")).mentions(&["image_url is required"]),
        row("a bad detail", with_image(&png, json!({"detail": "ultra"})), "system_one_invalid_input", Some("input[0].content[1].detail")).mentions(&["low, high, auto, original"]),
        row("a detail a number", with_image(&png, json!({"detail": 2})), "system_one_invalid_input", Some("input[0].content[1].detail")),
        row("prompt_cache_breakpoint mode implicit", user(json!([{"type": "input_text", "text": "Zanzibar", "prompt_cache_breakpoint": {"mode": "implicit"}}])), "system_one_invalid_input", Some("input[0].content[0].prompt_cache_breakpoint")).mentions(&["{\"mode\": \"explicit\"}"]),
        row("prompt_cache_breakpoint a string", user(json!([{"type": "input_text", "text": "Zanzibar", "prompt_cache_breakpoint": "explicit"}])), "system_one_invalid_input", Some("input[0].content[0].prompt_cache_breakpoint")),
        row("prompt_cache_breakpoint with an extra field", with_image(&png, json!({"prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"}})), "system_one_invalid_input", Some("input[0].content[1].prompt_cache_breakpoint")),
        row("input_json data missing", user(json!([{"type": "input_json"}])), "system_one_invalid_input", Some("input[0].content[0].data")).mentions(&["needs data"]),
        row("input_json data a string", user(json!([{"type": "input_json", "data": "Zanzibar"}])), "system_one_invalid_input", Some("input[0].content[0].data")).mentions(&["an object or an array of objects", "a string"]),
        row("input_json data a number", user(json!([{"type": "input_json", "data": 12}])), "system_one_invalid_input", Some("input[0].content[0].data")).mentions(&["a number"]),
        row("input_json data a list holding a non-object", user(json!([{"type": "input_json", "data": [{"a": "Zanzibar"}, 2]}])), "system_one_invalid_input", Some("input[0].content[0].data")).mentions(&["an object or an array of objects"]),
        row("an assistant refusal part", said("assistant", json!([{"type": "output_text", "text": "Zanzibar"}, {"type": "refusal", "refusal": "I cannot discuss Zanzibar"}])), "system_one_unsupported_input", Some("input[0].content[1]")).mentions(&["refusal"]),
        // Images: the image rules, at the part.
        row("an http image_url", with_image("https://example.com/Zanzibar.png", json!({})), "system_one_image_url_refused", Some("input[0].content[1].image_url")).flags(&["--vision"]).mentions(&["https", "never fetches"]),
        row("an http image_url in instructions", with("/questions/0/instructions", Some(json!([{"type": "input_text", "text": "Zanzibar?"}, {"type": "input_image", "image_url": "http://example.com/a.png"}]))), "system_one_image_url_refused", Some("questions[0].instructions[1].image_url")).flags(&["--vision"]).mentions(&["never fetches"]),
        row("images numbered across the body", set(with_image(&png, json!({})), "/questions/0/instructions", Some(json!([{"type": "input_image", "image_url": "https://example.com/b.png"}]))), "system_one_image_url_refused", Some("questions[0].instructions[0].image_url")).flags(&["--vision"]),
        row("an image that is not base64", with_image("data:image/png;base64,@@Zanzibar@@", json!({})), "system_one_invalid_image", Some("input[0].content[1].image_url")).flags(&["--vision"]).mentions(&["base64"]),
        row("too many images", user(Value::Array((0..5).map(|n| json!({"type": "input_image", "image_url": png_url_n(n)})).collect())), "system_one_too_many_images", None).flags(&["--vision"]).mentions(&["5 images", "limit of 4"]),
        // `questions`.
        row("questions missing", with("/questions", None), "system_one_invalid_questions", Some("questions")).mentions(&["questions is required"]),
        row("questions an object", with("/questions", Some(json!({"0": {"type": "predicate", "instructions": "Zanzibar?"}}))), "system_one_invalid_questions", Some("questions")).mentions(&["must be an array", "an object"]),
        row("questions null", with("/questions", Some(Value::Null)), "system_one_invalid_questions", Some("questions")).mentions(&["null"]),
        row("questions empty", with("/questions", Some(json!([]))), "system_one_no_questions", Some("questions")).mentions(&["at least one question"]),
        row("questions over the service limit", with("/questions", Some(predicates(3))), "system_one_too_many_questions", Some("questions")).flags(&["--max-questions", "2"]).mentions(&["3 questions", "limit of 2", "--max-questions", "400"]),
        row("questions over the default service limit", with("/questions", Some(predicates(65))), "system_one_too_many_questions", Some("questions")).mentions(&["65 questions", "limit of 64", "--max-questions"]),
        row("questions over the Decisions limit", with("/questions", Some(predicates(401))), "system_one_too_many_questions", Some("questions")).mentions(&["401 questions", "limit of 400"]),
        row("questions over 400 with a higher service limit", with("/questions", Some(predicates(401))), "system_one_too_many_questions", Some("questions")).flags(&["--max-questions", "500"]).mentions(&["401 questions", "limit of 400"]),
        row("a question a string", with("/questions/1", Some(json!("Zanzibar?"))), "system_one_invalid_question", Some("questions[1]")).mentions(&["a question must be an object", "a string"]),
        row("a question's type missing", with("/questions/0/type", None), "system_one_unsupported_question_type", Some("questions[0].type")).mentions(&["predicate, choice or score"]),
        row("a question's type noul", with("/questions/0/type", Some(json!("noul"))), "system_one_unsupported_question_type", Some("questions[0].type")).mentions(&["predicate, choice or score"]),
        row("a question's type a number", with("/questions/2/type", Some(json!(1))), "system_one_unsupported_question_type", Some("questions[2].type")),
        row("a predicate with criteria", with("/questions/0/criteria", Some(json!({"true": "Zanzibar"}))), "system_one_unknown_field", Some("questions[0].criteria")).mentions(&["unknown field", "type, instructions, name"]),
        row("a predicate with choices", with("/questions/0/choices", Some(choices(2))), "system_one_unknown_field", Some("questions[0].choices")),
        row("a choice with levels", with("/questions/1/levels", Some(levels(2))), "system_one_unknown_field", Some("questions[1].levels")),
        row("a score with choices", with("/questions/2/choices", Some(choices(2))), "system_one_unknown_field", Some("questions[2].choices")),
        row("instructions missing", with("/questions/0/instructions", None), "system_one_invalid_instructions", Some("questions[0].instructions")).mentions(&["needs instructions"]),
        row("instructions null", with("/questions/1/instructions", Some(Value::Null)), "system_one_invalid_instructions", Some("questions[1].instructions")).mentions(&["null"]),
        row("instructions a number", with("/questions/0/instructions", Some(json!(3))), "system_one_invalid_instructions", Some("questions[0].instructions")).mentions(&["a string or an array of parts", "a number"]),
        row("instructions an object", with("/questions/2/instructions", Some(json!({"text": "Zanzibar"}))), "system_one_invalid_instructions", Some("questions[2].instructions")).mentions(&["an object"]),
        row("instructions an empty list", with("/questions/0/instructions", Some(json!([]))), "system_one_invalid_instructions", Some("questions[0].instructions")).mentions(&["must not be empty"]),
        row("instructions with an output_text part", with("/questions/0/instructions", Some(json!([{"type": "output_text", "text": "Zanzibar"}]))), "system_one_invalid_instructions", Some("questions[0].instructions[0].type")).mentions(&["input_text, input_image, input_json"]),
        row("instructions with a bad input_json", with("/questions/0/instructions", Some(json!([{"type": "input_json", "data": "Zanzibar"}]))), "system_one_invalid_instructions", Some("questions[0].instructions[0].data")),
        row("a predicate with blank instructions", with("/questions/0/instructions", Some(json!("   "))), "system_one_nothing_to_ask", Some("questions[0]")),
        row("name a number", with("/questions/1/name", Some(json!(7))), "system_one_invalid_question_id", Some("questions[1].name")).mentions(&["name must be a string", "a number"]),
        row("name an object", with("/questions/0/name", Some(json!({"n": "Zanzibar"}))), "system_one_invalid_question_id", Some("questions[0].name")).mentions(&["an object"]),
        row("duplicate names", with("/questions/2/name", Some(json!("late"))), "system_one_duplicate_key", Some("questions[2].name")).mentions(&["questions[2]", "questions[0]", "unique"]),
        // Choices.
        row("choices missing", with("/questions/1/choices", None), "system_one_invalid_criteria", Some("questions[1].choices")).mentions(&["needs choices"]),
        row("choices an object", with("/questions/1/choices", Some(json!({"billing": "Zanzibar"}))), "system_one_invalid_criteria", Some("questions[1].choices")).mentions(&["must be an array", "an object"]),
        row("choices a string", with("/questions/1/choices", Some(json!("billing"))), "system_one_invalid_criteria", Some("questions[1].choices")).mentions(&["a string"]),
        row("no choice", with("/questions/1/choices", Some(json!([]))), "system_one_invalid_criteria", Some("questions[1].choices")).mentions(&["2 to 255", "got 0"]),
        row("one choice", with("/questions/1/choices", Some(choices(1))), "system_one_invalid_criteria", Some("questions[1].choices")).mentions(&["2 to 255", "got 1"]),
        row("256 choices", with("/questions/1/choices", Some(choices(256))), "system_one_too_many_options", Some("questions[1].choices")).mentions(&["256 choices", "limit of 255"]),
        row("more choices than the model's labels", with("/questions/1/choices", Some(choices(200))), "system_one_too_many_options", Some("questions[1].choices")).mentions(&["200 options", "191", "glm-5.3-flash"]),
        row("more choices than --max-options", with("/questions/1/choices", Some(choices(4))), "system_one_too_many_options", Some("questions[1].choices")).flags(&["--max-options", "3"]).mentions(&["4 options", "limit of 3", "--max-options"]),
        row("a choice a string", with("/questions/1/choices", Some(json!(["billing", "shipping"]))), "system_one_invalid_criteria", Some("questions[1].choices[0]")).mentions(&["a choice must be an object", "a string"]),
        row("a choice null", with("/questions/1/choices/1", Some(Value::Null)), "system_one_invalid_criteria", Some("questions[1].choices[1]")).mentions(&["null"]),
        row("a choice's value missing", with("/questions/1/choices/1/value", None), "system_one_invalid_label", Some("questions[1].choices[1].value")).mentions(&["needs a value"]),
        row("a choice's value a number", with("/questions/1/choices/0/value", Some(json!(1))), "system_one_invalid_label", Some("questions[1].choices[0].value")).mentions(&["a string or a boolean", "a number"]),
        row("a choice's value null", with("/questions/1/choices/0/value", Some(Value::Null)), "system_one_invalid_label", Some("questions[1].choices[0].value")).mentions(&["null"]),
        row("a choice's value an object", with("/questions/1/choices/0/value", Some(json!({"v": "Zanzibar"}))), "system_one_invalid_label", Some("questions[1].choices[0].value")).mentions(&["an object"]),
        row("an unknown field in a choice", with("/questions/1/choices/0/label", Some(json!("Zanzibar"))), "system_one_unknown_field", Some("questions[1].choices[0].label")).mentions(&["unknown field", "value, description"]),
        row("a choice's description a number", with("/questions/1/choices/1/description", Some(json!(9))), "system_one_invalid_description", Some("questions[1].choices[1].description")).mentions(&["a description must be a string", "a number"]),
        row("a choice's description an object", with("/questions/1/choices/0/description", Some(json!({"d": "Zanzibar"}))), "system_one_invalid_description", Some("questions[1].choices[0].description")).mentions(&["an object"]),
        row("the same string twice", with("/questions/1/choices", Some(json!([{"value": "marmalade"}, {"value": "billing"}, {"value": "marmalade"}]))), "system_one_duplicate_key", Some("questions[1].choices[2].value")).mentions(&["choices[2].value repeats choices[0].value", "unique"]),
        row("the same boolean twice", with("/questions/1/choices", Some(json!([{"value": true}, {"value": false}, {"value": true, "description": "Zanzibar"}]))), "system_one_duplicate_key", Some("questions[1].choices[2].value")).mentions(&["choices[2].value repeats choices[0].value"]),
        // A string "true" beside a boolean true is accepted, the two told apart: the
        // `mixed` question of `a_decision_is_the_systemone_answer_to_the_same_questions`.
        row("a string shown as the same label as a quoted one", with("/questions/1/choices", Some(json!([{"value": true}, {"value": "true"}, {"value": "\"true\""}]))), "system_one_duplicate_key", Some("questions[1].choices[2].value")).mentions(&["same label"]),
        row("a blank value", with("/questions/1/choices/1/value", Some(json!("  "))), "system_one_invalid_label", Some("questions[1].choices")).mentions(&["#1", "blank"]),
        row("an empty value", with("/questions/1/choices/0/value", Some(json!(""))), "system_one_invalid_label", Some("questions[1].choices")).mentions(&["#0", "blank"]),
        row("a value with a line break", with("/questions/1/choices/1/value", Some(json!("Zanzibar\nbilling"))), "system_one_invalid_label", Some("questions[1].choices")).mentions(&["#1", "line break"]),
        row("a value over 128 characters", with("/questions/1/choices/0/value", Some(json!("Zanzibar".repeat(17)))), "system_one_invalid_label", Some("questions[1].choices")).mentions(&["136 characters", "limit of 128"]),
        // Levels.
        row("levels missing", with("/questions/2/levels", None), "system_one_invalid_criteria", Some("questions[2].levels")).mentions(&["needs levels"]),
        row("levels a string", with("/questions/2/levels", Some(json!("calm, Zanzibar"))), "system_one_invalid_criteria", Some("questions[2].levels")).mentions(&["levels must be an array", "a string"]),
        row("levels an object", with("/questions/2/levels", Some(json!({"0": "calm"}))), "system_one_invalid_criteria", Some("questions[2].levels")).mentions(&["an object"]),
        row("levels empty", with("/questions/2/levels", Some(json!([]))), "system_one_invalid_criteria", Some("questions[2].levels")).mentions(&["at least 1", "got 0"]),
        row("11 levels", with("/questions/2/levels", Some(levels(11))), "system_one_too_many_levels", Some("questions[2].levels")).mentions(&["11 levels", "limit of 10", "--max-levels"]),
        row("more levels than --max-levels", with("/questions/2/levels", Some(levels(4))), "system_one_too_many_levels", Some("questions[2].levels")).flags(&["--max-levels", "3"]).mentions(&["4 levels", "limit of 3", "--max-levels"]),
        row("a level a string", with("/questions/2/levels", Some(json!(["calm", "Zanzibar"]))), "system_one_invalid_criteria", Some("questions[2].levels[0]")).mentions(&["a level must be an object", "a string"]),
        row("a level null", with("/questions/2/levels/1", Some(Value::Null)), "system_one_invalid_criteria", Some("questions[2].levels[1]")).mentions(&["null"]),
        row("a level's label missing", with("/questions/2/levels/1/label", None), "system_one_invalid_label", Some("questions[2].levels[1].label")).mentions(&["label is required"]),
        row("a level's label a number", with("/questions/2/levels/0/label", Some(json!(0))), "system_one_invalid_label", Some("questions[2].levels[0].label")).mentions(&["label must be a string", "a number"]),
        row("a level's label null", with("/questions/2/levels/0/label", Some(Value::Null)), "system_one_invalid_label", Some("questions[2].levels[0].label")).mentions(&["null"]),
        row("an unknown field in a level", with("/questions/2/levels/0/value", Some(json!(0))), "system_one_unknown_field", Some("questions[2].levels[0].value")).mentions(&["unknown field", "label, description"]),
        row("a level's description a number", with("/questions/2/levels/1/description", Some(json!(2))), "system_one_invalid_description", Some("questions[2].levels[1].description")).mentions(&["a description must be a string", "a number"]),
        // OpenAI's options.
        row("prompt_cache_key a number", with("/prompt_cache_key", Some(json!(5))), "system_one_invalid_body", Some("prompt_cache_key")).mentions(&["prompt_cache_key must be a string", "a number"]),
        row("prompt_cache_key over 64 characters", with("/prompt_cache_key", Some(long_key.clone())), "system_one_invalid_body", Some("prompt_cache_key")).mentions(&["65 characters", "limit of 64"]),
        row("safety_identifier a boolean", with("/safety_identifier", Some(json!(true))), "system_one_invalid_body", Some("safety_identifier")).mentions(&["safety_identifier must be a string", "a boolean"]),
        row("safety_identifier over 64 characters", with("/safety_identifier", Some(long_key)), "system_one_invalid_body", Some("safety_identifier")).mentions(&["65 characters", "limit of 64"]),
        row("prompt_cache_options a string", with("/prompt_cache_options", Some(json!("explicit"))), "system_one_invalid_body", Some("prompt_cache_options")).mentions(&["must be an object", "a string"]),
        row("prompt_cache_options bad mode", with("/prompt_cache_options", Some(json!({"mode": "always"}))), "system_one_invalid_body", Some("prompt_cache_options.mode")).mentions(&["implicit, explicit"]),
        row("prompt_cache_options bad ttl", with("/prompt_cache_options", Some(json!({"mode": "implicit", "ttl": "24h"}))), "system_one_invalid_body", Some("prompt_cache_options.ttl")).mentions(&["30m"]),
        row("prompt_cache_options ttl a number", with("/prompt_cache_options", Some(json!({"ttl": 30}))), "system_one_invalid_body", Some("prompt_cache_options.ttl")).mentions(&["30m"]),
        row("prompt_cache_options unknown field", with("/prompt_cache_options", Some(json!({"mode": "explicit", "retention": "Zanzibar"}))), "system_one_invalid_body", Some("prompt_cache_options.retention")).mentions(&["unknown field", "mode, ttl"]),
        // This service's extensions.
        row("temperature 0", with("/temperature", Some(json!(0))), "system_one_bad_temperature", Some("temperature")).mentions(&["> 0", "got 0"]),
        row("temperature negative", with("/temperature", Some(json!(-1.5))), "system_one_bad_temperature", Some("temperature")).mentions(&["got -1.5"]),
        row("temperature a string", with("/temperature", Some(json!("1"))), "system_one_bad_temperature", Some("temperature")).mentions(&["a string"]),
        row("calibration unknown", with("/calibration", Some(json!("house-blend"))), "system_one_unknown_calibration", Some("calibration")).mentions(&["house-blend", "none"]),
        row("calibration a number", with("/calibration", Some(json!(1))), "system_one_bad_calibration", Some("calibration")).mentions(&["a number"]),
        row("calibration with temperature", set(with("/calibration", Some(json!("house-blend"))), "/temperature", Some(json!(2))), "system_one_bad_calibration", Some("calibration")).mentions(&["cannot both be set"]),
        row("permutations 9", with("/permutations", Some(json!(9))), "system_one_bad_permutations", Some("permutations")).mentions(&["1 to 8", "got 9"]),
        row("permutations 0", with("/permutations", Some(json!(0))), "system_one_bad_permutations", Some("permutations")).mentions(&["got 0"]),
        row("layout unknown", with("/layout", Some(json!("fast"))), "system_one_bad_layout", Some("layout")).mentions(&["accuracy", "cost"]),
        // The model.
        row("model unknown", with("/model", Some(json!("gpt-6-luna"))), "system_one_unsupported_model", Some("model")).mentions(&["gpt-6-luna", "glm-5.3-flash"]),
        row("model unknown, named back", with("/model", Some(json!("Zanzibar-9"))), "system_one_unsupported_model", Some("model")).echoes(&["Zanzibar"]).mentions(&["Zanzibar-9", "glm-5.3-flash"]),
        row("model a number", with("/model", Some(json!(6))), "system_one_unsupported_model", Some("model")).mentions(&["must be a string", "a number"]),
        // Sizes: System One's 413s, said as 400s.
        row("input over --max-state-tokens", with("/input", Some(json!("Zanzibar ".repeat(30)))), "system_one_state_too_large", Some("input")).flags(&["--max-state-tokens", "100"]).mentions(&["the input is", "limit of 100", "--max-state-tokens"]),
        row("messages over --max-state-tokens", user(json!([{"type": "input_text", "text": "Zanzibar ".repeat(20)}, {"type": "input_json", "data": {"note": "Zanzibar ".repeat(10)}}])), "system_one_state_too_large", Some("input")).flags(&["--max-state-tokens", "100"]).mentions(&["limit of 100"]),
        row("a question over --max-question-tokens", with("/questions/0/instructions", Some(json!("Is it Zanzibar? ".repeat(20)))), "system_one_question_too_large", Some("questions[0]")).flags(&["--max-question-tokens", "100"]).mentions(&["limit of 100", "--max-question-tokens"]),
        row("a request over --max-request-tokens", call(), "system_one_request_too_large", None).flags(&["--max-request-tokens", "50"]).mentions(&["limit of 50", "--max-request-tokens"]),
        // Order: the body, `input`, `questions`, then the options.
        row("input checked before questions", json!({"questions": []}), "system_one_invalid_input", Some("input")),
        row("questions checked before the options", set(with("/questions", Some(json!([]))), "/prompt_cache_key", Some(json!(5))), "system_one_no_questions", Some("questions")),
        row("the Decisions shapes before System One's rules", set(with("/temperature", Some(json!(0))), "/questions/1/choices", Some(choices(1))), "system_one_invalid_criteria", Some("questions[1].choices")),
    ];
    let beyond_f64: Value = serde_json::from_str("{\"weight\": 1e400, \"note\": \"Zanzibar\"}").expect("JSON");
    rows.push(row("input_json with a number beyond f64", user(json!([{"type": "input_json", "data": beyond_f64}])), "system_one_invalid_number", Some("input")).mentions(&["64-bit float"]));
    rows.push(row("instructions with a number beyond f64", with("/questions/0/instructions", Some(json!([{"type": "input_json", "data": beyond_f64}]))), "system_one_invalid_number", Some("questions[0]")).mentions(&["64-bit float"]));
    for (name, item, kind) in tool_items {
        rows.push(row(name, items(json!([{"role": "user", "content": "Zanzibar"}, item])), "system_one_unsupported_input", Some("input[1]")).mentions(&[kind, "runs no tools"]));
    }
    // Left out of the table: an image on a text-only model. Its `param` is asserted by
    // prefix (the part, or its `image_url`) in `an_image_on_a_text_only_model_is_refused_at_its_part`.
    let fake = FakeVllm::start().await;
    let mut services: HashMap<&[&str], Service> = HashMap::new();
    let mut problems = Vec::new();
    for row in &rows {
        if !services.contains_key(row.flags) {
            let service = support::start(support::config(&fake.base_url(), row.flags)).await;
            services.insert(row.flags, service);
        }
        problems.extend(check(row, &services[row.flags], &fake).await);
    }
    assert_eq!(fake.chat_requests(), 0, "no refused row reached the backend");
    assert!(problems.is_empty(), "{} problems in {} rows:\n{}", problems.len(), rows.len(), problems.join("\n"));
}

/// Proves an image on a model not configured as vision-capable is refused with
/// `system_one_images_unsupported` before anything is sent, with `param` at the part that
/// carried it (in `input`, and in a question's `instructions`), never at `images`, a field
/// the Decisions body does not have.
#[tokio::test]
async fn an_image_on_a_text_only_model_is_refused_at_its_part() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let png = png_url();
    let in_instructions = with(
        "/questions/0/instructions",
        Some(
            json!([{"type": "input_text", "text": "Is it Zanzibar?"}, {"type": "input_image", "image_url": png}]),
        ),
    );
    let mut problems = Vec::new();
    for (body, part) in [
        (with_image(&png, json!({})), "input[0].content[1]"),
        (in_instructions, "questions[0].instructions[1]"),
    ] {
        let reply = decide(&service, &body).await;
        let error = &reply.body["error"];
        if reply.status != 400
            || error["code"] != "system_one_images_unsupported"
            || reply.header("x-systemone-error-code") != Some("system_one_images_unsupported")
            || error["type"] != "invalid_request_error"
        {
            problems.push(format!("{part}: {}", reply.text));
        }
        assert!(reply.message().contains("vision-capable"), "{}", reply.text);
        assert!(!reply.text.contains("Zanzibar"), "{}", reply.text);
        let param = error["param"].as_str().unwrap_or("");
        if !(param == part || param == format!("{part}.image_url")) {
            problems.push(format!(
                "param {:?}, expected {part} (or its image_url)",
                error["param"]
            ));
        }
    }
    assert_eq!(fake.chat_requests(), 0, "nothing sent");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The valid call of the 200 tests: a predicate, a string choice, a boolean choice, a
/// choice holding the string `"true"` and the boolean `true`, and an unnamed score whose
/// levels have and lack descriptions.
fn full_call(input: Value) -> Value {
    json!({
        "model": "glm-5.3-flash",
        "input": input,
        "questions": [
            {"type": "predicate", "name": "late", "instructions": "Is the parcel late?"},
            {"type": "choice", "name": "team", "instructions": "Which team should answer?",
             "choices": [{"value": "billing", "description": "money matters"}, {"value": "shipping"}, {"value": "other"}]},
            {"type": "choice", "name": "refund", "instructions": "Does the writer want a refund?",
             "choices": [{"value": true, "description": "they ask for their money back"}, {"value": false}]},
            {"type": "choice", "name": "mixed", "instructions": "Which reading fits?",
             "choices": [{"value": "true", "description": "the word true"}, {"value": true, "description": "the boolean"}, {"value": "maybe"}]},
            {"type": "score", "instructions": "How cross is the writer?",
             "levels": [{"label": "calm"}, {"label": "annoyed", "description": "a little cross"}, {"label": "furious"}]},
        ],
    })
}

/// The System One body [`full_call`] asks, by `translate.rs`'s mapping: question `i` is
/// `"i"`, a predicate a noul, a choice's criteria label → description (booleans as
/// `true`/`false`, the string `"true"` beside the boolean quoted), a score's levels the
/// label or `{"label", "description"}`.
fn systemone_body(state: Value) -> Value {
    json!({
        "model": "glm-5.3-flash",
        "state": state,
        "questions": {
            "0": {"type": "noul", "instructions": "Is the parcel late?"},
            "1": {"type": "choice", "instructions": "Which team should answer?",
                  "criteria": {"billing": "money matters", "shipping": null, "other": null}},
            "2": {"type": "choice", "instructions": "Does the writer want a refund?",
                  "criteria": {"true": "they ask for their money back", "false": null}},
            "3": {"type": "choice", "instructions": "Which reading fits?",
                  "criteria": {"\"true\"": "the word true", "true": "the boolean", "maybe": null}},
            "4": {"type": "score", "instructions": "How cross is the writer?",
                  "criteria": ["calm", {"label": "annoyed", "description": "a little cross"}, "furious"]},
        },
    })
}

/// One question of [`full_call`]: its name, its type, and its typed values with the System
/// One label of each (none for the predicate; the level labels for the score).
type Asked = (Value, &'static str, Vec<(Value, &'static str)>);

/// What each question of [`full_call`] is.
fn asked() -> Vec<Asked> {
    vec![
        (json!("late"), "predicate", vec![]),
        (
            json!("team"),
            "choice",
            vec![
                (json!("billing"), "billing"),
                (json!("shipping"), "shipping"),
                (json!("other"), "other"),
            ],
        ),
        (
            json!("refund"),
            "choice",
            vec![(json!(true), "true"), (json!(false), "false")],
        ),
        (
            json!("mixed"),
            "choice",
            vec![
                (json!("true"), "\"true\""),
                (json!(true), "true"),
                (json!("maybe"), "maybe"),
            ],
        ),
        (
            Value::Null,
            "score",
            vec![
                (json!("calm"), "calm"),
                (json!("annoyed"), "annoyed"),
                (json!("furious"), "furious"),
            ],
        ),
    ]
}

/// Every way a `Decision` differs from `/v1/systemone`'s answer to the same questions
/// (`direct`), in shape or in number. The probabilities must be exactly equal.
fn differences(decision: &Reply, direct: &Reply) -> Vec<String> {
    let mut problems = Vec::new();
    let mut p = |s: String| problems.push(s);
    if decision.status != 200 || direct.status != 200 {
        p(format!(
            "{} / {}: {} / {}",
            decision.status, direct.status, decision.text, direct.text
        ));
        return problems;
    }
    let answers = decision.body["answers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let asked = asked();
    if answers.len() != asked.len() {
        p(format!("{} answers: {}", answers.len(), decision.text));
        return problems;
    }
    for (i, (a, (name, kind, options))) in answers.iter().zip(&asked).enumerate() {
        let d = &direct.body["answers"][i.to_string()];
        let mut q = |s: String| p(format!("answer {i}: {s}"));
        if a.get("name") != Some(name) {
            q(format!("name {:?}, expected {name}", a.get("name")));
        }
        if a["type"] != json!(kind) {
            q(format!("type {}", a["type"]));
        }
        for key in ["confidence", "temperature"] {
            if !a[key].is_f64() || a[key] != d[key] {
                q(format!("{key} {} vs /v1/systemone {}", a[key], d[key]));
            }
        }
        match *kind {
            "predicate" => {
                if !a["probability"].is_f64() || a["probability"] != d["noul"] {
                    q(format!(
                        "probability {} vs noul {}",
                        a["probability"], d["noul"]
                    ));
                }
            }
            "choice" => {
                let probabilities = a["probabilities"].as_array().cloned().unwrap_or_default();
                let values: Vec<&Value> = probabilities.iter().map(|x| &x["value"]).collect();
                let expected: Vec<&Value> = options.iter().map(|(v, _)| v).collect();
                if values != expected {
                    q(format!(
                        "values {values:?}, expected {expected:?} in choice order"
                    ));
                }
                for (x, (_, label)) in probabilities.iter().zip(options) {
                    if x["probability"] != d["probabilities"][*label] {
                        q(format!(
                            "P({label}) {} vs {}",
                            x["probability"], d["probabilities"][*label]
                        ));
                    }
                }
                let chosen = options
                    .iter()
                    .find(|(_, l)| d["choice"] == json!(l))
                    .map(|(v, _)| v);
                if Some(&a["choice"]) != chosen {
                    q(format!(
                        "choice {} vs /v1/systemone {}",
                        a["choice"], d["choice"]
                    ));
                }
            }
            _ => {
                let probabilities = a["probabilities"].as_array().cloned().unwrap_or_default();
                if probabilities.len() != options.len() {
                    q(format!("{} level probabilities", probabilities.len()));
                }
                for (k, (x, (label, _))) in probabilities.iter().zip(options).enumerate() {
                    if x["value"] != json!(k) || !x["value"].is_u64() || x["label"] != *label {
                        q(format!("level {k}: {x}"));
                    }
                    if x["probability"] != d["probabilities"][k.to_string()] {
                        q(format!(
                            "P(level {k}) {} vs {}",
                            x["probability"],
                            d["probabilities"][k.to_string()]
                        ));
                    }
                }
                if a["score"] != d["score"] {
                    q(format!("score {} vs {}", a["score"], d["score"]));
                }
            }
        }
    }
    let (u, v) = (&decision.body["usage"], &direct.body["usage"]);
    let tokens = |x: &Value| x.as_u64().unwrap_or(u64::MAX);
    if tokens(&u["input_tokens"]) != tokens(&v["input_tokens"])
        || tokens(&u["output_tokens"]) != tokens(&v["output_tokens"])
        || tokens(&u["input_tokens_details"]["cached_tokens"]) != tokens(&v["cached_tokens"])
        || u["input_tokens_details"]["cache_write_tokens"] != 0
        || u["output_tokens_details"]["reasoning_tokens"] != 0
        || tokens(&u["total_tokens"]) != tokens(&u["input_tokens"]) + tokens(&u["output_tokens"])
    {
        p(format!("usage {u} vs /v1/systemone {v}"));
    }
    if decision.body["model"] != direct.body["model"] || decision.body["model"] != "glm-5.3-flash" {
        p(format!(
            "model {} vs {}",
            decision.body["model"], direct.body["model"]
        ));
    }
    problems
}

const TICKET: &str = "Ticket: my parcel from Zanzibar never arrived and I want my money back.";

/// Proves a valid call answers 200 in the `Decision` shape, in question order, names
/// echoed (null when unnamed), each answer typed (`choice` a JSON boolean for a boolean
/// value; the string `"true"` and the boolean `true` told apart), probabilities in choice
/// and level order (a score's with `label` and an integer `value`), `confidence`, and
/// OpenAI's `usage` (`total_tokens = input + output`, no cache writes or reasoning); and
/// that every number is exactly what `/v1/systemone` answers to the documented System One
/// body, through one upstream read per asked question.
#[tokio::test]
async fn a_decision_is_the_systemone_answer_to_the_same_questions() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let before = fake.chat_requests();
    let decision = decide(&service, &full_call(json!(TICKET))).await;
    assert_eq!(decision.status, 200, "{}", decision.text);
    assert_eq!(fake.chat_requests() - before, 5, "one read per question");
    assert!(
        decision.header("x-systemone-ignored-fields").is_none(),
        "nothing ignored"
    );
    let answers = &decision.body["answers"];
    assert!(
        answers[2]["choice"].is_boolean(),
        "a boolean choice: {}",
        answers[2]
    );
    assert!(
        answers[3]["probabilities"][0]["value"].is_string(),
        "{}",
        answers[3]
    );
    assert!(
        answers[3]["probabilities"][1]["value"].is_boolean(),
        "{}",
        answers[3]
    );
    assert!(answers[4]["score"].is_f64(), "{}", answers[4]);
    let usage = &decision.body["usage"];
    assert!(
        usage["input_tokens"].as_u64().expect("input_tokens") > 0,
        "{usage}"
    );
    assert_eq!(usage["output_tokens"], 5, "{usage}");
    assert!(
        usage["input_tokens_details"]["cached_tokens"].is_u64(),
        "{usage}"
    );
    for a in answers.as_array().expect("answers") {
        if let Some(list) = a["probabilities"].as_array() {
            let sum: f64 = list
                .iter()
                .map(|x| x["probability"].as_f64().expect("p"))
                .sum();
            assert!((sum - 1.0).abs() < 1e-9, "{a}");
        }
    }

    let direct = support::ask(&service, &systemone_body(json!(TICKET))).await;
    let problems = differences(&decision, &direct);
    assert!(
        problems.is_empty(),
        "{}\n{}\n{}",
        problems.join("\n"),
        decision.text,
        direct.text
    );
}

/// Proves an input given as messages (system text, user text parts with a cache
/// breakpoint and `input_json` parts of an object and of a list of objects, an assistant
/// `output_text` with its `phase`, a one-part developer message, a typed user message) is
/// the state `translate.rs` documents: `[{"role", "content"}]`, one text part written as
/// its text, otherwise a list of the texts and the JSON `data`; the numbers equal
/// `/v1/systemone`'s.
#[tokio::test]
async fn messages_are_the_documented_state() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let input = json!([
        {"role": "system", "content": "You triage support tickets."},
        {"role": "user", "content": [
            {"type": "input_text", "text": "My parcel from Zanzibar never arrived.", "prompt_cache_breakpoint": {"mode": "explicit"}},
            {"type": "input_json", "data": {"order": "A-17", "days_late": 9}},
            {"type": "input_json", "data": [{"item": "kettle"}, {"item": "mug", "qty": 2}]},
        ]},
        {"role": "assistant", "phase": "final_answer", "content": [{"type": "output_text", "text": "Sorry to hear that."}]},
        {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "role": "user", "content": "I want my money back."},
    ]);
    let state = json!([
        {"role": "system", "content": "You triage support tickets."},
        {"role": "user", "content": [
            "My parcel from Zanzibar never arrived.",
            {"order": "A-17", "days_late": 9},
            [{"item": "kettle"}, {"item": "mug", "qty": 2}],
        ]},
        {"role": "assistant", "content": "Sorry to hear that."},
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "I want my money back."},
    ]);
    let decision = decide(&service, &full_call(input)).await;
    let direct = support::ask(&service, &systemone_body(state)).await;
    let problems = differences(&decision, &direct);
    assert!(
        problems.is_empty(),
        "{}\n{}\n{}",
        problems.join("\n"),
        decision.text,
        direct.text
    );
    let plain = decide(&service, &full_call(json!(TICKET))).await;
    assert_ne!(
        plain.body["answers"], decision.body["answers"],
        "the messages are what was asked about"
    );
}

/// Proves unknown top-level fields are ignored and named (in body order) in
/// `x-systemone-ignored-fields`, while OpenAI's `prompt_cache_key`, `safety_identifier` and
/// `prompt_cache_options` are accepted, not named, and change no number; and that this
/// service's extensions pass through: `temperature: 1` (raw probabilities, `temperature`
/// 1 in every asked answer), `layout: "cost"` and `permutations: 2` answer exactly what
/// `/v1/systemone` answers with the same field.
#[tokio::test]
async fn options_are_accepted_ignored_fields_named_and_extensions_passed_through() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let direct = support::ask(&service, &systemone_body(json!(TICKET))).await;

    let mut body = full_call(json!(TICKET));
    body["metadata"] = json!({"ticket": "Zanzibar-1"});
    body["prompt_cache_key"] = json!("tenant-42");
    body["safety_identifier"] = json!("user-".repeat(12) + "abcd");
    body["store"] = json!(false);
    body["prompt_cache_options"] = json!({"mode": "explicit", "ttl": "30m"});
    body["temprature"] = json!(1);
    let reply = decide(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.header("x-systemone-ignored-fields"),
        Some("metadata, store, temprature"),
        "the unknown fields, in body order"
    );
    let problems = differences(&reply, &direct);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for options in [
        json!({"prompt_cache_key": null, "safety_identifier": null, "prompt_cache_options": null}),
        json!({"prompt_cache_options": {"mode": "implicit"}}),
        json!({"prompt_cache_options": {}}),
    ] {
        let mut body = full_call(json!(TICKET));
        for (k, v) in options.as_object().expect("object") {
            body[k] = v.clone();
        }
        let reply = decide(&service, &body).await;
        assert!(
            reply.header("x-systemone-ignored-fields").is_none(),
            "{options}"
        );
        let problems = differences(&reply, &direct);
        assert!(problems.is_empty(), "{options}: {}", problems.join("\n"));
    }

    for (field, value) in [
        ("temperature", json!(1)),
        ("layout", json!("cost")),
        ("permutations", json!(2)),
    ] {
        let mut body = full_call(json!(TICKET));
        body[field] = value.clone();
        let mut equivalent = systemone_body(json!(TICKET));
        equivalent[field] = value.clone();
        let reply = decide(&service, &body).await;
        let same = support::ask(&service, &equivalent).await;
        let problems = differences(&reply, &same);
        assert!(
            problems.is_empty(),
            "{field} {value}: {}",
            problems.join("\n")
        );
        if field == "temperature" {
            for a in reply.body["answers"].as_array().expect("answers") {
                assert_eq!(a["temperature"], 1.0, "{a}");
            }
            assert_ne!(
                reply.body["answers"], direct.body["answers"],
                "not the calibrated answer"
            );
        }
    }
}

/// Proves `/metrics` counts `/v1/decisions` by its route name, answered and refused (with
/// the refusal's code and the 400 the caller got), and holds none of the caller's text.
#[tokio::test]
async fn the_route_is_counted_by_name() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    assert_eq!(
        decide(&service, &full_call(json!(TICKET))).await.status,
        200
    );
    assert_eq!(decide(&service, &with("/input", None)).await.status, 400);
    let metrics = support::metrics(&service).await;
    for line in [
        "systemone_requests_total{code=\"\",route=\"/v1/decisions\",status=\"200\"} 1",
        "systemone_requests_total{code=\"system_one_invalid_input\",route=\"/v1/decisions\",status=\"400\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in /metrics:\n{metrics}");
    }
    for secret in SECRETS {
        assert!(!metrics.contains(secret), "{secret} in /metrics");
    }
}

/// Proves a key refusal on a service with keys configured is in OpenAI's error shape:
/// 403 `system_one_missing_key` without a key, 401 `system_one_invalid_key` with a wrong
/// one, `param` null, the code in the header, no key in the answer, nothing sent; the
/// right key is answered. A body that is not JSON is a 400 in the same shape.
#[tokio::test]
async fn key_and_transport_refusals_are_in_openai_shape() {
    const KEY: &str = "sk-decisions-key-7f3a";
    let path = support::keys_file(&support::key_entry("decider", KEY, ""));
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(
        &fake.base_url(),
        &["--keys-file", path.to_str().expect("utf-8 path")],
    ))
    .await;
    let send = |bearer: Option<&'static str>, body: String| {
        let mut request = service
            .client
            .post(service.url("/v1/decisions"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = bearer {
            request = request.bearer_auth(key);
        }
        async move { Reply::read(request.send().await.expect("service answers")).await }
    };
    let body = full_call(json!(TICKET)).to_string();
    for (bearer, status, code) in [
        (None, 403, "system_one_missing_key"),
        (Some("sk-wrong"), 401, "system_one_invalid_key"),
        (Some("not-even-a-key"), 401, "system_one_invalid_key"),
    ] {
        let reply = send(bearer, body.clone()).await;
        let error = &reply.body["error"];
        assert_eq!(reply.status, status, "{bearer:?}: {}", reply.text);
        assert_eq!(error["code"], code, "{}", reply.text);
        assert_eq!(reply.header("x-systemone-error-code"), Some(code));
        assert_eq!(error.get("param"), Some(&Value::Null), "{}", reply.text);
        assert!(
            error["type"].is_string() && error["message"].is_string(),
            "{}",
            reply.text
        );
        assert!(reply.body.get("detail").is_none(), "{}", reply.text);
        let everything = format!("{:?} {}", reply.headers, reply.text);
        for secret in [KEY, "sk-wrong", "not-even-a-key", "Zanzibar"] {
            assert!(!everything.contains(secret), "{secret} in {everything}");
        }
    }
    assert_eq!(fake.chat_requests(), 0, "refused keys send nothing");
    let reply = send(Some(KEY), body.clone()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(fake.chat_requests(), 5);

    let reply = send(Some(KEY), "{\"input\": \"Zanzibar\",".to_string()).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.body["error"]["code"], "system_one_invalid_json");
    assert_eq!(reply.body["error"]["type"], "invalid_request_error");
    assert_eq!(reply.body["error"].get("param"), Some(&Value::Null));
    assert!(!reply.text.contains("Zanzibar"), "{}", reply.text);

    let text = service
        .client
        .post(service.url("/v1/decisions"))
        .header("content-type", "text/plain")
        .bearer_auth(KEY)
        .body(body)
        .send()
        .await
        .expect("service answers");
    let reply = Reply::read(text).await;
    assert_eq!(
        reply.status, 415,
        "a body that cannot be read keeps its status: {}",
        reply.text
    );
    assert_eq!(
        reply.body["error"]["code"],
        "system_one_unsupported_media_type"
    );
    assert_eq!(reply.body["error"]["type"], "invalid_request_error");
    assert_eq!(fake.chat_requests(), 5, "nothing more sent");
}

/// The `<image:K>` references in the text parts of a chat body, and its image parts.
fn image_references(chat: &Value) -> (Vec<usize>, usize) {
    let parts = chat["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten();
    let (mut references, mut images) = (Vec::new(), 0);
    for part in parts {
        if part["type"] == "image_url" {
            images += 1;
        }
        let text = part["text"].as_str().unwrap_or("");
        for (i, _) in text.match_indices("<image:") {
            let digits: String = text[i + 7..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            references.push(digits.parse().expect("<image:K>"));
        }
    }
    (references, images)
}

/// Proves images on a vision model go to the model ahead of the text as `/v1/systemone`'s
/// `images` do, the text carrying `"<image:K>"` where the part was (the numbers equal
/// `/v1/systemone`'s for the documented body; `detail` is accepted); and that every
/// `<image:K>` the model reads has its K-th image in the same request, also when the
/// caller sends the same image twice.
#[tokio::test]
async fn images_go_ahead_of_the_text_and_every_reference_has_its_image() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &["--vision"])).await;
    let png = png_url();
    let input = json!([{"role": "user", "content": [
        {"type": "input_text", "text": "See the photo of the parcel."},
        {"type": "input_image", "image_url": png, "detail": "high"},
    ]}]);
    let state = json!([{"role": "user", "content": ["See the photo of the parcel.", "<image:0>"]}]);
    let decision = decide(&service, &full_call(input)).await;
    let mut equivalent = systemone_body(state);
    equivalent["images"] = json!([png]);
    let direct = support::ask(&service, &equivalent).await;
    let problems = differences(&decision, &direct);
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        decision.text
    );
    for chat in fake.chat_bodies() {
        let (references, images) = image_references(&chat);
        assert_eq!(
            (references.as_slice(), images),
            (&[0][..], 1),
            "one image, read as <image:0>"
        );
    }

    // The same image twice: validation sends equal bytes once, so a second reference must
    // not be left pointing at an image the model never gets.
    let seen = fake.chat_bodies().len();
    let twice = json!([{"role": "user", "content": [
        {"type": "input_text", "text": "Two photos."},
        {"type": "input_image", "image_url": png},
        {"type": "input_image", "image_url": png, "detail": "low"},
    ]}]);
    let reply = decide(&service, &full_call(twice)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let mut problems = Vec::new();
    for chat in &fake.chat_bodies()[seen..] {
        let (references, images) = image_references(chat);
        if let Some(k) = references.iter().find(|&&k| k >= images) {
            problems.push(format!(
                "<image:{k}> read with {images} image(s) sent (references {references:?})"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
