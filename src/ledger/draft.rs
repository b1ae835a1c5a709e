//! A record made from what the flow holds: the validated requests of a call and their
//! answers (or a refusal's status and code). The caller's text goes in only as keyed hashes:
//!
//! * each question id and each choice label as its own hash (so a caller who names them
//!   can find them again: `GET /v1/ledger/decisions?question=…` hashes the name the same
//!   way);
//! * the request as one hash over what the service read from it: the state, every
//!   question's id, type, instructions and options, and the images, each length-prefixed.
//!   The same request sent compressed, pretty-printed or with its keys spaced differently
//!   hashes alike;
//! * images as the SHA-256 and size of their decoded bytes.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::key::{hex, Domain, LedgerKey};
use super::record::{Decision, ImageRecord, OrderReads, OrderedReads, QuestionRecord, Tokens};
use crate::calibration::Decoded;
use crate::config::Layout;
use crate::question::{LoweredQuestion, QuestionKind};
use crate::request::images::decode_image_string;
use crate::request::ValidRequest;

/// Who asked, where and when: what every record starts from.
#[derive(Debug, Clone)]
pub struct Identity {
    pub request_id: String,
    pub at_ms: i64,
    pub key: String,
    pub route: String,
    pub latency_ms: f64,
}

/// One request's answers and the model that gave them (as the backend reported it).
#[derive(Debug, Clone, Copy)]
pub struct RequestAnswers<'a> {
    pub decoded: &'a [Decoded],
    pub model: &'a str,
}

/// What the record of an answered call is made from.
#[derive(Debug, Clone, Copy)]
pub struct AnsweredCall<'a> {
    /// The configured model that served.
    pub model: &'a str,
    /// The call's validated requests (rerank: one per batch), in order.
    pub requests: &'a [ValidRequest],
    /// Their answers, in the same order.
    pub answers: &'a [RequestAnswers<'a>],
    pub usage: Tokens,
    /// Keep the validated requests too (`--ledger-inputs full`).
    pub full_inputs: bool,
}

/// The record of an answered call.
pub fn answered(key: &LedgerKey, who: Identity, call: AnsweredCall<'_>) -> Decision {
    let questions = call
        .requests
        .iter()
        .zip(call.answers)
        .flat_map(|(request, answers)| {
            request
                .questions()
                .iter()
                .zip(answers.decoded)
                .map(move |(q, d)| question(key, q, d, answers.model, request.layout()))
        })
        .collect();
    Decision {
        status: 200,
        code: None,
        model: Some(call.model.to_owned()),
        usage: call.usage,
        body_hash: Some(body_hash(key, call.requests)),
        images: call
            .requests
            .iter()
            .flat_map(|r| r.images())
            .map(|i| image(i))
            .collect(),
        questions,
        inputs: call.full_inputs.then(|| inputs(call.requests)),
        ..refused(key, who, 200, None, None)
    }
}

/// The record of a refusal: its status and code, and the model when the refusal knew it.
pub fn refused(
    key: &LedgerKey,
    who: Identity,
    status: u16,
    code: Option<&str>,
    model: Option<&str>,
) -> Decision {
    Decision {
        request_id: who.request_id,
        at_ms: who.at_ms,
        key: who.key,
        route: who.route,
        status,
        code: code.map(str::to_owned),
        model: model.map(str::to_owned),
        latency_ms: who.latency_ms,
        usage: Tokens::default(),
        body_hash: None,
        images: Vec::new(),
        questions: Vec::new(),
        hash_key_id: key.id().to_owned(),
        inputs: None,
    }
}

fn question(
    key: &LedgerKey,
    q: &LoweredQuestion,
    d: &Decoded,
    model: &str,
    layout: Layout,
) -> QuestionRecord {
    let labels = match q.kind {
        QuestionKind::Choice => q
            .options
            .iter()
            .map(|o| key.hash(Domain::Label, &o.label))
            .collect(),
        QuestionKind::Noul | QuestionKind::Score => Vec::new(),
    };
    QuestionRecord {
        name: key.hash(Domain::Name, &q.id),
        kind: q.kind.as_str().to_owned(),
        options: q.options.len(),
        labels,
        answer: d.chosen(),
        probabilities: d.probabilities.clone(),
        confidence: d.confidence,
        temperature: d.temperature,
        option_mass: d.option_mass,
        // An escalated answer names the escalation model that gave it.
        model: d.model.as_deref().unwrap_or(model).to_owned(),
        profile: d.profile.as_ref().map(|p| p.name.to_string()),
        prior_correction: d.prior,
        layout: Some(layout.as_str().to_owned()),
        reads: (!d.orders.is_empty()).then(|| OrderedReads {
            layout: layout.as_str().to_owned(),
            orders: d
                .orders
                .iter()
                .map(|(shift, logprobs)| OrderReads {
                    shift: *shift,
                    logprobs: logprobs.clone(),
                })
                .collect(),
        }),
    }
}

/// One keyed hash over everything the service read from the call's requests.
fn body_hash(key: &LedgerKey, requests: &[ValidRequest]) -> String {
    let mut mac = key.mac(Domain::Body);
    for request in requests {
        mac.update(request.state_json().as_bytes());
        for q in request.questions() {
            mac.update(q.id.as_bytes());
            mac.update(q.kind.as_str().as_bytes());
            mac.update(q.instructions.to_string().as_bytes());
            for option in &q.options {
                mac.update(option.label.as_bytes());
                mac.update(option.description.to_string().as_bytes());
            }
        }
        for image in request.images() {
            mac.update(image.as_bytes());
        }
    }
    mac.finish()
}

/// An image's content address and size (of its text, should it not decode: it was
/// validated, so it does).
fn image(text: &str) -> ImageRecord {
    let bytes = decode_image_string(text).unwrap_or_else(|_| text.as_bytes().to_vec());
    ImageRecord {
        sha256: hex(&Sha256::digest(&bytes)),
        bytes: bytes.len() as u64,
    }
}

/// The validated requests as JSON (`--ledger-inputs full`): state and questions.
fn inputs(requests: &[ValidRequest]) -> serde_json::Value {
    let requests: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            let questions: Vec<serde_json::Value> = r
                .questions()
                .iter()
                .map(|q| {
                    let options: Vec<serde_json::Value> = q
                        .options
                        .iter()
                        .map(|o| json!({"label": o.label, "description": o.description}))
                        .collect();
                    json!({"name": q.id, "type": q.kind.as_str(), "instructions": q.instructions, "options": options})
                })
                .collect();
            json!({"state": r.state_json(), "questions": questions})
        })
        .collect();
    json!({ "requests": requests })
}
