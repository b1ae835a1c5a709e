//! Response wire types: the `POST /v1/systemone` answer body, in the contract's key order,
//! and the 200 answer every front door sends its body in.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;

use crate::calibration::profile::set_member;
use crate::engine::decode::Decoded;
use crate::engine::TokenUsage;
use crate::error::{ApiError, Code};
use crate::question::{LoweredQuestion, QuestionKind};

/// A 200 answer with `body` as JSON; a body that cannot be encoded is logged and answered
/// as an internal error.
pub(super) fn json_ok<T: Serialize>(body: &T) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(body).map_err(|e| {
        tracing::error!(error = %e, "cannot encode the answer");
        ApiError::new(Code::Internal, "internal error")
    })?;
    Ok((
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// The whole 200 body.
pub(super) struct SystemOneResponse<'a> {
    pub model: &'a str,
    pub questions: &'a [LoweredQuestion],
    pub answers: &'a [Decoded],
    pub usage: TokenUsage,
}

impl<'a> SystemOneResponse<'a> {
    /// The body for one request's answers.
    pub(super) fn new(
        questions: &'a [LoweredQuestion],
        answers: &'a crate::engine::Answers,
    ) -> Self {
        SystemOneResponse {
            model: &answers.model,
            questions,
            answers: &answers.answers,
            usage: answers.usage,
        }
    }
}

impl Serialize for SystemOneResponse<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("model", self.model)?;
        map.serialize_entry(
            "answers",
            &AnswersWire {
                questions: self.questions,
                answers: self.answers,
            },
        )?;
        map.serialize_entry("usage", &UsageWire(self.usage))?;
        map.end()
    }
}

struct AnswersWire<'a> {
    questions: &'a [LoweredQuestion],
    answers: &'a [Decoded],
}

impl Serialize for AnswersWire<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.questions.len()))?;
        for (q, a) in self.questions.iter().zip(self.answers) {
            map.serialize_entry(
                &q.id,
                &Answer {
                    question: q,
                    decoded: a,
                },
            )?;
        }
        map.end()
    }
}

struct Answer<'a> {
    question: &'a LoweredQuestion,
    decoded: &'a Decoded,
}

impl Serialize for Answer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let q = self.question;
        let d = self.decoded;
        let p = &d.probabilities;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", q.kind.as_str())?;
        match q.kind {
            QuestionKind::Choice => {
                map.serialize_entry("choice", &q.options[d.chosen()].label)?;
                map.serialize_entry(
                    "probabilities",
                    &Pairs(
                        q.options
                            .iter()
                            .map(|o| o.label.as_str())
                            .zip(p.iter().copied()),
                    ),
                )?;
            }
            QuestionKind::Noul => {
                map.serialize_entry("noul", &d.yes())?;
            }
            QuestionKind::Score => {
                map.serialize_entry("score", &d.expected_level())?;
                let keys: Vec<String> = (0..p.len()).map(|i| i.to_string()).collect();
                map.serialize_entry(
                    "legend",
                    &Pairs(
                        keys.iter()
                            .map(String::as_str)
                            .zip(q.options.iter().map(|o| &o.description)),
                    ),
                )?;
                map.serialize_entry(
                    "probabilities",
                    &Pairs(keys.iter().map(String::as_str).zip(p.iter().copied())),
                )?;
            }
        }
        write_calibration(&mut map, q, d)?;
        map.end()
    }
}

/// What every answer carries after its type's fields: confidence, temperature, the option
/// mass (or that it is unknown), and what a profile added.
fn write_calibration<M: SerializeMap>(
    map: &mut M,
    q: &LoweredQuestion,
    d: &Decoded,
) -> Result<(), M::Error> {
    map.serialize_entry("confidence", &d.confidence)?;
    if let Some(model) = &d.model {
        map.serialize_entry("model", &**model)?;
    }
    match &d.passed {
        // A native upstream's answer: its own calibration fields and extensions, as it
        // wrote them (a `model` of its own gives way to the escalation's).
        Some(passed) => {
            let theirs = passed
                .iter()
                .filter(|(k, _)| d.model.is_none() || *k != "model");
            for (k, v) in theirs {
                map.serialize_entry(k, v)?;
            }
        }
        None => write_mass(map, d)?,
    }
    if let Some(weight) = d.prior {
        // The position prior's weight taken out of this answer's reads (an extra key, which
        // TypeSafe clients ignore).
        map.serialize_entry("prior_correction", &weight)?;
    }
    if let Some(extra) = &d.profile {
        map.serialize_entry("calibration", &*extra.name)?;
        let set: Vec<Value> = extra
            .prediction_set
            .iter()
            .map(|&i| set_member(q, i))
            .collect();
        map.serialize_entry("prediction_set", &set)?;
        map.serialize_entry("automate", &extra.automate)?;
    }
    Ok(())
}

/// This service's temperature and option mass (or that it is unknown).
fn write_mass<M: SerializeMap>(map: &mut M, d: &Decoded) -> Result<(), M::Error> {
    map.serialize_entry("temperature", &d.temperature)?;
    if let Some(mass) = d.option_mass {
        map.serialize_entry("option_mass", &mass)?;
    }
    if d.option_mass_unknown {
        // Asked, but the backend could not report the pre-mask mass: say so rather
        // than report a number that is not what `option_mass` claims.
        map.serialize_entry("option_mass_unknown", &true)?;
    }
    Ok(())
}

/// Key/value pairs written as a JSON object in their order.
struct Pairs<I>(I);

impl<'k, V: Serialize, I: Iterator<Item = (&'k str, V)> + Clone> Serialize for Pairs<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (k, v) in self.0.clone() {
            map.serialize_entry(k, &v)?;
        }
        map.end()
    }
}

/// `usage` as `/v1/systemone` writes it (`/v2/rerank` repeats it beside Cohere's `meta`).
pub(super) struct UsageWire(pub TokenUsage);

impl Serialize for UsageWire {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let u = &self.0;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("input_tokens", &u.input_tokens)?;
        map.serialize_entry("output_tokens", &u.output_tokens)?;
        map.serialize_entry("upstream_requests", &u.upstream_requests)?;
        map.serialize_entry("cached_tokens", &u.cached_tokens)?;
        map.serialize_entry("evaluated_tokens", &u.evaluated_tokens)?;
        if u.estimated {
            map.serialize_entry("estimated", &true)?;
        }
        map.end()
    }
}

/// One name `/v1/models` lists: the name, the public model it names, and that model's
/// release date if configured.
pub(super) struct ListedName<'a> {
    pub name: &'a str,
    pub model: &'a str,
    pub release_date: Option<&'a str>,
}

/// `GET /v1/models`: TypeSafe's shape (every name a request may use, aliases included, as
/// its `ModelMetadata` says) and OpenAI's (the models themselves) in one body. TypeSafe's
/// SDKs type `release_date` as a string, so an unconfigured one is `"unknown"`, not null.
pub(super) fn models_body(names: &[ListedName<'_>], models: &[&str]) -> Value {
    let typesafe: Vec<Value> = names
        .iter()
        .map(|n| {
            let description = if n.name == n.model {
                format!("System One over {}", n.model)
            } else {
                format!("System One over {} (an alias)", n.model)
            };
            serde_json::json!({
                "name": n.name,
                "description": description,
                "release_date": n.release_date.unwrap_or("unknown"),
            })
        })
        .collect();
    let openai: Vec<Value> = models
        .iter()
        .map(|name| serde_json::json!({"id": name, "object": "model", "owned_by": "systemone"}))
        .collect();
    serde_json::json!({"models": typesafe, "object": "list", "data": openai})
}
