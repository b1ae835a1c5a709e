//! A model served by a native System One upstream: the request is forwarded whole instead
//! of lowered into reads. The same rules hold as for the reads: one in-flight slot for the
//! forwarded request (held until the upstream is done with it, even when the caller left),
//! the whole request's deadline as its bound (waiting for a slot counts against it as for
//! reads; the exchange running out of it is the upstream's timeout, which counts against
//! the circuit like a read's), the upstream latency and status recorded under the `systemone` dialect, and a
//! dropped future cancels it.
//!
//! Questions of one option are answered here without asking, as always; the rest go in
//! one request in the caller's order, in the contract's shape (rebuilt from the validated
//! request: the state, each question's instructions and criteria, and `temperature`,
//! `permutations`, `layout`, `history` when the caller set them). Answers are passed
//! through as the upstream calibrated them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::time::{timeout_at, Instant};

use super::answers::{Answers, PipelineError, TokenUsage};
use super::decode::{certain, Decoded};
use super::pipeline::{status_class, Pipeline};
use crate::backend::systemone::{NativeAnswer, NativeAsk, NativeReply, SystemOneBackend};
use crate::backend::BackendError;
use crate::calibration::{confidence, temper};
use crate::config::Layout;
use crate::models::tokens::estimate_tokens_for_bytes;
use crate::question::{LoweredQuestion, QuestionKind};
use crate::request::{History, ValidRequest};

impl Pipeline {
    /// Forwards `req` to its model's native `upstream`, within the request's deadline.
    pub(super) async fn forward(
        &self,
        upstream: &SystemOneBackend,
        req: &ValidRequest,
        sent: &AtomicU64,
    ) -> Result<Answers, PipelineError> {
        let asked: Vec<usize> = (0..req.questions().len())
            .filter(|q| req.questions()[*q].options.len() >= 2)
            .collect();
        if asked.is_empty() {
            return Ok(unasked(req));
        }
        // A request only the byte estimate put over a limit: a native upstream has no
        // tokenizer to count it with, so it is refused on the estimate, saying so.
        super::context_window::settle_limits(req, self.in_flight()).await?;
        let ask = native_ask(req, &asked)?;
        // Waiting for the model or a slot is the caller's time (the deadline); only the
        // exchange itself running out of it is the upstream's timeout (and its circuit's).
        let deadline = Instant::now() + self.request_timeout();
        let permit = timeout_at(deadline, async {
            upstream.prepare().await?;
            Ok::<_, BackendError>(self.in_flight().acquire().await)
        })
        .await
        .map_err(|_| PipelineError::Deadline)??;
        sent.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let span = super::spans::forward(req);
        let result = span
            .clone()
            .scope(timeout_at(deadline, upstream.forward(&ask, permit)))
            .await
            .unwrap_or(Err(BackendError::Timeout));
        let class = status_class(&result);
        if result.is_err() {
            super::spans::failed(&span, class);
        }
        self.metrics()
            .observe_upstream(upstream.dialect(), started.elapsed(), class);
        let (reply, bytes) = result?;
        Ok(answers(req, &asked, reply, bytes))
    }
}

/// The answers of a request none of whose questions needed asking.
fn unasked(req: &ValidRequest) -> Answers {
    Answers {
        answers: req.questions().iter().map(|_| certain()).collect(),
        usage: TokenUsage::default(),
        model: req.model().upstream_model.clone(),
    }
}

/// The request for the upstream: the questions of `asked`, in the contract's shape.
fn native_ask<'a>(req: &'a ValidRequest, asked: &[usize]) -> Result<NativeAsk<'a>, PipelineError> {
    let state: Value = serde_json::from_str(req.state_json())
        .map_err(|e| BackendError::Protocol(format!("cannot re-read the state: {e}")))?;
    let questions: Vec<&LoweredQuestion> = asked.iter().map(|q| &req.questions()[*q]).collect();
    let mut fields = Map::new();
    fields.insert("state".into(), state);
    let objects = questions.iter().map(|q| (q.id.clone(), question_object(q)));
    fields.insert("questions".into(), Value::Object(objects.collect()));
    // A named profile recalibrates raw answers: ask for them (the caller cannot have set a
    // temperature beside a profile).
    let temperature = req.temperature().or(req.calibration().map(|_| 1.0));
    if let Some(t) = temperature {
        fields.insert("temperature".into(), Value::from(t));
    }
    if req.permutations() > 1 {
        fields.insert("permutations".into(), Value::from(req.permutations()));
    }
    if req.layout() != Layout::Accuracy {
        fields.insert("layout".into(), Value::from(req.layout().as_str()));
    }
    if let Some(history) = history(req, asked) {
        fields.insert("history".into(), history);
    }
    Ok(NativeAsk {
        fields,
        images: req.images(),
        questions,
    })
}

/// One question as the caller wrote it: its type, instructions and criteria (a noul's only
/// when it had a description).
fn question_object(q: &LoweredQuestion) -> Value {
    let mut object = Map::new();
    object.insert("type".into(), Value::from(q.kind.as_str()));
    object.insert("instructions".into(), q.instructions.clone());
    let described = |i: usize| q.options[i].description.clone();
    let criteria = match q.kind {
        QuestionKind::Choice => Some(Value::Object(
            q.options
                .iter()
                .map(|o| (o.label.clone(), o.description.clone()))
                .collect(),
        )),
        QuestionKind::Noul if q.options.iter().all(|o| o.description.is_null()) => None,
        QuestionKind::Noul => {
            Some(serde_json::json!({"true": described(1), "false": described(0)}))
        }
        QuestionKind::Score => Some(Value::Array((0..q.options.len()).map(described).collect())),
    };
    if let Some(criteria) = criteria {
        object.insert("criteria".into(), criteria);
    }
    Value::Object(object)
}

/// The caller's history for the questions sent: the shared one, or the per-question
/// entries of those questions.
fn history(req: &ValidRequest, asked: &[usize]) -> Option<Value> {
    match req.history() {
        History::None => None,
        History::Shared(text) => Some(Value::from(text.as_str())),
        History::PerQuestion(entries) => {
            let map: Map<String, Value> = asked
                .iter()
                .filter_map(|q| {
                    let text = entries.get(*q)?.as_ref()?;
                    Some((req.questions()[*q].id.clone(), Value::from(text.as_str())))
                })
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
    }
}

/// The upstream's answers in the request's order (the unasked ones certain), its usage or
/// an estimate from the bytes sent, and the model it says served.
fn answers(req: &ValidRequest, asked: &[usize], reply: NativeReply, bytes: usize) -> Answers {
    let mut answers: Vec<Decoded> = req.questions().iter().map(|_| certain()).collect();
    for (q, answer) in asked.iter().zip(reply.answers) {
        answers[*q] = match req.calibration() {
            None => passed_through(answer),
            Some(_) => recalibrated(req, *q, answer),
        };
    }
    let usage = match reply.usage {
        Some((u, estimated)) => TokenUsage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            evaluated_tokens: u.evaluated_tokens,
            upstream_requests: 1,
            estimated,
        },
        None => TokenUsage {
            input_tokens: estimate_tokens_for_bytes(bytes) as u64,
            output_tokens: asked.len() as u64,
            cached_tokens: 0,
            evaluated_tokens: estimate_tokens_for_bytes(bytes) as u64,
            upstream_requests: 1,
            estimated: true,
        },
    };
    Answers {
        answers,
        usage,
        model: reply.model,
    }
}

/// A raw (temperature 1) native answer of a request that named a profile, calibrated as
/// the read pipeline calibrates its own: by the profile when it covers the question, else by
/// the model's formula for its option count. The upstream's other fields are kept, its
/// `temperature` (1) replaced by the one applied.
fn recalibrated(req: &ValidRequest, q: usize, answer: NativeAnswer) -> Decoded {
    let question = &req.questions()[q];
    let mut passed = answer.passed;
    passed.shift_remove("temperature");
    let raw = Decoded {
        confidence: confidence(&answer.probabilities),
        probabilities: answer.probabilities,
        temperature: 1.0,
        ..certain()
    };
    let profile = req
        .calibration()
        .filter(|p| p.covers(&req.model().name, question, req.layout()));
    let decoded = match profile {
        Some(p) => p.apply(raw),
        None => {
            let n = question.options.len();
            let t = req.model().formula(req.layout()).temperature(n);
            let probabilities = temper(&raw.probabilities, t);
            Decoded {
                confidence: confidence(&probabilities),
                probabilities,
                temperature: t,
                ..raw
            }
        }
    };
    let mut fields = Map::new();
    fields.insert("temperature".into(), Value::from(decoded.temperature));
    fields.extend(passed);
    Decoded {
        passed: Some(Arc::new(fields)),
        ..decoded
    }
}

/// A native answer as this service writes it: its probabilities and confidence, and every
/// other field as the upstream wrote it (no temperature of this service's).
fn passed_through(answer: NativeAnswer) -> Decoded {
    let temperature = answer
        .passed
        .get("temperature")
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    Decoded {
        probabilities: answer.probabilities,
        option_mass: None,
        option_mass_unknown: false,
        temperature,
        confidence: answer.confidence,
        profile: None,
        prior: None,
        orders: Vec::new(),
        passed: Some(Arc::new(answer.passed)),
        model: None,
    }
}
