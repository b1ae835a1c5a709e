//! What `/v1/decisions` answers, in the `openai` SDK's shapes: the `Decision` body
//! (`openai/types/decision.py`) and OpenAI's error body.

use axum::http::StatusCode;
use axum::response::Response;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Value};

use super::translate::{Asked, AskedKind};
use crate::calibration::Decoded;
use crate::engine::TokenUsage;
use crate::error::ApiError;

/// The 200 body: `answers` in question order, `model` as resolved, `usage` in OpenAI's
/// shape (with this service's `upstream_requests`, and `estimated` when it is).
pub(super) struct DecisionBody<'a> {
    pub model: &'a str,
    pub asked: &'a [Asked],
    pub answers: &'a [Decoded],
    pub usage: TokenUsage,
}

impl Serialize for DecisionBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let answers: Vec<Value> = self
            .asked
            .iter()
            .zip(self.answers)
            .map(|(q, d)| answer(q, d))
            .collect();
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("answers", &answers)?;
        map.serialize_entry("model", self.model)?;
        map.serialize_entry("usage", &usage(self.usage))?;
        map.end()
    }
}

/// One answer. Beside OpenAI's fields it carries the extensions `/v1/systemone` answers
/// carry (`confidence` on a predicate too, `temperature`, `option_mass`, and a profile's
/// `calibration`, `prediction_set` and `automate`); OpenAI's SDK keeps them as extra fields.
fn answer(q: &Asked, d: &Decoded) -> Value {
    let p = &d.probabilities;
    let mut a = match &q.kind {
        AskedKind::Predicate => json!({
            "type": "predicate",
            "name": q.name,
            "probability": d.yes(),
        }),
        AskedKind::Choice(values) => json!({
            "type": "choice",
            "name": q.name,
            "choice": values[d.chosen()],
            "probabilities": values.iter().zip(p).map(|(v, x)| json!({"value": v, "probability": x})).collect::<Vec<_>>(),
        }),
        AskedKind::Score(labels) => json!({
            "type": "score",
            "name": q.name,
            "score": d.expected_level(),
            "probabilities": labels.iter().zip(p).enumerate()
                .map(|(i, (l, x))| json!({"value": i, "label": l, "probability": x}))
                .collect::<Vec<_>>(),
        }),
    };
    let extra = a.as_object_mut().expect("an answer is an object");
    extra.insert("confidence".into(), json!(d.confidence));
    extra.insert("temperature".into(), json!(d.temperature));
    if let Some(mass) = d.option_mass {
        extra.insert("option_mass".into(), json!(mass));
    }
    if d.option_mass_unknown {
        extra.insert("option_mass_unknown".into(), json!(true));
    }
    if let Some(profile) = &d.profile {
        extra.insert("calibration".into(), json!(&*profile.name));
        let set: Vec<Value> = profile
            .prediction_set
            .iter()
            .map(|&i| member(q, i))
            .collect();
        extra.insert("prediction_set".into(), Value::Array(set));
        extra.insert("automate".into(), json!(profile.automate));
    }
    a
}

/// A prediction-set member as the answer types it: the choice's value, the predicate's
/// boolean, the score level's index.
fn member(q: &Asked, index: usize) -> Value {
    match &q.kind {
        AskedKind::Predicate => json!(index == 1),
        AskedKind::Choice(values) => json!(values.get(index)),
        AskedKind::Score(_) => json!(index),
    }
}

/// OpenAI's `usage`. No backend here reports cache writes or reasoning, so both are 0.
fn usage(u: TokenUsage) -> Value {
    let mut usage = json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input_tokens + u.output_tokens,
        "upstream_requests": u.upstream_requests,
    });
    if u.estimated {
        usage["estimated"] = json!(true);
    }
    usage
}

/// An error as OpenAI's SDK reads it: `{"error": {message, type, param, code}}`, 400
/// `invalid_request_error` for every rule a request breaks (a schema rule's 422 and a
/// size rule's 413 included, OpenAI's convention; a 415 keeps its status), any other
/// status as the contract's table says, with this service's stable code in `code` and its headers.
pub(super) fn error_response(e: &ApiError) -> Response {
    let (status, kind) = match e.status() {
        StatusCode::UNPROCESSABLE_ENTITY
        | StatusCode::PAYLOAD_TOO_LARGE
        | StatusCode::BAD_REQUEST => (StatusCode::BAD_REQUEST, json!("invalid_request_error")),
        // The body cannot be read as sent: still the request's fault, with its own status.
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (e.status(), json!("invalid_request_error")),
        other => (other, json!(e.code.error_type())),
    };
    let param = (!e.loc.is_empty()).then(|| param(&e.loc));
    let message = match &param {
        Some(p) => format!("{p}: {}", e.msg),
        None => e.msg.clone(),
    };
    let body = json!({"error": {
        "message": message,
        "type": kind,
        "param": param,
        "code": e.code.as_str(),
    }});
    e.respond(status, &body)
}

/// A location as OpenAI writes `param`: `questions[2].choices[0].value`.
pub(super) fn param(loc: &[String]) -> String {
    let mut out = String::new();
    for segment in loc {
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(segment);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_writes_indexes_in_brackets() {
        let loc = |parts: &[&str]| parts.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            param(&loc(&["questions", "2", "choices", "0", "value"])),
            "questions[2].choices[0].value"
        );
        assert_eq!(
            param(&loc(&["input", "1", "content", "0", "image_url"])),
            "input[1].content[0].image_url"
        );
        assert_eq!(param(&loc(&["model"])), "model");
    }
}
