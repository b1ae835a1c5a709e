//! Fakes of OpenAI-compatible hosts, one [`Family`] per kind of host the `openai` dialect
//! must tell apart: post-bias logprobs with a 20 cap (hosted APIs, SGLang), pre-bias or no
//! bias (Ollama's `/v1`), text-only tokens, no prefill, TGI's `top_n_tokens` ≤ 5, no
//! logprobs at all.
//!
//! `POST /v1/chat/completions` derives deterministic logits over a small vocabulary (the
//! table's label tokens, the prefill probe's ` x`/` y`/`The`, and fillers) from the sha256
//! of the request's context, and answers the way its family does: the cap (a 4xx above it,
//! or clamped), the bias (after or before the logprobs, ignored, or a 400), how tokens are
//! named, whether a trailing assistant message is continued. [`FakeOpenAi::logits`] gives
//! a test the same logits for a recorded body, so it can compute the masked distribution
//! independently. Fault modes for the fault suite; it counts requests and the most in
//! flight at once.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::fake_server::{self, Recorder};

/// What happens to `top_logprobs` above the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverCap {
    /// This 4xx status.
    Reject(u16),
    /// Silently the cap.
    Clamp,
}

/// What `logit_bias` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeBias {
    /// Added to the logits; the returned logprobs include it.
    After,
    /// Added to the logits for sampling; the returned logprobs are raw.
    Before,
    /// Accepted and ignored.
    Ignored,
    /// A 400.
    Rejected,
}

/// How entries name their tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeIds {
    /// `id` and `token` (llama.cpp).
    IdField,
    /// `token_id` and `token`.
    TokenIdField,
    /// `token: "token_id:N"` only.
    Strings,
    /// `token` text (and `bytes`) only: hosted APIs.
    Text,
}

/// What a trailing assistant message does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakePrefill {
    /// Continued as it is (unknown fields ignored).
    Trailing,
    /// Continued only with `continue_final_message: true`; answered otherwise.
    ContinueField,
    /// Always answered as a finished turn; `continue_final_message` is a 400 (strict host).
    Answered,
}

/// One kind of host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub cap: usize,
    pub over_cap: OverCap,
    pub bias: FakeBias,
    pub ids: FakeIds,
    pub prefill: FakePrefill,
    /// Whether `logprobs: true` is answered with logprobs.
    pub logprobs: bool,
}

impl Family {
    /// Hosted APIs and SGLang: post-bias logprobs, `top_logprobs` ≤ 20 (400 above).
    pub fn post_bias_cap_20() -> Self {
        Family {
            cap: 20,
            over_cap: OverCap::Reject(400),
            bias: FakeBias::After,
            ids: FakeIds::TokenIdField,
            prefill: FakePrefill::Trailing,
            logprobs: true,
        }
    }
    /// Ollama's `/v1`: `top_logprobs` clamped to 20, `logit_bias` ignored, ids reported.
    pub fn pre_bias_no_bias() -> Self {
        Family {
            cap: 20,
            over_cap: OverCap::Clamp,
            bias: FakeBias::Ignored,
            ids: FakeIds::IdField,
            prefill: FakePrefill::Trailing,
            logprobs: true,
        }
    }
    /// A host that honours the bias for sampling but reports raw logprobs (llama-server's
    /// way), top-20 only.
    pub fn pre_bias_cap_20() -> Self {
        Family {
            bias: FakeBias::Before,
            ..Self::pre_bias_no_bias()
        }
    }
    /// A hosted API that names tokens by text only (post-bias, cap 20).
    pub fn text_only() -> Self {
        Family {
            ids: FakeIds::Text,
            ..Self::post_bias_cap_20()
        }
    }
    /// A strict host that answers a trailing assistant message instead of continuing it.
    pub fn no_prefill() -> Self {
        Family {
            prefill: FakePrefill::Answered,
            ..Self::post_bias_cap_20()
        }
    }
    /// TGI: `top_n_tokens` ≤ 5 (422 above), `logit_bias` ignored, text tokens, prefill
    /// through `continue_final_message`.
    pub fn tgi() -> Self {
        Family {
            cap: 5,
            over_cap: OverCap::Reject(422),
            bias: FakeBias::Ignored,
            ids: FakeIds::Text,
            prefill: FakePrefill::ContinueField,
            logprobs: true,
        }
    }
    /// A host that never returns logprobs.
    pub fn no_logprobs() -> Self {
        Family {
            logprobs: false,
            ..Self::post_bias_cap_20()
        }
    }
}

/// How the fake misbehaves on chat requests.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    None,
    /// This status, with an error text naming a secret host and key, and the messages.
    Status(u16),
    /// Sleep this long (tokio time) before answering correctly.
    Slow(Duration),
    /// A 200 whose body is not JSON.
    MalformedJson,
    /// A 200 whose top list lacks its last entry.
    DropLast,
    /// A 200 whose logprobs are not finite (JSON writes a non-finite number as `null`).
    NonFinite,
}

/// The shared state of one fake host.
#[derive(Debug)]
struct FakeState {
    family: Family,
    /// `(id, text)` of every token of the vocabulary.
    vocab: Vec<(u32, String)>,
    /// The label ids, most likely first (their rank sets their base logit).
    label_rank: std::collections::HashMap<u32, usize>,
    fault: Mutex<Fault>,
    /// The chat requests: their count, bodies and the most in flight at once.
    chat: Recorder,
}

/// A running fake host.
#[derive(Debug, Clone)]
pub struct FakeOpenAi {
    pub addr: SocketAddr,
    state: Arc<FakeState>,
}

const PATTERN_X: u32 = 1;
const PATTERN_Y: u32 = 2;
const ANSWERED: u32 = 3;

impl FakeOpenAi {
    /// Starts a fake of `family` whose label tokens are `labels` (`(id, text)`, most
    /// likely first), on 127.0.0.1:0.
    pub async fn start(family: Family, labels: &[(u32, String)]) -> Self {
        let mut vocab = vec![
            (PATTERN_X, " x".to_string()),
            (PATTERN_Y, " y".to_string()),
            (ANSWERED, "The".to_string()),
        ];
        vocab.extend((10..400).map(|id| (id, format!("w{id}"))));
        let mut label_rank = std::collections::HashMap::new();
        for (id, text) in labels {
            if !label_rank.contains_key(id) {
                label_rank.insert(*id, label_rank.len());
                vocab.push((*id, text.clone()));
            }
        }
        let state = Arc::new(FakeState {
            family,
            vocab,
            label_rank,
            fault: Mutex::new(Fault::None),
            chat: Recorder::default(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(state.clone());
        let addr = fake_server::serve(app).await;
        FakeOpenAi { addr, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn set_fault(&self, fault: Fault) {
        *self.state.fault.lock().expect("lock") = fault;
    }

    /// Chat requests received.
    pub fn requests(&self) -> usize {
        self.state.chat.requests()
    }

    /// The most requests handled at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.chat.max_in_flight()
    }

    /// Every body received, in arrival order.
    pub fn bodies(&self) -> Vec<Value> {
        self.state.chat.bodies()
    }

    /// The bodies of option reads (prefill `answer=…`, a question in the user message),
    /// leaving out the probe's.
    pub fn read_bodies(&self) -> Vec<Value> {
        self.bodies()
            .into_iter()
            .filter(|b| {
                b["messages"][0]["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("\"options\""))
                    || b["messages"][0]["content"].is_array()
            })
            .collect()
    }

    /// The raw logits the fake uses for `body`, by token id.
    pub fn logits(&self, body: &Value) -> std::collections::HashMap<u32, f64> {
        let logits = raw_logits(&self.state, body);
        self.state
            .vocab
            .iter()
            .map(|(id, _)| *id)
            .zip(logits)
            .collect()
    }
}

/// Whether the host continues the trailing assistant message of `body`.
fn continued(family: Family, body: &Value) -> bool {
    let asked = body["continue_final_message"] == json!(true);
    match family.prefill {
        FakePrefill::Trailing => true,
        FakePrefill::ContinueField => asked,
        FakePrefill::Answered => false,
    }
}

/// A number in [0, 1) from the sha256 of `context` and `id`.
fn noise(context: &str, id: u32) -> f64 {
    let digest = Sha256::digest(format!("{context}#{id}").as_bytes());
    let n = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    (n >> 11) as f64 / (1u64 << 53) as f64
}

/// The logits for `body`, in vocabulary order.
fn raw_logits(state: &FakeState, body: &Value) -> Vec<f64> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let user = messages
        .first()
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let prefill =
        (last["role"] == "assistant").then(|| last["content"].as_str().unwrap_or("").to_string());
    let goes_on = prefill.is_some() && continued(state.family, body);
    let context = match (&prefill, goes_on) {
        (Some(p), true) => format!("{user}|{p}"),
        (Some(p), false) => format!("{user}|{p}<end_of_turn>"),
        (None, _) => user.clone(),
    };
    let pattern = prefill.as_deref().filter(|p| p.starts_with("x y"));
    state
        .vocab
        .iter()
        .map(|(id, _)| {
            let n = noise(&context, *id);
            let base = match state.label_rank.get(id) {
                Some(rank) => 3.0 - 0.1 * *rank as f64 + (n - 0.5),
                None => -1.0 + 2.0 * (n - 0.5),
            };
            let boost = match (pattern, goes_on, *id) {
                (Some(p), true, PATTERN_Y) if p.ends_with('x') => 12.0,
                (Some(p), true, PATTERN_X) if p.ends_with('y') => 12.0,
                (Some(_), false, ANSWERED) => 12.0,
                _ => 0.0,
            };
            base + boost
        })
        .collect()
}

fn log_softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
    let log_z = max + sum.ln();
    logits.iter().map(|l| l - log_z).collect()
}

fn error(status: u16, body: &Value) -> Response {
    let text = format!(
        "upstream secret-backend.internal with key sk-backend refused: {}",
        body["messages"]
    );
    fake_server::status(status, json!({"error": {"message": text}}), None)
}

/// One entry as the family writes it.
fn entry(family: Family, id: u32, text: &str, lp: f64) -> Value {
    match family.ids {
        FakeIds::IdField => {
            json!({"id": id, "token": text, "logprob": lp, "bytes": text.as_bytes()})
        }
        FakeIds::TokenIdField => json!({"token_id": id, "token": text, "logprob": lp}),
        FakeIds::Strings => json!({"token": format!("token_id:{id}"), "logprob": lp}),
        FakeIds::Text => json!({"token": text, "logprob": lp, "bytes": text.as_bytes()}),
    }
}

async fn chat(State(state): State<Arc<FakeState>>, Json(body): Json<Value>) -> Response {
    let _in_flight = state.chat.enter();
    state.chat.keep(&body);
    answer(&state, &body).await
}

async fn answer(state: &FakeState, body: &Value) -> Response {
    let family = state.family;
    let fault = state.fault.lock().expect("lock").clone();
    match &fault {
        Fault::Status(s) => return error(*s, body),
        Fault::Slow(d) => tokio::time::sleep(*d).await,
        Fault::MalformedJson => return fake_server::not_json("{\"choices\": [".into()),
        _ => {}
    }
    if family.prefill == FakePrefill::Answered && body.get("continue_final_message").is_some() {
        return error(400, body);
    }
    let asked_k = body["top_logprobs"].as_u64().unwrap_or(0) as usize;
    if asked_k > family.cap {
        if let OverCap::Reject(status) = family.over_cap {
            return error(status, body);
        }
    }
    let bias: Vec<(u32, f64)> = body["logit_bias"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    if !bias.is_empty() && family.bias == FakeBias::Rejected {
        return error(400, body);
    }
    let raw = raw_logits(state, body);
    let honoured = matches!(family.bias, FakeBias::After | FakeBias::Before);
    let biased: Vec<f64> = state
        .vocab
        .iter()
        .zip(&raw)
        .map(|((id, _), l)| {
            let b = bias.iter().find(|(i, _)| i == id).map_or(0.0, |(_, b)| *b);
            l + if honoured { b } else { 0.0 }
        })
        .collect();
    let reported = log_softmax(if family.bias == FakeBias::After {
        &biased
    } else {
        &raw
    });
    let sampled = (0..biased.len())
        .max_by(|a, b| biased[*a].total_cmp(&biased[*b]))
        .unwrap_or(0);
    let mut order: Vec<usize> = (0..reported.len()).collect();
    order.sort_by(|a, b| reported[*b].total_cmp(&reported[*a]));
    let k = asked_k.min(family.cap);
    let mut top: Vec<Value> = order[..k.min(order.len())]
        .iter()
        .map(|i| {
            let (id, text) = &state.vocab[*i];
            let lp = if fault == Fault::NonFinite {
                f64::NEG_INFINITY
            } else {
                reported[*i]
            };
            entry(family, *id, text, lp)
        })
        .collect();
    if fault == Fault::DropLast {
        top.pop();
    }
    let (sid, stext) = &state.vocab[sampled];
    let mut position = entry(family, *sid, stext, reported[sampled]);
    position["top_logprobs"] = Value::Array(top);
    let logprobs = if family.logprobs && body["logprobs"] == json!(true) {
        json!({"content": [position]})
    } else {
        Value::Null
    };
    let prompt_tokens = body["messages"].to_string().len() / 4;
    let text = serde_json::to_string(&json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake-openai-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": stext}, "logprobs": logprobs, "finish_reason": "length"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
    }))
    .expect("serialises");
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response()
}
