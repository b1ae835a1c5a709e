//! A Decisions body (`openai` 3.51.0, `DecisionCreateParams`) becomes the System One body
//! that asks the same, which [`crate::request::validate()`] then checks like any other.
//! Only what the System One contract cannot say is checked here: the Decisions shapes
//! (messages, parts, typed choices, levels, names), in body order; every other rule (sizes,
//! labels, the model's capacity, images) is validation's, and its refusal is said back in
//! the Decisions body's terms by [`in_decision_terms`].
//!
//! The mapping (docs/api/decisions.md shows it):
//! * `input` is the state: a string as it is; messages as a list of `{"role", "content"}`,
//!   a content of one text part written as that text, otherwise as a list whose text parts
//!   are strings, JSON parts their `data`, and image parts the reference `"<image:K>"`
//!   (K counts from 0 across the body, in order). The images themselves go to the model
//!   ahead of the text, as `/v1/systemone`'s `images` do.
//! * question `i` is System One question `"i"`: `predicate` → a noul; `choice` → a choice
//!   whose labels are the values' text (a boolean `true` is `true`; a string that reads
//!   the same as a boolean in the same question is shown quoted, `"true"`, as JSON tells
//!   them apart); `score` → a score whose levels are the labels (`{"label",
//!   "description"}` where a description is given).
//! * function and tool calls, their outputs and assistant refusals cannot be honoured as
//!   state: they are refused, never dropped.

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::config::Limits;
use crate::error::{ApiError, Code};
use crate::request::images::decode_image_string;
use crate::request::validate::{ignored_fields, loc, refuse, refuse_type};
use crate::request::Ignored;

/// Most questions OpenAI's contract allows in one call.
pub(super) const DECISIONS_MAX_QUESTIONS: usize = 400;
/// Fewest and most choices OpenAI's contract allows in one choice question.
pub(super) const DECISIONS_CHOICES: (usize, usize) = (2, 255);
/// Longest `safety_identifier` (OpenAI's Responses limit) and `prompt_cache_key`.
pub(super) const MAX_IDENTIFIER_CHARS: usize = 64;

/// Every top-level field this route reads: OpenAI's, then this service's extensions that
/// pass through to validation unchanged.
const KNOWN_FIELDS: &[&str] = &[
    "input",
    "model",
    "questions",
    "prompt_cache_key",
    "prompt_cache_options",
    "safety_identifier",
    "temperature",
    "calibration",
    "permutations",
    "layout",
    "prior_correction",
];
/// The fields that mean the same in both bodies.
const PASSED_THROUGH: &[&str] = &[
    "model",
    "temperature",
    "calibration",
    "permutations",
    "layout",
    "prior_correction",
];

/// A choice's value, typed: a string and a boolean with the same text are distinct.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(super) enum ChoiceValue {
    Text(String),
    Flag(bool),
}

/// What one question asked, to write its answer in the Decisions shape.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Asked {
    /// The caller's `name`, echoed (null when unnamed).
    pub name: Option<String>,
    pub kind: AskedKind,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum AskedKind {
    Predicate,
    /// The typed values, in choice order.
    Choice(Vec<ChoiceValue>),
    /// The level labels, lowest first.
    Score(Vec<String>),
}

/// What the answer and the refusals need beside the System One body.
#[derive(Debug)]
pub(super) struct Translated {
    pub asked: Vec<Asked>,
    /// Where each image of `body["images"]` came from (its location in the Decisions body).
    pub image_locs: Vec<Vec<String>>,
    pub ignored: Ignored,
}

/// Translates `json` into the System One body (checking the Decisions shapes, in body
/// order: the body, `input`, `questions`, then the OpenAI options).
pub(super) fn translate(json: Value, limits: &Limits) -> Result<(Value, Translated), ApiError> {
    let Value::Object(body) = json else {
        return refuse_type(
            Code::InvalidBody,
            vec![],
            "the body must be a JSON object",
            &json,
        );
    };
    let (names, count) = ignored_fields(&body, KNOWN_FIELDS);
    let mut images = Images::default();
    let state = input(body.get("input"), &mut images)?;
    let (questions, asked) = questions(body.get("questions"), limits, &mut images)?;
    openai_options(&body)?;
    let mut out = Map::new();
    for field in PASSED_THROUGH {
        if let Some(v) = body.get(*field) {
            out.insert(field.to_string(), v.clone());
        }
    }
    out.insert("state".into(), state);
    out.insert("questions".into(), Value::Object(questions));
    if !images.urls.is_empty() {
        out.insert("images".into(), Value::Array(images.urls));
    }
    let translated = Translated {
        asked,
        image_locs: images.locs,
        ignored: Ignored { names, count },
    };
    Ok((Value::Object(out), translated))
}

/// The images met so far, with where each came from. An image sent twice (the same
/// bytes) is kept once and both places carry its one reference, as validation sends an
/// image's bytes once.
#[derive(Default)]
struct Images {
    urls: Vec<Value>,
    locs: Vec<Vec<String>>,
    /// Each kept image's bytes (its text when it does not decode: validation refuses it).
    seen: Vec<Vec<u8>>,
}

impl Images {
    /// Keeps `url` (checked by validation's image rules later) unless its bytes were met
    /// already, and returns the reference the text carries in its place.
    fn add(&mut self, url: &str, at: Vec<String>) -> Value {
        let bytes = decode_image_string(url).unwrap_or_else(|_| url.as_bytes().to_vec());
        let k = match self.seen.iter().position(|b| *b == bytes) {
            Some(k) => k,
            None => {
                self.urls.push(Value::String(url.to_string()));
                self.locs.push(at);
                self.seen.push(bytes);
                self.urls.len() - 1
            }
        };
        Value::String(format!("<image:{k}>"))
    }
}

/// `input`: a string (the state as it is), or a non-empty list of messages.
fn input(value: Option<&Value>, images: &mut Images) -> Result<Value, ApiError> {
    match value {
        None => refuse(Code::InvalidInput, loc(&["input"]), "input is required"),
        Some(Value::String(s)) => Ok(Value::String(s.clone())),
        Some(Value::Array(items)) if items.is_empty() => refuse(
            Code::InvalidInput,
            loc(&["input"]),
            "input must hold at least one message",
        ),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| message(item, &["input".into(), i.to_string()], images))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Some(other) => refuse_type(
            Code::InvalidInput,
            loc(&["input"]),
            "input must be a string or an array of messages",
            other,
        ),
    }
}

/// The message roles and the parts each may hold.
fn role_parts(role: &str) -> Option<&'static [&'static str]> {
    match role {
        "user" => Some(&["input_text", "input_image", "input_json"]),
        "system" | "developer" => Some(&["input_text"]),
        "assistant" => Some(&["output_text", "refusal"]),
        _ => None,
    }
}

/// One input item: a message becomes `{"role", "content"}`; a tool call or output is
/// refused (it cannot be honoured as state).
fn message(item: &Value, at: &[String], images: &mut Images) -> Result<Value, ApiError> {
    let Value::Object(m) = item else {
        return refuse_type(
            Code::InvalidInput,
            at.to_vec(),
            "an input item must be an object",
            item,
        );
    };
    match m.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if t == "message" => {}
        Some(Value::String(t)) if is_tool_item(t) => {
            return refuse(
                Code::UnsupportedInput,
                at.to_vec(),
                format!("a {t} item cannot be honoured: this service answers questions about messages, and runs no tools"),
            )
        }
        Some(_) => {
            return refuse(
                Code::InvalidInput,
                at_field(at, "type"),
                "an input item's type must be \"message\" (function and tool call items are not supported)",
            )
        }
    }
    let role = match m.get("role") {
        Some(Value::String(r)) if role_parts(r).is_some() => r.as_str(),
        _ => {
            return refuse(
                Code::InvalidInput,
                at_field(at, "role"),
                "a message's role must be user, system, developer or assistant",
            )
        }
    };
    let allowed: &[&str] = if role == "assistant" {
        &["type", "role", "content", "phase"]
    } else {
        &["type", "role", "content"]
    };
    no_unknown_fields(m, allowed, at, Code::InvalidInput)?;
    if role == "assistant" {
        one_of(
            m.get("phase"),
            &["commentary", "final_answer"],
            &at_field(at, "phase"),
            Code::InvalidInput,
        )?;
    }
    let content = content(m.get("content"), role, &at_field(at, "content"), images)?;
    Ok(json!({"role": role, "content": content}))
}

fn is_tool_item(t: &str) -> bool {
    matches!(
        t,
        "function_call" | "function_call_output" | "custom_tool_call" | "custom_tool_call_output"
    )
}

/// A message's content: a string, or a non-empty list of the parts its role may hold.
fn content(
    value: Option<&Value>,
    role: &str,
    at: &[String],
    images: &mut Images,
) -> Result<Value, ApiError> {
    let allowed = role_parts(role).unwrap_or(&[]);
    match value {
        None => refuse(Code::InvalidInput, at.to_vec(), "a message needs content"),
        Some(Value::String(s)) => Ok(Value::String(s.clone())),
        Some(Value::Array(parts)) => parts_value(parts, allowed, at, Code::InvalidInput, images),
        Some(other) => refuse_type(
            Code::InvalidInput,
            at.to_vec(),
            "content must be a string or an array of parts",
            other,
        ),
    }
}

/// A list of parts as the state or instructions carry it: one text part is its text;
/// otherwise a list of each part's value.
fn parts_value(
    parts: &[Value],
    allowed: &[&str],
    at: &[String],
    code: Code,
    images: &mut Images,
) -> Result<Value, ApiError> {
    if parts.is_empty() {
        return refuse(code, at.to_vec(), "the list of parts must not be empty");
    }
    let mut values = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        values.push(part(
            p,
            allowed,
            &at_field(at, &i.to_string()),
            code,
            images,
        )?);
    }
    let single_text = parts.len() == 1 && values[0].is_string() && !is_image(&parts[0]);
    Ok(if single_text {
        values.remove(0)
    } else {
        Value::Array(values)
    })
}

fn is_image(part: &Value) -> bool {
    part.get("type").and_then(Value::as_str) == Some("input_image")
}

/// One content part, by its `type`: its text, its JSON `data`, or an image's reference.
fn part(
    value: &Value,
    allowed: &[&str],
    at: &[String],
    code: Code,
    images: &mut Images,
) -> Result<Value, ApiError> {
    let Value::Object(p) = value else {
        return refuse_type(code, at.to_vec(), "a part must be an object", value);
    };
    let kind = match p.get("type") {
        Some(Value::String(t)) if t == "refusal" && allowed.contains(&"refusal") => {
            return refuse(
                Code::UnsupportedInput,
                at.to_vec(),
                "an assistant refusal cannot be honoured as input: send the text the assistant wrote, or leave the message out",
            )
        }
        Some(Value::String(t)) if allowed.contains(&t.as_str()) => t.as_str(),
        _ => {
            return refuse(
                code,
                at_field(at, "type"),
                format!("a part's type here must be one of {}", allowed.join(", ")),
            )
        }
    };
    match kind {
        "input_text" | "output_text" => {
            no_unknown_fields(p, &["type", "text", "prompt_cache_breakpoint"], at, code)?;
            cache_breakpoint(p.get("prompt_cache_breakpoint"), at, code)?;
            string_field(p, "text", at, code).map(Value::String)
        }
        "input_image" => {
            no_unknown_fields(
                p,
                &["type", "image_url", "detail", "prompt_cache_breakpoint"],
                at,
                code,
            )?;
            cache_breakpoint(p.get("prompt_cache_breakpoint"), at, code)?;
            one_of(
                p.get("detail"),
                &["low", "high", "auto", "original"],
                &at_field(at, "detail"),
                code,
            )?;
            let url = string_field(p, "image_url", at, code)?;
            Ok(images.add(&url, at_field(at, "image_url")))
        }
        _ => {
            no_unknown_fields(p, &["type", "data"], at, code)?;
            json_data(p.get("data"), &at_field(at, "data"), code)
        }
    }
}

/// An `input_json` part's `data`: an object, or a list of objects.
fn json_data(value: Option<&Value>, at: &[String], code: Code) -> Result<Value, ApiError> {
    match value {
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(Value::Array(list)) if list.iter().all(Value::is_object) => {
            Ok(Value::Array(list.clone()))
        }
        None => refuse(code, at.to_vec(), "an input_json part needs data"),
        Some(other) => refuse_type(
            code,
            at.to_vec(),
            "data must be an object or an array of objects",
            other,
        ),
    }
}

/// `prompt_cache_breakpoint`: absent, null or `{"mode": "explicit"}`. Accepted and not
/// acted on: the backends' prefix caches find shared prefixes by themselves.
fn cache_breakpoint(value: Option<&Value>, at: &[String], code: Code) -> Result<(), ApiError> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(b)) if b.len() == 1 && b.get("mode") == Some(&json!("explicit")) => {
            Ok(())
        }
        Some(_) => refuse(
            code,
            at_field(at, "prompt_cache_breakpoint"),
            "prompt_cache_breakpoint must be {\"mode\": \"explicit\"} or null",
        ),
    }
}

/// `questions`: 1 to the service's limit (never more than OpenAI's 400), each translated.
fn questions(
    value: Option<&Value>,
    limits: &Limits,
    images: &mut Images,
) -> Result<(Map<String, Value>, Vec<Asked>), ApiError> {
    let list = required_array(
        value,
        &loc(&["questions"]),
        Code::InvalidQuestions,
        "questions is required",
        "questions must be an array",
    )?;
    check_question_count(list.len(), limits)?;
    let mut map = Map::new();
    let mut asked: Vec<Asked> = Vec::with_capacity(list.len());
    for (i, q) in list.iter().enumerate() {
        let (question, this) = question(q, i, images)?;
        if let Some(name) = &this.name {
            if let Some(first) = asked.iter().position(|a| a.name.as_ref() == Some(name)) {
                return refuse(
                    Code::DuplicateKey,
                    loc(&["questions", &i.to_string(), "name"]),
                    format!("questions[{i}] has the same name as questions[{first}]; names must be unique"),
                );
            }
        }
        map.insert(i.to_string(), question);
        asked.push(this);
    }
    Ok((map, asked))
}

fn check_question_count(n: usize, limits: &Limits) -> Result<(), ApiError> {
    let at = loc(&["questions"]);
    if n == 0 {
        return refuse(
            Code::NoQuestions,
            at,
            "questions must hold at least one question",
        );
    }
    if n > DECISIONS_MAX_QUESTIONS {
        return refuse(
            Code::TooManyQuestions,
            at,
            format!(
                "{n} questions is more than the Decisions API's limit of {DECISIONS_MAX_QUESTIONS}"
            ),
        );
    }
    if n > limits.max_questions {
        return refuse(
            Code::TooManyQuestions,
            at,
            format!(
                "{n} questions is more than this service's limit of {} (--max-questions; the Decisions API allows up to {DECISIONS_MAX_QUESTIONS})",
                limits.max_questions
            ),
        );
    }
    Ok(())
}

/// One question: its `type` decides its fields; `instructions` is required by all three.
fn question(value: &Value, i: usize, images: &mut Images) -> Result<(Value, Asked), ApiError> {
    let at = loc(&["questions", &i.to_string()]);
    let Value::Object(q) = value else {
        return refuse_type(
            Code::InvalidQuestion,
            at,
            "a question must be an object",
            value,
        );
    };
    let (kind, fields): (&str, &[&str]) = match q.get("type").and_then(Value::as_str) {
        Some("predicate") => ("predicate", &["type", "instructions", "name"]),
        Some("choice") => ("choice", &["type", "instructions", "name", "choices"]),
        Some("score") => ("score", &["type", "instructions", "name", "levels"]),
        _ => {
            return refuse(
                Code::UnsupportedQuestionType,
                at_field(&at, "type"),
                "a question's type must be predicate, choice or score",
            )
        }
    };
    no_unknown_fields(q, fields, &at, Code::UnknownField)?;
    let name = question_name(q.get("name"), &at)?;
    let instructions = instructions(
        q.get("instructions"),
        &at_field(&at, "instructions"),
        images,
    )?;
    let (question, asked_kind) = match kind {
        "predicate" => (
            json!({"type": "noul", "instructions": instructions}),
            AskedKind::Predicate,
        ),
        "choice" => {
            let (criteria, values) = choices(q.get("choices"), &at_field(&at, "choices"))?;
            (
                json!({"type": "choice", "instructions": instructions, "criteria": criteria}),
                AskedKind::Choice(values),
            )
        }
        _ => {
            let (levels, labels) = levels(q.get("levels"), &at_field(&at, "levels"))?;
            (
                json!({"type": "score", "instructions": instructions, "criteria": levels}),
                AskedKind::Score(labels),
            )
        }
    };
    Ok((
        question,
        Asked {
            name,
            kind: asked_kind,
        },
    ))
}

/// A question's optional `name`: a string.
fn question_name(value: Option<&Value>, at: &[String]) -> Result<Option<String>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(n)) => Ok(Some(n.clone())),
        Some(other) => refuse_type(
            Code::InvalidQuestionId,
            at_field(at, "name"),
            "name must be a string",
            other,
        ),
    }
}

/// `instructions`: a string, or a non-empty list of text, image and JSON parts.
fn instructions(
    value: Option<&Value>,
    at: &[String],
    images: &mut Images,
) -> Result<Value, ApiError> {
    let code = Code::InvalidInstructions;
    match value {
        None => refuse(code, at.to_vec(), "a question needs instructions"),
        Some(Value::String(s)) => Ok(Value::String(s.clone())),
        Some(Value::Array(parts)) => parts_value(
            parts,
            &["input_text", "input_image", "input_json"],
            at,
            code,
            images,
        ),
        Some(other) => refuse_type(
            code,
            at.to_vec(),
            "instructions must be a string or an array of parts",
            other,
        ),
    }
}

/// `choices`: 2 to 255 `{value, description?}`, values unique by type and text. Returns
/// the System One criteria (label → description) and the typed values.
fn choices(
    value: Option<&Value>,
    at: &[String],
) -> Result<(Map<String, Value>, Vec<ChoiceValue>), ApiError> {
    let list = required_array(
        value,
        at,
        Code::InvalidCriteria,
        "a choice question needs choices",
        "choices must be an array",
    )?;
    let (min, max) = DECISIONS_CHOICES;
    if list.len() < min {
        return refuse(
            Code::InvalidCriteria,
            at.to_vec(),
            format!(
                "a choice question needs {min} to {max} choices, got {}",
                list.len()
            ),
        );
    }
    if list.len() > max {
        return refuse(
            Code::TooManyOptions,
            at.to_vec(),
            format!(
                "{} choices is more than the Decisions API's limit of {max}",
                list.len()
            ),
        );
    }
    let mut entries = Vec::with_capacity(list.len());
    for (j, c) in list.iter().enumerate() {
        entries.push(choice(c, &at_field(at, &j.to_string()))?);
    }
    unique_criteria(entries, at)
}

/// The criteria (label → description) of the parsed choices, refusing a value that repeats
/// an earlier one or would be shown to the model as the same label; with the typed values.
fn unique_criteria(
    entries: Vec<(ChoiceValue, Value)>,
    at: &[String],
) -> Result<(Map<String, Value>, Vec<ChoiceValue>), ApiError> {
    let values: Vec<ChoiceValue> = entries.iter().map(|(v, _)| v.clone()).collect();
    let mut criteria = Map::new();
    for (j, (value, description)) in entries.into_iter().enumerate() {
        let value_at = at_field(&at_field(at, &j.to_string()), "value");
        if let Some(first) = values[..j].iter().position(|v| *v == value) {
            return refuse(
                Code::DuplicateKey,
                value_at,
                format!(
                    "choices[{j}].value repeats choices[{first}].value; each choice must be unique"
                ),
            );
        }
        let label = label_of(&value, &values);
        if criteria.insert(label, description).is_some() {
            return refuse(
                Code::DuplicateKey,
                value_at,
                format!("choices[{j}].value would be shown to the model as the same label as an earlier choice"),
            );
        }
    }
    Ok((criteria, values))
}

/// One `{value, description?}`.
fn choice(value: &Value, at: &[String]) -> Result<(ChoiceValue, Value), ApiError> {
    let Value::Object(c) = value else {
        return refuse_type(
            Code::InvalidCriteria,
            at.to_vec(),
            "a choice must be an object",
            value,
        );
    };
    no_unknown_fields(c, &["value", "description"], at, Code::UnknownField)?;
    let typed = match c.get("value") {
        Some(Value::String(s)) => ChoiceValue::Text(s.clone()),
        Some(Value::Bool(b)) => ChoiceValue::Flag(*b),
        None => {
            return refuse(
                Code::InvalidLabel,
                at_field(at, "value"),
                "a choice needs a value",
            )
        }
        Some(other) => {
            return refuse_type(
                Code::InvalidLabel,
                at_field(at, "value"),
                "a choice's value must be a string or a boolean",
                other,
            )
        }
    };
    Ok((typed, optional_description(c.get("description"), at)?))
}

/// The label the model reads for `value`: a boolean's text, a string as it is unless a
/// boolean of the same question reads the same (then quoted, as JSON writes it).
fn label_of(value: &ChoiceValue, all: &[ChoiceValue]) -> String {
    match value {
        ChoiceValue::Flag(b) => b.to_string(),
        ChoiceValue::Text(s) => {
            let reads_as_flag = all
                .iter()
                .any(|v| matches!(v, ChoiceValue::Flag(b) if b.to_string() == *s));
            if reads_as_flag {
                Value::String(s.clone()).to_string()
            } else {
                s.clone()
            }
        }
    }
}

/// `levels`: each `{label, description?}`, lowest first (their count is validation's
/// rule). Returns the System One levels and the labels.
fn levels(value: Option<&Value>, at: &[String]) -> Result<(Vec<Value>, Vec<String>), ApiError> {
    let list = required_array(
        value,
        at,
        Code::InvalidCriteria,
        "a score question needs levels",
        "levels must be an array",
    )?;
    let mut levels = Vec::with_capacity(list.len());
    let mut labels = Vec::with_capacity(list.len());
    for (k, level) in list.iter().enumerate() {
        let at = at_field(at, &k.to_string());
        let Value::Object(l) = level else {
            return refuse_type(
                Code::InvalidCriteria,
                at,
                "a level must be an object",
                level,
            );
        };
        no_unknown_fields(l, &["label", "description"], &at, Code::UnknownField)?;
        let label = string_field(l, "label", &at, Code::InvalidLabel)?;
        let description = optional_description(l.get("description"), &at)?;
        levels.push(if description.is_null() {
            Value::String(label.clone())
        } else {
            json!({"label": label, "description": description})
        });
        labels.push(label);
    }
    Ok((levels, labels))
}

/// `description`: absent or null (none), or a string.
fn optional_description(value: Option<&Value>, at: &[String]) -> Result<Value, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(v @ Value::String(_)) => Ok(v.clone()),
        Some(other) => refuse_type(
            Code::InvalidDescription,
            at_field(at, "description"),
            "a description must be a string",
            other,
        ),
    }
}

/// `prompt_cache_key`, `safety_identifier` (strings of at most 64 characters, never
/// logged: the cache key is not forwarded, no backend here routes by it) and
/// `prompt_cache_options` (accepted; the backends' caches need no breakpoints).
fn openai_options(body: &Map<String, Value>) -> Result<(), ApiError> {
    for field in ["prompt_cache_key", "safety_identifier"] {
        match body.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.chars().count() <= MAX_IDENTIFIER_CHARS => {}
            Some(Value::String(s)) => {
                return refuse(
                    Code::InvalidBody,
                    loc(&[field]),
                    format!(
                        "{field} has {} characters, more than the limit of {MAX_IDENTIFIER_CHARS}",
                        s.chars().count()
                    ),
                )
            }
            Some(other) => {
                return refuse_type(
                    Code::InvalidBody,
                    loc(&[field]),
                    &format!("{field} must be a string"),
                    other,
                )
            }
        }
    }
    let at = loc(&["prompt_cache_options"]);
    match body.get("prompt_cache_options") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(o)) => {
            no_unknown_fields(o, &["mode", "ttl"], &at, Code::InvalidBody)?;
            one_of(
                o.get("mode"),
                &["implicit", "explicit"],
                &at_field(&at, "mode"),
                Code::InvalidBody,
            )?;
            one_of(
                o.get("ttl"),
                &["30m"],
                &at_field(&at, "ttl"),
                Code::InvalidBody,
            )
        }
        Some(other) => refuse_type(
            Code::InvalidBody,
            at,
            "prompt_cache_options must be an object",
            other,
        ),
    }
}

/// A required array at `at`: `missing` when absent, `<must>, got <type>` when not an array.
fn required_array<'v>(
    value: Option<&'v Value>,
    at: &[String],
    code: Code,
    missing: &str,
    must: &str,
) -> Result<&'v Vec<Value>, ApiError> {
    match value {
        Some(Value::Array(list)) => Ok(list),
        None => refuse(code, at.to_vec(), missing),
        Some(other) => refuse_type(code, at.to_vec(), must, other),
    }
}

/// A required string field of `object`.
fn string_field(
    object: &Map<String, Value>,
    field: &str,
    at: &[String],
    code: Code,
) -> Result<String, ApiError> {
    match object.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        None => refuse(code, at_field(at, field), format!("{field} is required")),
        Some(other) => refuse_type(
            code,
            at_field(at, field),
            &format!("{field} must be a string"),
            other,
        ),
    }
}

/// An optional enumerated string: absent, null, or one of `allowed`.
fn one_of(
    value: Option<&Value>,
    allowed: &[&str],
    at: &[String],
    code: Code,
) -> Result<(), ApiError> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(()),
        Some(_) => {
            let field = at.last().map_or("", String::as_str);
            refuse(
                code,
                at.to_vec(),
                format!("{field} must be one of {}", allowed.join(", ")),
            )
        }
    }
}

/// The first field of `object` not in `allowed` is refused at its location.
fn no_unknown_fields(
    object: &Map<String, Value>,
    allowed: &[&str],
    at: &[String],
    code: Code,
) -> Result<(), ApiError> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => refuse(
            code,
            at_field(at, k),
            format!("unknown field; this object takes {}", allowed.join(", ")),
        ),
    }
}

/// A refusal of System One validation, said in the Decisions body's terms: the state is
/// `input`, a question's criteria are its `choices` or `levels`, and an image is where the
/// caller put it.
pub(super) fn in_decision_terms(mut e: ApiError, translated: &Translated) -> ApiError {
    let (asked, image_locs) = (&translated.asked, &translated.image_locs);
    match e.loc.first().map(String::as_str) {
        Some("state") => {
            e.loc = loc(&["input"]);
            e.msg = e.msg.replacen("state", "input", 1);
        }
        Some("questions") if e.loc.get(2).map(String::as_str) == Some("criteria") => {
            let kind = e.loc[1]
                .parse::<usize>()
                .ok()
                .and_then(|i| asked.get(i))
                .map(|a| &a.kind);
            e.loc[2] = match kind {
                Some(AskedKind::Score(_)) => "levels",
                _ => "choices",
            }
            .into();
        }
        // `images` alone (the model takes none) is said at the first image.
        Some("images") => {
            let k = e
                .loc
                .get(1)
                .and_then(|k| k.parse::<usize>().ok())
                .unwrap_or(0);
            if let Some(at) = image_locs.get(k) {
                e.loc = at.clone();
            }
        }
        // `N images (N in images, 0 in assets) is more than …`: this body has no assets.
        None if e.code == Code::TooManyImages => {
            if let (Some(open), Some(close)) = (e.msg.find(" ("), e.msg.find(") ")) {
                e.msg.replace_range(open..=close, "");
            }
        }
        _ => {}
    }
    e
}

fn at_field(at: &[String], field: &str) -> Vec<String> {
    let mut out = at.to_vec();
    out.push(field.to_string());
    out
}
