//! A fake native System One server (`POST /v1/systemone`) in each flavor the `systemone`
//! dialect speaks: TypeSafe, Ollama and vLLM native.
//!
//! * It answers every question of a body with deterministic probabilities derived from the
//!   sha256 of the state and the question id ([`FakeNative::expected`] recomputes them), a
//!   confidence `1 − H/ln n`, the body's `model` as the model that served, and a usage;
//!   a question whose id starts with `unsure` gets a uniform answer (confidence 0), for
//!   escalation tests.
//! * Fault modes answer as each flavor fails: TypeSafe's 422 `detail` list,
//!   `x-typesafe-request-id`, `retry-after-ms` and 529; Ollama's `{"error": …}` bodies;
//!   vLLM's 501 for a model it does not serve natively; plus 5xx, malformed answers,
//!   slowness and a hang. Every error text repeats a canary that must never reach a caller.
//! * It counts requests, keeps every body, and tracks the most in flight at once
//!   (`fake_server::Recorder`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::fake_server::{self, Recorder};

/// Which native server the fake plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    TypeSafe,
    Ollama,
    Vllm,
}

/// Text every fake error carries: it must reach no caller.
pub const CANARY: &str = "upstream-canary-text";

/// How the fake misbehaves.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Answer correctly.
    None,
    /// 429 with `retry-after-ms` (TypeSafe) or `Retry-After` seconds (others).
    RateLimited { wait_ms: u64 },
    /// 529 (TypeSafe's overloaded) with `retry-after-ms`.
    Overloaded529 { wait_ms: u64 },
    /// This status with the flavor's error body.
    Status(u16),
    /// A 200 whose answer lacks the first question's `probabilities` (a choice) or `noul`.
    MissingField,
    /// A 200 whose first answer's `confidence` is a string.
    MistypedField,
    /// A 200 whose body is not JSON.
    NotJson,
    /// A 200 without `usage`.
    NoUsage,
    /// A 200 with an extra field `x_explanation` on every answer.
    ExtraField,
    /// A 200 whose usage reports 2^64 − 1 input tokens: a count no request can hold.
    HugeUsage,
    /// A 200 whose `model` is this text.
    Model(String),
    /// Sleep this long (tokio time) before answering correctly.
    Slow(Duration),
    /// Never answer.
    Hang,
}

/// Shared state of one fake.
#[derive(Debug)]
pub struct NativeState {
    pub flavor: Flavor,
    pub fault: Mutex<Fault>,
    /// The requests: their count, bodies and the most in flight at once.
    pub calls: Recorder,
    pub auth: Mutex<Vec<Option<String>>>,
    /// Whether `unsure…` questions get a peaked answer too (a stronger model).
    pub always_sure: std::sync::atomic::AtomicBool,
}

/// One fake native server on 127.0.0.1:0.
pub struct FakeNative {
    pub addr: SocketAddr,
    pub state: Arc<NativeState>,
}

impl FakeNative {
    /// Starts a fake of `flavor` in the current runtime.
    pub async fn start(flavor: Flavor) -> Self {
        let state = Arc::new(NativeState {
            flavor,
            fault: Mutex::new(Fault::None),
            calls: Recorder::default(),
            auth: Mutex::new(Vec::new()),
            always_sure: std::sync::atomic::AtomicBool::new(false),
        });
        let app = Router::new()
            .route("/v1/systemone", post(answer))
            .with_state(state.clone());
        let addr = fake_server::serve(app).await;
        FakeNative { addr, state }
    }

    /// The base URL to configure (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn set_fault(&self, fault: Fault) {
        *self.state.fault.lock().expect("lock") = fault;
    }

    /// Requests received (faulty ones included).
    pub fn requests(&self) -> usize {
        self.state.calls.requests()
    }

    /// Every body received, in arrival order.
    pub fn bodies(&self) -> Vec<Value> {
        self.state.calls.bodies()
    }

    /// The `Authorization` header of every request.
    pub fn auth_headers(&self) -> Vec<Option<String>> {
        self.state.auth.lock().expect("lock").clone()
    }

    /// Answers `unsure…` questions like any other (as a stronger model would).
    pub fn set_always_sure(&self) {
        self.state.always_sure.store(true, Ordering::SeqCst);
    }

    pub fn max_in_flight(&self) -> usize {
        self.state.calls.max_in_flight()
    }

    /// The fake's answer to `body` (what a correct answer holds).
    pub fn expected(body: &Value) -> Value {
        answer_body(body)
    }
}

async fn answer(
    State(state): State<Arc<NativeState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let _in_flight = state.calls.enter();
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    state.auth.lock().expect("lock").push(auth);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state.calls.keep(&body);
    let fault = state.fault.lock().expect("lock").clone();
    let mut body = body;
    if state.always_sure.load(Ordering::SeqCst) {
        body["x_always_sure"] = json!(true);
    }
    respond(state.flavor, fault, &body).await
}

async fn respond(flavor: Flavor, fault: Fault, body: &Value) -> Response {
    let ok = |answer: Value| {
        let mut r = (StatusCode::OK, axum::Json(answer)).into_response();
        if flavor == Flavor::TypeSafe {
            let id = "req_fake0123".parse().expect("header");
            r.headers_mut().insert("x-typesafe-request-id", id);
        }
        r
    };
    match fault {
        Fault::None => ok(answer_body(body)),
        Fault::RateLimited { wait_ms } => waited(flavor, 429, wait_ms),
        Fault::Overloaded529 { wait_ms } => waited(flavor, 529, wait_ms),
        Fault::Status(status) => error(flavor, status),
        Fault::MissingField => ok(broken(body, |a| {
            a.remove("probabilities");
            a.remove("noul");
        })),
        Fault::MistypedField => ok(broken(body, |a| {
            a.insert("confidence".into(), json!("high"));
        })),
        Fault::NotJson => fake_server::not_json(format!("<html>{CANARY}</html>")),
        Fault::NoUsage => {
            let mut a = answer_body(body);
            a.as_object_mut().expect("object").remove("usage");
            ok(a)
        }
        Fault::HugeUsage => {
            let mut a = answer_body(body);
            a["usage"]["input_tokens"] = json!(u64::MAX);
            ok(a)
        }
        Fault::ExtraField => ok(every_answer(body, |a| {
            a.insert("x_explanation".into(), json!({"why": "kept as sent"}));
        })),
        Fault::Model(model) => {
            let mut a = answer_body(body);
            a["model"] = json!(model);
            ok(a)
        }
        Fault::Slow(d) => {
            tokio::time::sleep(d).await;
            ok(answer_body(body))
        }
        Fault::Hang => std::future::pending().await,
    }
}

/// An error answer of `status` carrying a wait, in the flavor's header.
fn waited(flavor: Flavor, status: u16, wait_ms: u64) -> Response {
    let (name, value) = match flavor {
        Flavor::TypeSafe => ("retry-after-ms", wait_ms.to_string()),
        _ => ("retry-after", wait_ms.div_ceil(1000).to_string()),
    };
    fake_server::status(status, error_body(flavor, status), Some((name, &value)))
}

/// `status` with the flavor's error body.
fn error(flavor: Flavor, status: u16) -> Response {
    fake_server::status(status, error_body(flavor, status), None)
}

/// The flavor's error body for `status`, each carrying [`CANARY`].
fn error_body(flavor: Flavor, status: u16) -> Value {
    match (flavor, status) {
        (Flavor::TypeSafe, 422) => {
            json!({"detail": [{"loc": ["body", "questions"], "msg": CANARY, "type": "value_error"}]})
        }
        (Flavor::TypeSafe, _) => json!({"error": {"message": CANARY, "type": "api_error"}}),
        (Flavor::Ollama, _) => json!({"error": CANARY}),
        (Flavor::Vllm, _) => json!({"object": "error", "message": CANARY, "code": status}),
    }
}

/// A correct answer with `edit` applied to the first answer.
fn broken(body: &Value, edit: impl Fn(&mut Map<String, Value>)) -> Value {
    let mut a = answer_body(body);
    if let Some((_, first)) = a["answers"]
        .as_object_mut()
        .and_then(|m| m.iter_mut().next())
    {
        edit(first.as_object_mut().expect("answer object"));
    }
    a
}

/// A correct answer with `edit` applied to every answer.
fn every_answer(body: &Value, edit: impl Fn(&mut Map<String, Value>)) -> Value {
    let mut a = answer_body(body);
    if let Some(answers) = a["answers"].as_object_mut() {
        for answer in answers.values_mut() {
            edit(answer.as_object_mut().expect("answer object"));
        }
    }
    a
}

/// The correct answer to `body`.
fn answer_body(body: &Value) -> Value {
    let state = body["state"].to_string();
    let mut answers = Map::new();
    let questions = body["questions"].as_object().cloned().unwrap_or_default();
    let sure = body["x_always_sure"] == json!(true);
    for (id, q) in &questions {
        let seen = if sure {
            format!("sure:{id}")
        } else {
            id.clone()
        };
        answers.insert(id.clone(), answer_question(&state, &seen, q));
    }
    json!({
        "model": body["model"].as_str().unwrap_or("fake-native"),
        "answers": answers,
        "usage": {"input_tokens": 100 * questions.len(), "output_tokens": questions.len(), "upstream_requests": questions.len(), "cached_tokens": 0}
    })
}

/// One question's answer in the contract's shape.
fn answer_question(state: &str, id: &str, q: &Value) -> Value {
    let kind = q["type"].as_str().unwrap_or("choice");
    let n = match kind {
        "noul" => 2,
        "score" => q["criteria"].as_array().map_or(1, Vec::len),
        _ => q["criteria"].as_object().map_or(1, Map::len),
    };
    let p = probabilities(state, id, n);
    let h: f64 = p.iter().filter(|x| **x > 0.0).map(|x| -x * x.ln()).sum();
    let confidence = (1.0 - h / (n as f64).ln()).clamp(0.0, 1.0);
    let mut a = Map::new();
    a.insert("type".into(), json!(kind));
    match kind {
        "noul" => {
            a.insert("noul".into(), json!(p[1]));
        }
        "score" => {
            let levels = q["criteria"].as_array().cloned().unwrap_or_default();
            let score: f64 = p.iter().enumerate().map(|(i, x)| i as f64 * x).sum();
            a.insert("score".into(), json!(score));
            let legend: Map<String, Value> = levels
                .iter()
                .enumerate()
                .map(|(i, l)| (i.to_string(), l.clone()))
                .collect();
            a.insert("legend".into(), Value::Object(legend));
            let probs: Map<String, Value> = p
                .iter()
                .enumerate()
                .map(|(i, x)| (i.to_string(), json!(x)))
                .collect();
            a.insert("probabilities".into(), Value::Object(probs));
        }
        _ => {
            let labels: Vec<String> = q["criteria"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let best = (0..n).fold(0, |b, i| if p[i] > p[b] { i } else { b });
            a.insert("choice".into(), json!(labels[best]));
            let probs: Map<String, Value> = labels
                .iter()
                .zip(&p)
                .map(|(l, x)| (l.clone(), json!(x)))
                .collect();
            a.insert("probabilities".into(), Value::Object(probs));
        }
    }
    a.insert("confidence".into(), json!(confidence));
    Value::Object(a)
}

/// Deterministic probabilities over `n` options from the state and the question id
/// (uniform for an id starting with `unsure`).
fn probabilities(state: &str, id: &str, n: usize) -> Vec<f64> {
    if id.starts_with("unsure") {
        return vec![1.0 / n as f64; n];
    }
    let digest = Sha256::digest(format!("{state}\u{0}{id}").as_bytes());
    let mut weights: Vec<f64> = (0..n)
        .map(|i| 1.0 + f64::from(digest[i % 32]) / 16.0)
        .collect();
    weights[usize::from(digest[0]) % n] *= 8.0;
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}
