//! A faithful fake of a vLLM server, built from `tests/golden/README.md`.
//!
//! * `POST /v1/chat/completions` renders the messages with the golden toy template and
//!   derives deterministic log-probabilities from the sha256 of the rendered prompt, exactly
//!   as the recorded fake did; it refuses what vLLM refuses (`continue_final_message` with
//!   `add_generation_prompt`, `top_logprobs` > 20, more than 128 `logprob_token_ids`).
//! * `POST /tokenize` (one prompt, `add_special_tokens: false`) tokenizes with the toy
//!   tokenizer (or, with [`FakeVllm::set_split_digits`], a variant that splits every number
//!   into single digits, as Gemma 3 and Qwen 3 do), answering in vLLM's shape.
//! * `GET /v1/models` reports a `max_model_len` ([`FakeVllm::set_max_model_len`]).
//! * Recorded answers can be installed to replay a golden case verbatim.
//! * Fault modes turn it into a misbehaving backend; it counts requests and the most it
//!   ever had in flight at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::fake_server::{self, Recorder};

/// How the fake misbehaves.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Answer correctly.
    None,
    /// 429 with this `Retry-After` header value (if any).
    RateLimited(Option<String>),
    /// 503 with this `Retry-After` header value (if any).
    Unavailable(Option<String>),
    /// 500 with an error text that must never reach the caller.
    ServerError,
    /// Sleep this long (tokio time, so paused clocks advance) before answering correctly.
    Slow(Duration),
    /// A 400 whose error text repeats the request's messages (some backends echo the
    /// prompt in a context-length error): the caller's content, which must not be logged.
    EchoError,
    /// A 200 whose body is not JSON.
    MalformedJson,
    /// A 200 without `logprobs`.
    NoLogprobs,
    /// A 200 missing the last requested id.
    MissingId,
    /// A 200 with `-Infinity` as a logprob (what Python's json writes for -inf).
    NonFiniteLogprob,
    /// Ignores `logprob_token_ids`/`allowed_token_ids`: returns the unmasked top 20.
    IgnoreLogprobTokenIds,
    /// Answers correctly except every `every`-th chat request (counted from when the mode
    /// was set), which fails with the next fault of [`MixedFault::ROTATION`]; each injected
    /// fault is logged with the request's messages (see [`FakeVllm::take_mixed_hits`]).
    Mixed { every: usize },
    /// Answers correctly except the last `run` of every `period` chat requests (counted
    /// from when the mode was set), which fail with a 500: a share of failures that land
    /// together, as read timeouts do when a stall ends.
    Bursts { period: usize, run: usize },
    /// Answers correctly, but every `every`-th chat request (counted from when the mode was
    /// set) only after `delay`: a few slow reads in a load, as a backend that stalls.
    /// Set only by `benches/hung_backend.rs`, which builds this file too.
    #[allow(dead_code)]
    SlowEvery { every: usize, delay: Duration },
}

/// Shared state of one fake server.
#[derive(Debug)]
pub struct FakeState {
    /// The active fault.
    pub fault: Mutex<Fault>,
    /// The chat requests: their count, bodies (kept unless a long load run turns that
    /// off) and the most in flight at once.
    pub chat: Recorder,
    /// The `max_model_len` `/v1/models` reports (0: the route answers 404, as a host that
    /// does not report its window).
    pub max_model_len: AtomicUsize,
    /// Tokenizer checks begun: `/tokenize` requests for the bare table prefix [`PREFIX`]
    /// (a check, or a table build, tokenizes it first).
    pub tokenizer_checks: AtomicUsize,
    /// Every `/tokenize` request received.
    pub tokenize_requests: AtomicUsize,
    /// Recorded answers: (user content as JSON text, logprob_token_ids) → response.
    pub recorded: Mutex<HashMap<(String, Vec<u64>), Value>>,
    /// Delay applied to every correct answer (tokio time).
    pub delay: Mutex<Duration>,
    /// Delay before `/tokenize` answers a text no check or build sends: a backend
    /// slow to count a long prompt.
    pub count_delay: Mutex<Duration>,
    /// How `/tokenize` misbehaves on the first request of each check (the prefix's):
    /// RateLimited, Slow, MalformedJson and ServerError apply.
    pub tokenizer_fault: Mutex<Fault>,
    /// How `/tokenize` answers the texts only a table build sends (see [`is_build_only`]):
    /// ServerError and Slow apply, so a rebuild fails or times out while checks still
    /// conclude.
    pub build_fault: Mutex<Fault>,
    /// `/tokenize` requests for a text only a table build sends.
    pub build_requests: AtomicUsize,
    /// Added to every digit-token id the tokenizer returns: a non-zero value simulates a
    /// different tokenizer served under the same model name.
    pub token_id_offset: AtomicUsize,
    /// Chat requests seen since [`Fault::Mixed`], [`Fault::Bursts`] or [`Fault::SlowEvery`]
    /// was set.
    pub mixed_seen: AtomicUsize,
    /// The faults [`Fault::Mixed`] injected: (the request's `messages` as JSON text, fault).
    pub mixed_hits: Mutex<Vec<(String, MixedFault)>>,
    /// Whether the tokenizer splits every number into single digits (default false: the
    /// golden toy tokenizer's greedy pieces worth 0..190).
    pub split_digits: AtomicBool,
    /// Every chat request's headers that a router reads or that carry secrets
    /// ([`ROUTING_HEADERS`]), in arrival order, to check what the service sends.
    pub routing_headers: Mutex<Vec<Vec<(String, String)>>>,
    /// A known signal plus a planted position bias in place of the hash-derived
    /// log-probabilities ([`Planted`]), when set.
    pub planted: Mutex<Option<Planted>>,
}

/// The headers [`FakeState::routing_headers`] records (the routers' affinity headers, the
/// tests' custom one, the bearer, which must never be a routing key, and the W3C
/// `traceparent` a traced read carries).
pub const ROUTING_HEADERS: [&str; 5] = [
    "x-session-id",
    "x-smg-routing-key",
    "x-route",
    "authorization",
    "traceparent",
];

/// A running fake.
#[derive(Debug, Clone)]
pub struct FakeVllm {
    pub addr: SocketAddr,
    pub state: Arc<FakeState>,
}

impl FakeVllm {
    /// Starts a fake on 127.0.0.1:0 in the current runtime.
    pub async fn start() -> Self {
        let state = Arc::new(FakeState {
            fault: Mutex::new(Fault::None),
            chat: Recorder::default(),
            max_model_len: AtomicUsize::new(DEFAULT_MAX_MODEL_LEN),
            tokenizer_checks: AtomicUsize::new(0),
            tokenize_requests: AtomicUsize::new(0),
            recorded: Mutex::new(HashMap::new()),
            delay: Mutex::new(Duration::ZERO),
            count_delay: Mutex::new(Duration::ZERO),
            tokenizer_fault: Mutex::new(Fault::None),
            build_fault: Mutex::new(Fault::None),
            build_requests: AtomicUsize::new(0),
            token_id_offset: AtomicUsize::new(0),
            mixed_seen: AtomicUsize::new(0),
            mixed_hits: Mutex::new(Vec::new()),
            split_digits: AtomicBool::new(false),
            routing_headers: Mutex::new(Vec::new()),
            planted: Mutex::new(None),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/tokenize", post(tokenize))
            .route("/v1/models", axum::routing::get(models))
            .with_state(state.clone());
        let addr = fake_server::serve(app).await;
        FakeVllm { addr, state }
    }

    /// Answers with a known signal plus a planted position bias from now on (`None`: the
    /// hash-derived log-probabilities again).
    #[allow(dead_code)]
    pub fn set_planted(&self, planted: Option<Planted>) {
        *self.state.planted.lock().expect("lock") = planted;
    }

    /// The recorded headers of every chat request so far ([`ROUTING_HEADERS`]).
    pub fn routing_headers(&self) -> Vec<Vec<(String, String)>> {
        self.state.routing_headers.lock().expect("lock").clone()
    }

    /// The base URL to configure (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Sets the fault mode.
    pub fn set_fault(&self, fault: Fault) {
        if matches!(
            fault,
            Fault::Mixed { .. } | Fault::Bursts { .. } | Fault::SlowEvery { .. }
        ) {
            self.state.mixed_seen.store(0, Ordering::SeqCst);
        }
        *self.state.fault.lock().expect("lock") = fault;
    }

    /// Sets the fault mode of the tokenizer endpoint.
    pub fn set_tokenizer_fault(&self, fault: Fault) {
        *self.state.tokenizer_fault.lock().expect("lock") = fault;
    }

    /// Sets how `/tokenize` answers the texts only a table build sends.
    pub fn set_build_fault(&self, fault: Fault) {
        *self.state.build_fault.lock().expect("lock") = fault;
    }

    /// `/tokenize` requests received for a text only a table build sends.
    pub fn build_requests(&self) -> usize {
        self.state.build_requests.load(Ordering::SeqCst)
    }

    /// Shifts the tokenizer's digit-token ids (0 = the golden toy tokenizer).
    pub fn set_token_id_offset(&self, offset: usize) {
        self.state.token_id_offset.store(offset, Ordering::SeqCst);
    }

    /// Sets the context window `/v1/models` reports (0: none, the route answers 404).
    pub fn set_max_model_len(&self, tokens: usize) {
        self.state.max_model_len.store(tokens, Ordering::SeqCst);
    }

    /// Tokenizer checks begun so far (see [`FakeState::tokenizer_checks`]).
    pub fn tokenizer_checks(&self) -> usize {
        self.state.tokenizer_checks.load(Ordering::SeqCst)
    }

    /// `/tokenize` requests received so far.
    pub fn tokenize_requests(&self) -> usize {
        self.state.tokenize_requests.load(Ordering::SeqCst)
    }

    /// Makes the tokenizer split every number into single digits (`true`), or go back to
    /// the golden toy tokenizer (`false`, the default).
    pub fn set_split_digits(&self, split: bool) {
        self.state.split_digits.store(split, Ordering::SeqCst);
    }

    /// Sets a delay before every correct answer.
    pub fn set_delay(&self, delay: Duration) {
        *self.state.delay.lock().expect("lock") = delay;
    }

    /// Sets a delay before `/tokenize` counts any text but the check's prefix.
    pub fn set_count_delay(&self, delay: Duration) {
        *self.state.count_delay.lock().expect("lock") = delay;
    }

    /// Chat requests received so far.
    pub fn chat_requests(&self) -> usize {
        self.state.chat.requests()
    }

    /// The most chat requests ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.chat.max_in_flight()
    }

    /// Bodies received so far.
    pub fn chat_bodies(&self) -> Vec<Value> {
        self.state.chat.bodies()
    }

    /// Installs a recorded answer for a (content, ids) pair.
    pub fn record(&self, content: &Value, ids: Vec<u64>, response: Value) {
        self.state
            .recorded
            .lock()
            .expect("lock")
            .insert((content.to_string(), ids), response);
    }
}

/// vLLM's error body, with `status`.
fn error(status: StatusCode, message: &str) -> Response {
    with_retry_after(status, message, &None)
}

/// [`error`] with a `Retry-After` header of `value`, when there is one.
fn with_retry_after(status: StatusCode, message: &str, value: &Option<String>) -> Response {
    let body = json!({"object": "error", "message": message, "code": status.as_u16()});
    let retry_after = value.as_deref().map(|v| ("retry-after", v));
    fake_server::status(status.as_u16(), body, retry_after)
}

/// The toy chat template of the golden fake.
pub fn render_toy_prompt(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let continue_final = body["continue_final_message"].as_bool().unwrap_or(false);
    let add_generation = body["add_generation_prompt"].as_bool().unwrap_or(true);
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        let text = match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .map(|p| match p["type"].as_str() {
                    Some("text") => p["text"].as_str().unwrap_or("").to_string(),
                    Some("image_url") => {
                        format!("<image:{}>", p["image_url"]["url"].as_str().unwrap_or(""))
                    }
                    _ => String::new(),
                })
                .collect(),
            _ => String::new(),
        };
        out.push_str(&format!("<|{role}|>\n{text}"));
        if !(continue_final && i + 1 == messages.len()) {
            out.push_str("<|end|>\n");
        }
    }
    if add_generation {
        out.push_str("<|assistant|>\n");
    }
    out
}

fn u64_of(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"))
}

/// The golden fake's logprobs for `ids` given the rendered prompt and the masked set.
pub fn toy_logprobs(prompt: &str, support: &[u64], ids: &[u64]) -> Vec<f64> {
    let d = Sha256::digest(prompt.as_bytes());
    let s = |t: u64| {
        let mut h = Sha256::new();
        h.update(d);
        h.update(t.to_string().as_bytes());
        let u = u64_of(&h.finalize()) as f64 / 2f64.powi(64);
        -12.0 * u
    };
    let scores: Vec<f64> = support.iter().map(|t| s(*t)).collect();
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + scores.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    let m = 0.5 + 0.49 * (u64_of(&d) as f64 / 2f64.powi(64));
    ids.iter().map(|t| s(*t) - lse + m.ln()).collect()
}

fn ids_of(v: &Value) -> Option<Vec<u64>> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
}

async fn chat(
    State(state): State<Arc<FakeState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let _in_flight = state.chat.enter();
    let seen = ROUTING_HEADERS
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            Some((name.to_string(), value.to_string()))
        })
        .collect();
    {
        let mut recorded = state.routing_headers.lock().expect("lock");
        // Bounded, for the load runs that build this fake too.
        if recorded.len() < 100_000 {
            recorded.push(seen);
        }
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "body is not JSON");
    };
    state.chat.keep(&body);

    let fault = state.fault.lock().expect("lock").clone();
    let fault = match fault {
        Fault::Mixed { every } => mixed_fault(&state, every, &body),
        Fault::Bursts { period, run } => burst_fault(&state, period, run),
        Fault::SlowEvery { every, delay } => slow_every(&state, every, delay),
        other => other,
    };
    match &fault {
        Fault::RateLimited(ra) => {
            return with_retry_after(
                StatusCode::TOO_MANY_REQUESTS,
                "rate limited at http://secret-backend.internal key sk-backend",
                ra,
            )
        }
        Fault::Unavailable(ra) => {
            return with_retry_after(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded at http://secret-backend.internal",
                ra,
            )
        }
        Fault::ServerError => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "CUDA error at http://secret-backend.internal key sk-backend",
            )
        }
        Fault::EchoError => {
            // From the prompt's state on, as a context-length error might quote it.
            let messages = body["messages"].to_string();
            let from = messages.find("{\\\"state\\\"").unwrap_or(0);
            let echoed = format!("prompt too long near {}", &messages[from..]);
            return error(StatusCode::BAD_REQUEST, &echoed);
        }
        Fault::MalformedJson => return fake_server::not_json("{\"choices\": [".into()),
        Fault::Slow(d) => tokio::time::sleep(*d).await,
        _ => {}
    }
    let delay = *state.delay.lock().expect("lock");
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }

    if body["continue_final_message"] == json!(true)
        && body
            .get("add_generation_prompt")
            .is_none_or(|v| v == &json!(true))
    {
        return error(
            StatusCode::BAD_REQUEST,
            "continue_final_message and add_generation_prompt both set",
        );
    }
    if body["top_logprobs"].as_u64().unwrap_or(0) > 20 {
        return error(StatusCode::BAD_REQUEST, "top_logprobs > 20");
    }
    let read = ids_of(&body["logprob_token_ids"]).unwrap_or_default();
    if read.len() > 128 {
        return error(StatusCode::BAD_REQUEST, "more than 128 logprob_token_ids");
    }
    let content = &body["messages"][0]["content"];
    if let Some(recorded) = state
        .recorded
        .lock()
        .expect("lock")
        .get(&(content.to_string(), read.clone()))
    {
        return axum::Json(recorded.clone()).into_response();
    }

    let prompt = render_toy_prompt(&body);
    let support = ids_of(&body["allowed_token_ids"])
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            if read.is_empty() {
                (1000..=1190).collect()
            } else {
                read.clone()
            }
        });
    let (ids, logprobs) = if fault == Fault::IgnoreLogprobTokenIds {
        // An old server: the unmasked top 20 over the whole toy vocabulary.
        let vocab: Vec<u64> = (0..256).chain(1000..=1190).collect();
        let lps = toy_logprobs(&prompt, &vocab, &vocab);
        let mut pairs: Vec<(u64, f64)> = vocab.into_iter().zip(lps).collect();
        pairs.sort_by(|a, b| b.1.total_cmp(&a.1));
        pairs.truncate(20);
        pairs.into_iter().unzip()
    } else {
        let planted = state.planted.lock().expect("lock").clone();
        let text = content.as_str().unwrap_or_default();
        let lps = planted
            .and_then(|p| p.logprobs(text, &support, &read))
            .unwrap_or_else(|| toy_logprobs(&prompt, &support, &read));
        (read.clone(), lps)
    };
    let mut entries: Vec<Value> = ids
        .iter()
        .zip(&logprobs)
        .map(|(id, lp)| json!({"token": format!("token_id:{id}"), "logprob": lp}))
        .collect();
    if fault == Fault::MissingId {
        entries.pop();
    }
    let digest = Sha256::digest(prompt.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let mut response = json!({
        "id": format!("chatcmpl-{}", &hex[..24]),
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "0"},
            "logprobs": {"content": [{"token": entries.first().map(|e| e["token"].clone()).unwrap_or(Value::Null), "logprob": logprobs.first().copied().unwrap_or(0.0), "top_logprobs": entries}]},
            "finish_reason": "length",
        }],
        "usage": {"prompt_tokens": prompt.len() / 4, "total_tokens": prompt.len() / 4 + 1, "completion_tokens": 1, "prompt_tokens_details": null},
    });
    if fault == Fault::NoLogprobs {
        response["choices"][0]["logprobs"] = Value::Null;
    }
    if fault == Fault::NonFiniteLogprob {
        let text = response.to_string();
        let needle = format!(
            "\"logprob\":{}",
            serde_json::to_string(&logprobs[0]).expect("f64")
        );
        let broken = text.replacen(&needle, "\"logprob\":-Infinity", 2);
        return (
            StatusCode::OK,
            [("content-type", "application/json")],
            broken,
        )
            .into_response();
    }
    axum::Json(response).into_response()
}

/// The golden toy tokenizer.
pub fn toy_tokenize(text: &str) -> Vec<u64> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if text[i..].starts_with("answer") {
            out.push(500);
            i += 6;
        } else if bytes[i].is_ascii_digit() {
            // Greedy longest piece worth 0..190, no leading zero; "0" alone.
            if bytes[i] == b'0' {
                out.push(1000);
                i += 1;
                continue;
            }
            let mut best = 1;
            for len in 2..=3 {
                if i + len <= bytes.len() && bytes[i..i + len].iter().all(u8::is_ascii_digit) {
                    let v: u64 = text[i..i + len].parse().expect("digits");
                    if v <= 190 {
                        best = len;
                    }
                }
            }
            let v: u64 = text[i..i + best].parse().expect("digits");
            out.push(1000 + v);
            i += best;
        } else {
            out.push(u64::from(bytes[i]));
            i += 1;
        }
    }
    out
}

/// The toy tokenizer with every digit its own token (`1000 + d`), as a tokenizer that
/// splits numbers into digits would; everything else as [`toy_tokenize`].
pub fn toy_tokenize_split_digits(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        out.extend(toy_tokenize(&rest[..start]));
        let digits = &rest[start..];
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        out.extend(digits[..end].bytes().map(|b| 1000 + u64::from(b - b'0')));
        rest = &digits[end..];
    }
    out.extend(toy_tokenize(rest));
    out
}

/// The context window the fake reports by default: larger than any test's prompt.
pub const DEFAULT_MAX_MODEL_LEN: usize = 131_072;

/// vLLM's `GET /v1/models`: the one served model with its `max_model_len`.
async fn models(State(state): State<Arc<FakeState>>) -> Response {
    match state.max_model_len.load(Ordering::SeqCst) {
        0 => error(StatusCode::NOT_FOUND, "no such route"),
        len => axum::Json(json!({"object": "list", "data": [
            {"id": "glm-5.3-flash", "object": "model", "owned_by": "vllm", "max_model_len": len}
        ]}))
        .into_response(),
    }
}

/// The prefix every token table of the tests starts its check (and build) with.
pub const PREFIX: &str = "answer=";

/// vLLM's `POST /tokenize`: `{"model", "prompt", "add_special_tokens": false}` →
/// `{"count", "max_model_len", "tokens", "token_strs"}`.
async fn tokenize(
    State(state): State<Arc<FakeState>>,
    _headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    state.tokenize_requests.fetch_add(1, Ordering::SeqCst);
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "body is not JSON");
    };
    let Some(prompt) = body["prompt"].as_str() else {
        return error(StatusCode::BAD_REQUEST, "prompt must be a string");
    };
    let fault = if prompt == PREFIX {
        state.tokenizer_checks.fetch_add(1, Ordering::SeqCst);
        state.tokenizer_fault.lock().expect("lock").clone()
    } else if is_build_only(prompt) {
        state.build_requests.fetch_add(1, Ordering::SeqCst);
        state.build_fault.lock().expect("lock").clone()
    } else {
        let delay = *state.count_delay.lock().expect("lock");
        tokio::time::sleep(delay).await;
        Fault::None
    };
    match &fault {
        Fault::RateLimited(ra) => {
            return with_retry_after(StatusCode::TOO_MANY_REQUESTS, "rate limited", ra)
        }
        Fault::ServerError => return error(StatusCode::INTERNAL_SERVER_ERROR, "tokenizer failed"),
        Fault::MalformedJson => return fake_server::not_json("{\"tokens\": [".into()),
        Fault::Slow(d) => tokio::time::sleep(*d).await,
        _ => {}
    }
    tokenized(&state, &body, prompt)
}

/// Whether only a table build tokenizes `prompt`: the prefix and an integer of 1,000 or
/// more, which the build's search tries and no check sends (a check's labels stop at 254).
fn is_build_only(prompt: &str) -> bool {
    prompt
        .strip_prefix(PREFIX)
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n >= 1000)
}

/// The toy tokenizer's answer for `prompt`, in `/tokenize`'s shape.
fn tokenized(state: &FakeState, body: &Value, prompt: &str) -> Response {
    if body["add_special_tokens"] != json!(false) {
        return error(
            StatusCode::BAD_REQUEST,
            "this fake adds no special tokens: send add_special_tokens false",
        );
    }
    let offset = state.token_id_offset.load(Ordering::SeqCst) as u64;
    let tokenize = if state.split_digits.load(Ordering::SeqCst) {
        toy_tokenize_split_digits
    } else {
        toy_tokenize
    };
    let ids: Vec<u64> = tokenize(prompt)
        .into_iter()
        .map(|id| if id >= 1000 { id + offset } else { id })
        .collect();
    axum::Json(
        json!({"count": ids.len(), "max_model_len": 8192, "tokens": ids, "token_strs": null}),
    )
    .into_response()
}

// ---------------------------------------------------------------------------------------
// Mixed faults: a deterministic share of failing requests for load tests.
// ---------------------------------------------------------------------------------------

/// The `Retry-After` a [`MixedFault::RateLimited`] answer carries.
pub const MIXED_RETRY_AFTER_429: &str = "3";
/// The `Retry-After` a [`MixedFault::Unavailable`] answer carries.
pub const MIXED_RETRY_AFTER_503: &str = "2";

/// One fault of the [`Fault::Mixed`] rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MixedFault {
    /// 429 with `Retry-After: 3`.
    RateLimited,
    /// 503 with `Retry-After: 2`.
    Unavailable,
    /// 500.
    ServerError,
    /// A 200 whose body is not JSON.
    MalformedJson,
    /// A 200 missing the last requested id.
    MissingId,
}

impl MixedFault {
    /// The order in which the injected faults rotate.
    pub const ROTATION: [MixedFault; 5] = [
        MixedFault::RateLimited,
        MixedFault::Unavailable,
        MixedFault::ServerError,
        MixedFault::MalformedJson,
        MixedFault::MissingId,
    ];

    /// The single fault this behaves as.
    pub fn fault(self) -> Fault {
        match self {
            MixedFault::RateLimited => Fault::RateLimited(Some(MIXED_RETRY_AFTER_429.into())),
            MixedFault::Unavailable => Fault::Unavailable(Some(MIXED_RETRY_AFTER_503.into())),
            MixedFault::ServerError => Fault::ServerError,
            MixedFault::MalformedJson => Fault::MalformedJson,
            MixedFault::MissingId => Fault::MissingId,
        }
    }
}

impl FakeVllm {
    /// Keeps (true, the default) or stops keeping every chat body (a long load run turns it
    /// off so the record does not grow); either way those kept so far are forgotten.
    pub fn set_keep_bodies(&self, keep: bool) {
        self.state.chat.set_keep_bodies(keep);
    }

    /// The faults [`Fault::Mixed`] injected since the last call, in injection order.
    pub fn take_mixed_hits(&self) -> Vec<(String, MixedFault)> {
        std::mem::take(&mut *self.state.mixed_hits.lock().expect("lock"))
    }
}

/// Under [`Fault::Mixed`]: the fault for this request (every `every`-th one fails with the
/// next fault of the rotation, logged with its messages), else [`Fault::None`].
fn mixed_fault(state: &FakeState, every: usize, body: &Value) -> Fault {
    let n = state.mixed_seen.fetch_add(1, Ordering::SeqCst) + 1;
    if every == 0 || n % every != 0 {
        return Fault::None;
    }
    let kind = MixedFault::ROTATION[(n / every - 1) % MixedFault::ROTATION.len()];
    state
        .mixed_hits
        .lock()
        .expect("lock")
        .push((body["messages"].to_string(), kind));
    kind.fault()
}

/// Under [`Fault::Bursts`]: a 500 for the last `run` of every `period` requests, else
/// [`Fault::None`].
/// [`Fault::Slow`] for every `every`-th request of [`Fault::SlowEvery`], else none.
fn slow_every(state: &FakeState, every: usize, delay: Duration) -> Fault {
    let n = state.mixed_seen.fetch_add(1, Ordering::SeqCst) + 1;
    if every > 0 && n % every == 0 {
        Fault::Slow(delay)
    } else {
        Fault::None
    }
}

fn burst_fault(state: &FakeState, period: usize, run: usize) -> Fault {
    let n = state.mixed_seen.fetch_add(1, Ordering::SeqCst);
    if period > 0 && n % period >= period.saturating_sub(run) {
        Fault::ServerError
    } else {
        Fault::None
    }
}

/// A model whose label log-probabilities are a known signal plus a planted position bias:
/// the prompt's state names the true option (`{"truth": <label>, "seed": k}`). Option `i`'s
/// logit is `clarity` for the truth, plus a noise fixed per (seed, label) (the model's own
/// view of the question, the same in every order), plus `bias[p]` at position `p`, plus
/// `read_noise` times a noise fixed per prompt (so each order reads a little differently),
/// plus the state's `lure` (0 when absent) at the first position: a question written to
/// pull the model to whatever option is shown first, in every order.
#[derive(Debug, Clone, PartialEq)]
#[allow(dead_code)]
pub struct Planted {
    /// Added to the logit at each position.
    pub bias: Vec<f64>,
    /// The true option's margin.
    pub clarity: f64,
    /// Scale of each read's own noise.
    pub read_noise: f64,
}

#[allow(dead_code)]
impl Planted {
    /// The log-probabilities of `read` (ids of `support`, which lists the labels by
    /// position), or `None` when the prompt is not one of the planted questions.
    fn logprobs(&self, content: &str, support: &[u64], read: &[u64]) -> Option<Vec<f64>> {
        let last = content.lines().last()?;
        let object: Value = serde_json::from_str(last).ok()?;
        let truth = object["state"]["truth"].as_str()?;
        let seed = object["state"]["seed"].as_u64()?;
        let lure = object["state"]["lure"].as_f64().unwrap_or(0.0);
        let options = object["options"].as_array()?;
        if options.len() != support.len() || self.bias.len() != support.len() {
            return None;
        }
        let logits: Vec<f64> = options
            .iter()
            .enumerate()
            .map(|(p, o)| {
                let label = o["label"].as_str().unwrap_or_default();
                let signal = if label == truth { self.clarity } else { 0.0 };
                signal
                    + logistic(&format!("{seed}/{label}"))
                    + self.bias[p]
                    + if p == 0 { lure } else { 0.0 }
                    + self.read_noise * logistic(&format!("{content}/{p}"))
            })
            .collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
        read.iter()
            .map(|id| {
                let p = support.iter().position(|s| s == id)?;
                Some(logits[p] - lse)
            })
            .collect()
    }
}

/// A standard logistic draw fixed by `key` (sha256).
#[allow(dead_code)]
fn logistic(key: &str) -> f64 {
    let u = (u64_of(&Sha256::digest(key.as_bytes())) as f64 + 0.5) / 2f64.powi(64);
    (u / (1.0 - u)).ln()
}
