//! End to end against a real llama.cpp `llama-server` serving Gemma 3 270M (technique §7):
//! the llama.cpp dialect answers in the contract's shapes and refuses what Gemma cannot do,
//! its probabilities are exactly the backend's own raw log-probabilities renormalised (then
//! tempered by the default formula), the in-flight cap holds under concurrent callers, and
//! the official TypeSafe Python SDK works against the service unchanged.
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: base URL of a llama-server with Gemma 3 270M, ending in `/v1`
//!   (`scripts/start-llama.sh` starts one and prints it);
//! * `SYSTEMONE_PYTHON`: a Python with `typesafe-sdk[zstd]==0.7.5` installed.
//!
//! Without them the tests fail with a message that says so; they never skip.
//!
//! The tests share one single-slot backend, so they take turns ([`backend_turn`]): no test's
//! reads queue behind another's, and each test's timing (printed to stderr) is its own.
//! Services listen on 127.0.0.1:0. A small recording proxy ([`Proxy`]) sits between the
//! service and llama-server where a test must see upstream traffic (the in-flight cap, "no
//! upstream call for a 422"), and between the SDK and the service where the test must see
//! what the SDK put on the wire (zstd bodies).

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use systemone::backend::llamacpp::LlamaCppBackend;
use systemone::backend::ReadRequest;
use systemone::calibration::DEFAULT_FORMULA;
use systemone::config::ServeConfig;
use systemone::request::prompt::plan;
use systemone::request::validate;

/// The public (and llama-server `--alias`) name of the model.
const MODEL: &str = "gemma-3-270m";

/// One test at a time talks to the single-slot backend.
static BACKEND: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------
// Environment and setup
// ---------------------------------------------------------------------------------------

/// An environment variable the suite cannot run without: fails (never skips) when absent.
fn required_env(name: &str, what: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value.trim().to_string(),
        _ => panic!(
            "{name} is not set: it must be {what}. Run the tests with scripts/test.sh (it starts \
             llama-server with Gemma 3 270M, installs the TypeSafe SDK and exports \
             SYSTEMONE_LLAMA_URL and SYSTEMONE_PYTHON), or export it yourself"
        ),
    }
}

/// `SYSTEMONE_LLAMA_URL` without a trailing slash.
fn llama_url() -> String {
    required_env(
        "SYSTEMONE_LLAMA_URL",
        "the base URL of a llama-server serving Gemma 3 270M, ending in /v1 \
         (e.g. http://127.0.0.1:8081/v1; scripts/start-llama.sh starts one)",
    )
    .trim_end_matches('/')
    .to_string()
}

/// The server root (for `/health`, `/tokenize`): the base URL without `/v1`.
fn llama_root(url: &str) -> String {
    url.trim_end_matches("/v1").to_string()
}

/// Waits for this test's turn at the backend and checks that it is up.
async fn backend_turn() -> (String, tokio::sync::MutexGuard<'static, ()>) {
    let url = llama_url();
    let turn = BACKEND.lock().await;
    let health = format!("{}/health", llama_root(&url));
    match reqwest::get(&health).await {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => panic!(
            "llama-server at {health} is not healthy (status {}); SYSTEMONE_LLAMA_URL={url}",
            r.status()
        ),
        Err(e) => panic!(
            "llama-server at {health} is unreachable ({e}); is SYSTEMONE_LLAMA_URL={url} right and the server running?"
        ),
    }
    (url, turn)
}

/// A llama.cpp-dialect serve configuration for Gemma 3 270M at `backend_url`.
fn llama_config(backend_url: &str, extra: &[&str]) -> ServeConfig {
    let mut flags = vec!["--model", MODEL, "--token-table", "gemma-3"];
    flags.extend_from_slice(extra);
    common::llamacpp_config(backend_url, &flags)
}

// ---------------------------------------------------------------------------------------
// Replies and the contract's shapes
// ---------------------------------------------------------------------------------------

/// One response of the service, read whole.
struct Reply {
    status: u16,
    headers: HeaderMap,
    body: Value,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii header"))
    }
}

/// POSTs `body` to the service's `/v1/systemone`.
async fn ask(service: &common::Service, body: &Value) -> Reply {
    let response = service.ask(body).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("body reads");
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "status {status}: body is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    Reply {
        status,
        headers,
        body,
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("expected a number, got {v}"))
}

fn assert_close(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, want {want} (|diff| {:e} > {tol:e})",
        (got - want).abs()
    );
}

/// `req_` followed by lowercase hex, as the contract and the Python SDK expect.
fn assert_request_id(id: &str) {
    let hex = id
        .strip_prefix("req_")
        .unwrap_or_else(|| panic!("request id {id:?} does not start with req_"));
    assert!(
        !hex.is_empty()
            && hex
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, 'a'..='f')),
        "request id {id:?} is not req_<hex>"
    );
}

/// Both request-id headers are present, equal and `req_<hex>`.
fn assert_request_id_headers(reply: &Reply) -> String {
    let id = reply
        .header("x-typesafe-request-id")
        .expect("x-typesafe-request-id header");
    assert_request_id(id);
    assert_eq!(
        reply.header("x-request-id"),
        Some(id),
        "x-request-id differs"
    );
    id.to_string()
}

/// The default temperature the contract specifies for `n` options (n < 2 counts as 2).
fn default_temperature(n: usize) -> f64 {
    let t = (0.962 - 0.076 * (n.max(2) as f64).ln()).exp();
    assert_close(
        DEFAULT_FORMULA.temperature(n),
        t,
        1e-12,
        "DEFAULT_FORMULA is ln T = 0.962 - 0.076 ln n",
    );
    t
}

/// `1 - H(p)/ln n`, clamped to [0, 1].
fn confidence_of(p: &[f64]) -> f64 {
    let h: f64 = p.iter().filter(|x| **x > 0.0).map(|x| -x * x.ln()).sum();
    (1.0 - h / (p.len() as f64).ln()).clamp(0.0, 1.0)
}

/// Checks one answer against the contract's shape for its type and returns its
/// probabilities in option order (`[P(no), P(yes)]` for a noul). `options` are the choice
/// labels, the score's level texts, or `["no", "yes"]`.
fn check_answer(answer: &Value, kind: &str, options: &[&str]) -> Vec<f64> {
    let obj = answer
        .as_object()
        .unwrap_or_else(|| panic!("answer is not an object: {answer}"));
    assert_eq!(obj["type"], kind, "{answer}");
    let n = options.len();
    let p: Vec<f64> = match kind {
        "noul" => {
            let yes = num(&obj["noul"]);
            assert!((0.0..=1.0).contains(&yes), "noul {yes} outside [0, 1]");
            vec![1.0 - yes, yes]
        }
        "choice" => {
            let probs = obj["probabilities"]
                .as_object()
                .expect("choice probabilities is an object");
            let keys: Vec<&str> = probs.keys().map(String::as_str).collect();
            assert_eq!(
                keys, options,
                "probabilities are keyed by label in option order"
            );
            let p: Vec<f64> = probs.values().map(num).collect();
            let best = p
                .iter()
                .enumerate()
                .fold(0, |best, (i, x)| if *x > p[best] { i } else { best });
            assert_eq!(obj["choice"], options[best], "choice is the first argmax");
            p
        }
        "score" => {
            let keys: Vec<String> = (0..n).map(|i| i.to_string()).collect();
            let probs = obj["probabilities"]
                .as_object()
                .expect("score probabilities is an object");
            let legend = obj["legend"]
                .as_object()
                .expect("score legend is an object");
            assert_eq!(probs.keys().cloned().collect::<Vec<_>>(), keys);
            assert_eq!(legend.keys().cloned().collect::<Vec<_>>(), keys);
            for (i, level) in options.iter().enumerate() {
                assert_eq!(legend[&i.to_string()], *level, "legend maps index to level");
            }
            let p: Vec<f64> = probs.values().map(num).collect();
            let expected: f64 = p.iter().enumerate().map(|(i, x)| i as f64 * x).sum();
            let score = num(&obj["score"]);
            assert_close(score, expected, 1e-9, "score = sum of index x probability");
            assert!((0.0..=(n - 1) as f64).contains(&score), "score {score}");
            p
        }
        other => panic!("unexpected kind {other}"),
    };
    assert_eq!(p.len(), n);
    for x in &p {
        assert!((0.0..=1.0).contains(x), "probability {x} outside [0, 1]");
    }
    assert_close(p.iter().sum(), 1.0, 1e-9, "probabilities sum to 1");
    assert_close(
        num(&obj["confidence"]),
        confidence_of(&p),
        1e-9,
        "confidence = 1 - H(p)/ln n",
    );
    let t = num(&obj["temperature"]);
    assert!(t.is_finite() && t > 0.0, "temperature {t}");
    // The model was asked: either the pre-mask option mass, or an explicit "unknown".
    match (obj.get("option_mass"), obj.get("option_mass_unknown")) {
        (Some(mass), None) => {
            let mass = num(mass);
            assert!(mass > 0.0 && mass <= 1.0, "option_mass {mass}");
        }
        (None, Some(unknown)) => assert_eq!(unknown, &Value::Bool(true)),
        _ => panic!("exactly one of option_mass / option_mass_unknown expected: {answer}"),
    }
    let kind_keys: &[&str] = match kind {
        "noul" => &["noul"],
        "choice" => &["choice", "probabilities"],
        _ => &["score", "legend", "probabilities"],
    };
    for key in obj.keys() {
        assert!(
            key == "type"
                || kind_keys.contains(&key.as_str())
                || matches!(
                    key.as_str(),
                    "confidence" | "temperature" | "option_mass" | "option_mass_unknown"
                ),
            "unexpected key {key:?} in a {kind} answer"
        );
    }
    p
}

/// The usage block of a 200 for `reads` asked questions: one upstream request per read plus
/// one per post-sampling fallback (an answer with `option_mass_unknown`), one output token
/// per upstream request, prompt tokens reported by llama-server (so not estimated).
fn check_usage(body: &Value, reads: u64) -> &Map<String, Value> {
    let fallbacks = body["answers"]
        .as_object()
        .expect("answers object")
        .values()
        .filter(|a| a.get("option_mass_unknown").is_some())
        .count() as u64;
    let upstream_requests = reads + fallbacks;
    let usage = body["usage"].as_object().expect("usage object");
    assert_eq!(usage["upstream_requests"], upstream_requests, "{body}");
    assert_eq!(usage["output_tokens"], upstream_requests, "{body}");
    assert!(
        usage["input_tokens"].as_u64().expect("input_tokens") > 100 * upstream_requests,
        "every Gemma prompt has more than 100 tokens: {body}"
    );
    assert!(usage["cached_tokens"].as_u64().is_some(), "{body}");
    assert!(
        usage.get("estimated").is_none(),
        "llama-server reports usage: {body}"
    );
    usage
}

/// The answer object of question `id`.
fn answer<'a>(body: &'a Value, id: &str) -> &'a Value {
    body["answers"]
        .get(id)
        .unwrap_or_else(|| panic!("no answer {id:?} in {body}"))
}

fn answer_ids(body: &Value) -> Vec<String> {
    body["answers"]
        .as_object()
        .expect("answers object")
        .keys()
        .cloned()
        .collect()
}

const TEAM_LABELS: [&str; 4] = ["billing", "bug", "sales", "other"];
const URGENCY_LEVELS: [&str; 3] = ["Routine", "Soon", "Immediate"];
const NO_YES: [&str; 2] = ["no", "yes"];

/// A short state with a noul (`refund`), a 4-option choice (`team`) and a 3-level score
/// (`urgency`), in that order; `temperature` is added when given.
fn mixed_body(temperature: Option<Value>) -> Value {
    let mut body = json!({
        "state": "Invoice 1042 was charged twice to my card. Please fix it.",
        "questions": {
            "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
            "team": {
                "type": "choice",
                "instructions": "Which team handles it?",
                "criteria": {
                    "billing": "Payments and invoices",
                    "bug": "Software defects",
                    "sales": null,
                    "other": null
                }
            },
            "urgency": {
                "type": "score",
                "instructions": "How urgent is it?",
                "criteria": URGENCY_LEVELS
            }
        }
    });
    if let Some(t) = temperature {
        body["temperature"] = t;
    }
    body
}

/// The three answers of a [`mixed_body`] reply, checked, as `(id, options, probabilities)`.
fn check_mixed(body: &Value) -> Vec<(&'static str, Vec<f64>)> {
    assert_eq!(
        answer_ids(body),
        ["refund", "team", "urgency"],
        "answers in question order"
    );
    vec![
        (
            "refund",
            check_answer(answer(body, "refund"), "noul", &NO_YES),
        ),
        (
            "team",
            check_answer(answer(body, "team"), "choice", &TEAM_LABELS),
        ),
        (
            "urgency",
            check_answer(answer(body, "urgency"), "score", &URGENCY_LEVELS),
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// A recording HTTP proxy
// ---------------------------------------------------------------------------------------

/// One request the proxy forwarded.
#[derive(Debug, Clone)]
struct Seen {
    /// The caller's `x-scenario` header (the SDK script tags its calls).
    scenario: Option<String>,
    path: String,
    content_encoding: Option<String>,
    /// The first bytes of the body as received (compressed bodies stay compressed).
    head: Vec<u8>,
    len: usize,
    status: u16,
}

#[derive(Debug, Default)]
struct ProxyLog {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
}

/// A pass-through HTTP proxy on 127.0.0.1:0 that forwards every request to `target` as is
/// (body bytes and headers untouched) and records what it saw and the most requests it had
/// in flight at once. A request counts from when its body has arrived until the upstream
/// answer has been read, which lies inside the caller's own wait for that answer.
struct Proxy {
    addr: SocketAddr,
    log: Arc<ProxyLog>,
}

#[derive(Clone)]
struct ProxyState {
    target: String,
    client: reqwest::Client,
    log: Arc<ProxyLog>,
}

/// Decrements the in-flight count however the forwarding ends (also when the caller hangs up).
struct InFlightGuard(Arc<ProxyLog>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Proxy {
    /// Starts a proxy to `target` (scheme, host and port, no path).
    async fn start(target: String) -> Proxy {
        let log = Arc::new(ProxyLog::default());
        let state = ProxyState {
            target,
            client: reqwest::Client::new(),
            log: log.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { addr, log }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.log.seen.lock().expect("proxy log").clone()
    }

    fn max_in_flight(&self) -> usize {
        self.log.max_in_flight.load(Ordering::SeqCst)
    }
}

const HOP_BY_HOP: [header::HeaderName; 4] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::CONTENT_LENGTH,
    header::HOST,
];

async fn forward(State(state): State<ProxyState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("proxy: {e}")).into_response(),
    };
    let now = state.log.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let guard = InFlightGuard(state.log.clone());
    state.log.max_in_flight.fetch_max(now, Ordering::SeqCst);

    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let text_header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut upstream = state
        .client
        .request(parts.method.clone(), format!("{}{path}", state.target));
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(name) {
            upstream = upstream.header(name, value);
        }
    }
    let answer = match upstream.body(bytes.clone()).send().await {
        Ok(r) => {
            let status = r.status();
            let headers = r.headers().clone();
            r.bytes().await.map(|b| (status, headers, b))
        }
        Err(e) => Err(e),
    };
    drop(guard);
    let (status, headers, body) = match answer {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("proxy: {e}")).into_response(),
    };
    state.log.seen.lock().expect("proxy log").push(Seen {
        scenario: text_header("x-scenario"),
        path: parts.uri.path().to_string(),
        content_encoding: text_header("content-encoding"),
        head: bytes.iter().take(4).copied().collect(),
        len: bytes.len(),
        status: status.as_u16(),
    });
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if !HOP_BY_HOP.contains(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}

// ---------------------------------------------------------------------------------------
// 1. Shapes, capacity and refusals
// ---------------------------------------------------------------------------------------

/// Proves that a noul, a choice and a score asked together of the real Gemma backend come
/// back 200 in the contract's shapes: answers in question order; `noul` in [0, 1];
/// `probabilities` keyed by label (choice) or `"0"`… (score) in option order, summing to 1;
/// `choice` the first argmax; `score` = Σ i·p_i with its `legend`; `confidence` =
/// 1 − H/ln n; the default temperature per option count; an `option_mass`; `model` as
/// llama-server reports it; usage counted from the backend (one read per question); and
/// both request-id headers as `req_<hex>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noul_choice_and_score_come_back_in_the_contracts_shapes() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = common::start(llama_config(&url, &[])).await;

    let reply = ask(&service, &mixed_body(None)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_request_id_headers(&reply);
    assert_eq!(reply.body["model"], MODEL, "{}", reply.body);
    let answers = check_mixed(&reply.body);
    for (id, p) in &answers {
        let t = num(&answer(&reply.body, id)["temperature"]);
        assert_close(t, default_temperature(p.len()), 1e-12, id);
    }
    check_usage(&reply.body, 3);
    eprintln!(
        "shapes: one 3-question request answered in {:.2?} (service start included)",
        started.elapsed()
    );
}

/// Proves Gemma 3's label capacity end to end: a 10-option choice (labels 0–9, all single
/// tokens) is answered 200 with ten probabilities; an 11-option choice is a 422
/// `system_one_too_many_options` whose message names the capacity 10 and whose `detail`
/// points at the criteria; `images` sent to this text-only model is a 422
/// `system_one_images_unsupported`. Neither 422 sends anything upstream (a proxy in front of
/// llama-server sees no request at all until the 10-option question).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_options_fit_while_eleven_options_and_images_are_refused_before_any_upstream_call() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let proxy = Proxy::start(llama_root(&url)).await;
    let service = common::start(llama_config(&format!("{}/v1", proxy.url()), &[])).await;
    const LABELS: [&str; 11] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliett", "kilo",
    ];
    let choice_of = |n: usize| {
        let criteria: Map<String, Value> = LABELS[..n]
            .iter()
            .map(|l| (l.to_string(), Value::Null))
            .collect();
        json!({
            "state": "The caller spelled the word with the NATO alphabet.",
            "questions": {"word": {
                "type": "choice",
                "instructions": "Which code word comes first in the alphabet?",
                "criteria": criteria
            }}
        })
    };

    let eleven = ask(&service, &choice_of(11)).await;
    assert_eq!(eleven.status, 422, "{}", eleven.body);
    assert_request_id_headers(&eleven);
    let error = &eleven.body["error"];
    assert_eq!(
        error["code"], "system_one_too_many_options",
        "{}",
        eleven.body
    );
    assert_eq!(
        eleven.header("x-systemone-error-code"),
        Some("system_one_too_many_options")
    );
    assert_eq!(error["type"], "invalid");
    let message = error["message"].as_str().expect("message");
    let numbers: Vec<&str> = message
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(
        numbers.contains(&"10") && numbers.contains(&"11"),
        "the message names the capacity 10 and the 11 options sent: {message:?}"
    );
    assert!(message.contains("questions.word.criteria"), "{message:?}");
    assert_eq!(
        eleven.body["detail"][0]["loc"],
        json!(["body", "questions", "word", "criteria"])
    );

    let mut with_image = choice_of(2);
    with_image["images"] = json!([
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    ]);
    let images = ask(&service, &with_image).await;
    assert_eq!(images.status, 422, "{}", images.body);
    assert_eq!(
        images.body["error"]["code"], "system_one_images_unsupported",
        "{}",
        images.body
    );
    assert_eq!(
        images.header("x-systemone-error-code"),
        Some("system_one_images_unsupported")
    );
    assert_eq!(images.body["detail"][0]["loc"], json!(["body", "images"]));
    assert!(
        proxy.seen().is_empty(),
        "a 422 sends nothing upstream: {:?}",
        proxy.seen()
    );

    let ten = ask(&service, &choice_of(10)).await;
    assert_eq!(ten.status, 200, "{}", ten.body);
    let p = check_answer(answer(&ten.body, "word"), "choice", &LABELS[..10]);
    assert_eq!(p.len(), 10);
    assert_close(
        num(&answer(&ten.body, "word")["temperature"]),
        default_temperature(10),
        1e-12,
        "T(10)",
    );
    check_usage(&ten.body, 1);
    let chat = proxy
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/chat/completions"))
        .count();
    assert!(
        chat >= 1,
        "the 10-option question was read: {:?}",
        proxy.seen()
    );
    eprintln!(
        "capacity: 11 options and images refused, 10 options answered in {:.2?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// 2. Exactness
// ---------------------------------------------------------------------------------------

/// The raw (pre-mask) log-probabilities of `ids` from llama-server's `top_logprobs`.
fn raw_logprobs(response: &Value, ids: &[u32]) -> Vec<f64> {
    let top = response["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        .as_array()
        .unwrap_or_else(|| panic!("no top_logprobs in {response}"));
    ids.iter()
        .map(|id| {
            top.iter()
                .find(|e| e["id"].as_u64() == Some(u64::from(*id)))
                .map(|e| num(&e["logprob"]))
                .unwrap_or_else(|| {
                    panic!(
                        "option id {id} is not among the {} raw top log-probabilities; this \
                         prompt cannot be checked exactly (the service would fall back to \
                         post-sampling probabilities)",
                        top.len()
                    )
                })
        })
        .collect()
}

/// Proves the llama.cpp decoding is exact. With `--cache-prompt false`, each question's
/// prompt is sent directly to llama-server (the same body the service builds, from
/// `validate` → `prompt::plan` → `LlamaCppBackend::body`), and the test computes the softmax
/// over the options' raw log-probabilities itself. The service's `temperature: 1`
/// probabilities equal it to 1e-6 and its `option_mass` equals Σ exp(logprob) to 1e-6; with
/// the default temperature its probabilities equal p_i^(1/T)/Σ p_j^(1/T) with
/// T = exp(0.962 − 0.076·ln n), which is also the answer's `temperature`; P(no) + P(yes) = 1
/// and every distribution sums to 1 within 1e-9; and the same request again gives the same
/// answers to 1e-6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probabilities_are_the_renormalised_raw_logprobs_tempered_by_the_default_formula() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = common::start(llama_config(&url, &["--cache-prompt", "false"])).await;

    let raw = ask(&service, &mixed_body(Some(json!(1)))).await;
    assert_eq!(raw.status, 200, "{}", raw.body);
    let calibrated = ask(&service, &mixed_body(None)).await;
    assert_eq!(calibrated.status, 200, "{}", calibrated.body);
    let again = ask(&service, &mixed_body(None)).await;
    assert_eq!(again.status, 200, "{}", again.body);
    for reply in [&raw, &calibrated, &again] {
        let usage = check_usage(&reply.body, 3);
        assert_eq!(
            usage["cached_tokens"], 0,
            "--cache-prompt false reaches llama-server: nothing is served from its cache"
        );
    }
    let raw_p = check_mixed(&raw.body);
    let cal_p = check_mixed(&calibrated.body);
    let again_p = check_mixed(&again.body);
    let service_elapsed = started.elapsed();

    // The same prompts, straight to llama-server.
    let request = validate(
        mixed_body(None),
        &service.state.models,
        &service.state.limits,
    )
    .expect("the body is valid");
    let asks = plan(&request);
    let model = request.model();
    let direct = LlamaCppBackend::new(
        reqwest::Client::new(),
        &url,
        model.upstream_model.clone(),
        None,
        false,
        None,
    );
    let client = reqwest::Client::new();
    for (qi, q) in request.questions().iter().enumerate() {
        let n = q.options.len();
        let ids: Vec<u32> = model.table.labels[..n].iter().map(|l| l.id).collect();
        let read = ReadRequest {
            content: &asks[qi][0].content,
            prefix: &model.table.prefix,
            allowed_ids: &ids,
            read_ids: &ids,
        };
        let body = serde_json::to_value(direct.body(&read, false)).expect("the body serialises");
        assert_eq!(body["cache_prompt"], false, "{body}");
        assert_eq!(body["top_logprobs"], 1000, "{body}");
        let response: Value = client
            .post(format!("{url}/chat/completions"))
            .json(&body)
            .send()
            .await
            .expect("llama-server answers")
            .error_for_status()
            .expect("llama-server accepts the body")
            .json()
            .await
            .expect("llama-server answers JSON");
        let lp = raw_logprobs(&response, &ids);
        let weights: Vec<f64> = lp.iter().map(|x| x.exp()).collect();
        let mass: f64 = weights.iter().sum();
        let softmax: Vec<f64> = weights.iter().map(|w| w / mass).collect();

        let (id, p1) = &raw_p[qi];
        assert_eq!(*id, q.id);
        let what = |s: &str| format!("{id} {s}");
        let raw_answer = answer(&raw.body, id);
        assert_close(num(&raw_answer["temperature"]), 1.0, 0.0, &what("T = 1"));
        for (i, (got, want)) in p1.iter().zip(&softmax).enumerate() {
            assert_close(*got, *want, 1e-6, &what(&format!("p[{i}] at T = 1")));
        }
        for reply in [&raw, &calibrated, &again] {
            assert_close(
                num(&answer(&reply.body, id)["option_mass"]),
                mass.min(1.0),
                1e-6,
                &what("option_mass = sum of exp(logprob)"),
            );
        }

        let t = default_temperature(n);
        let cal_answer = answer(&calibrated.body, id);
        assert_close(
            num(&cal_answer["temperature"]),
            t,
            1e-12,
            &what("default T"),
        );
        let tempered: Vec<f64> = softmax.iter().map(|p| p.powf(1.0 / t)).collect();
        let z: f64 = tempered.iter().sum();
        for (i, (got, want)) in cal_p[qi]
            .1
            .iter()
            .zip(tempered.iter().map(|x| x / z))
            .enumerate()
        {
            assert_close(*got, want, 1e-6, &what(&format!("p[{i}] at the default T")));
        }

        for (i, (a, b)) in cal_p[qi].1.iter().zip(&again_p[qi].1).enumerate() {
            assert_close(*b, *a, 1e-6, &what(&format!("p[{i}] asked again")));
        }
        for field in ["confidence", "option_mass", "temperature"] {
            assert_close(
                num(&answer(&again.body, id)[field]),
                num(&cal_answer[field]),
                1e-6,
                &what(&format!("{field} asked again")),
            );
        }
        eprintln!(
            "exactness: {id} n={n} mass={mass:.4} raw={softmax:.4?} tempered(T={t:.4})={:.4?}",
            cal_p[qi].1
        );
    }
    eprintln!(
        "exactness: 3 service requests in {service_elapsed:.2?}, total with 3 direct reads {:.2?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// 3. Concurrency under the in-flight cap
// ---------------------------------------------------------------------------------------

/// Proves that concurrent callers are all answered and the process-wide cap holds against a
/// real backend: 6 requests × 2 questions at `--max-in-flight 2` all get 200 with both
/// answers, while a proxy between the service and llama-server never sees more than 2
/// requests at once (and does see 2, so the cap was exercised). Every chat completion the
/// proxy saw is accounted for (one per read, plus one per post-sampling fallback), and the
/// `systemone_upstream_in_flight` gauge is back to 0 afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_all_answered_without_exceeding_the_in_flight_cap() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let proxy = Proxy::start(llama_root(&url)).await;
    let service = common::start(llama_config(
        &format!("{}/v1", proxy.url()),
        &["--max-in-flight", "2"],
    ))
    .await;
    let bodies: Vec<Value> = (0..6)
        .map(|i| {
            json!({
                "state": format!("Ticket {i}: invoice 10{i} was charged twice."),
                "questions": {
                    "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
                    "team": {"type": "choice", "criteria": {"billing": null, "bug": null, "sales": null}}
                }
            })
        })
        .collect();
    let replies = futures::future::join_all(bodies.iter().map(|b| ask(&service, b))).await;
    let elapsed = started.elapsed();

    let mut fallbacks = 0;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(answer_ids(&reply.body), ["refund", "team"]);
        check_answer(answer(&reply.body, "refund"), "noul", &NO_YES);
        check_answer(
            answer(&reply.body, "team"),
            "choice",
            &["billing", "bug", "sales"],
        );
        check_usage(&reply.body, 2);
        fallbacks += ["refund", "team"]
            .iter()
            .filter(|id| answer(&reply.body, id).get("option_mass_unknown").is_some())
            .count();
    }
    let max = proxy.max_in_flight();
    assert!(
        max <= 2,
        "{max} upstream requests were in flight at once; the cap is 2"
    );
    assert_eq!(
        max, 2,
        "12 reads under a cap of 2 should have run 2 at a time"
    );
    let chat = proxy
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/chat/completions"))
        .count();
    assert_eq!(
        chat,
        12 + fallbacks,
        "one chat completion per read plus one per fallback"
    );
    let metrics = common::metrics(&service).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.trim() == "systemone_upstream_in_flight 0"),
        "no upstream request is left in flight:\n{metrics}"
    );
    eprintln!(
        "concurrency: 6 requests x 2 questions at cap 2 in {elapsed:.2?}, max in flight {max}, {chat} chat completions"
    );
}

// ---------------------------------------------------------------------------------------
// 4. The official Python SDK
// ---------------------------------------------------------------------------------------

/// The one JSON line the SDK script printed for `scenario`.
fn scenario<'a>(lines: &'a [Value], name: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["scenario"] == name)
        .unwrap_or_else(|| panic!("the SDK script printed no {name:?} line: {lines:?}"))
}

/// The one request the proxy saw for an SDK scenario.
fn seen_for(seen: &[Seen], name: &str) -> Seen {
    let hits: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.scenario.as_deref() == Some(name))
        .collect();
    assert_eq!(hits.len(), 1, "one wire request for {name}: {seen:?}");
    hits[0].clone()
}

/// Proves the official TypeSafe Python SDK (`typesafe-sdk` 0.7.5, pointed at the service with
/// `TYPESAFE_BASE_URL` and any `TYPESAFE_API_KEY`) works unchanged: a noul/choice/score round
/// trip parses into the SDK's answer types with the values the service sent (and in the
/// contract's shapes); a body over 1 KiB goes over the wire zstd-compressed (a recording
/// proxy between SDK and service sees `Content-Encoding: zstd` and the zstd magic, and the
/// service answers it) while the small body goes uncompressed; an 11-option choice surfaces
/// as the SDK's `TypeSafeUnprocessableEntityError` whose message names the field path; and
/// `response.request_id` (and the error's) is `req_<hex>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_round_trips_compresses_and_surfaces_422s() {
    let python = required_env(
        "SYSTEMONE_PYTHON",
        "a Python interpreter with typesafe-sdk[zstd]==0.7.5 installed (scripts/test.sh uses .venv/bin/python)",
    );
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = common::start(llama_config(&url, &[])).await;
    let front = Proxy::start(format!("http://{}", service.addr)).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/system_one.py");
    let base_url = front.url();
    let run = {
        let python = python.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(&python)
                .arg(script)
                .env("TYPESAFE_BASE_URL", base_url)
                .env("TYPESAFE_API_KEY", "sk-any-value-works")
                .env_remove("TYPESAFE_DEFAULT_MODEL")
                .env_remove("TYPESAFE_LOG_LEVEL")
                .output()
        })
    };
    let output = run
        .await
        .expect("the SDK run joins")
        .unwrap_or_else(|e| panic!("cannot run SYSTEMONE_PYTHON={python}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK script failed ({}); is typesafe-sdk[zstd]==0.7.5 installed in {python}?\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let seen = front.seen();

    // Round trip: the SDK's parsed answers are the service's, in the contract's shapes.
    let trip = scenario(&lines, "roundtrip");
    let raw = &trip["raw"];
    let request_id = trip["request_id"].as_str().expect("response.request_id");
    assert_request_id(request_id);
    assert_eq!(trip["x_request_id"], request_id);
    assert_eq!(trip["model"], MODEL);
    assert_eq!(answer_ids(raw), ["refund", "team", "urgency"]);
    check_answer(answer(raw, "refund"), "noul", &NO_YES);
    let team = check_answer(answer(raw, "team"), "choice", &["billing", "bug", "sales"]);
    let urgency = check_answer(answer(raw, "urgency"), "score", &["Routine", "Soon", "Now"]);
    check_usage(raw, 3);
    assert_eq!(num(&trip["noul"]), num(&answer(raw, "refund")["noul"]));
    assert_eq!(trip["choice"], answer(raw, "team")["choice"]);
    assert_eq!(
        trip["choice_probabilities"]
            .as_object()
            .expect("choice probabilities")
            .values()
            .map(num)
            .collect::<Vec<_>>(),
        team
    );
    assert_eq!(num(&trip["score"]), num(&answer(raw, "urgency")["score"]));
    assert_eq!(
        trip["score_probabilities"]
            .as_object()
            .expect("score probabilities")
            .values()
            .map(num)
            .collect::<Vec<_>>(),
        urgency
    );
    assert_eq!(trip["score_legend"], answer(raw, "urgency")["legend"]);
    assert_eq!(trip["usage"]["output_tokens"], 3);
    let plain = seen_for(&seen, "roundtrip");
    assert_eq!((plain.path.as_str(), plain.status), ("/v1/systemone", 200));
    assert_eq!(
        plain.content_encoding, None,
        "a body under 1 KiB goes uncompressed"
    );
    assert!(
        plain.len < 1024 && plain.head.first() == Some(&b'{'),
        "{plain:?}"
    );

    // A body over 1 KiB: compressed on the wire, answered by the service.
    let big = scenario(&lines, "compressed");
    assert_eq!(big["zstd_available"], true, "the SDK has zstd: {big}");
    assert_request_id(big["request_id"].as_str().expect("request_id"));
    check_answer(answer(&big["raw"], "refund"), "noul", &NO_YES);
    check_usage(&big["raw"], 1);
    let zstd = seen_for(&seen, "compressed");
    assert_eq!(zstd.status, 200, "{zstd:?}");
    assert_eq!(zstd.content_encoding.as_deref(), Some("zstd"), "{zstd:?}");
    assert_eq!(
        zstd.head,
        [0x28, 0xB5, 0x2F, 0xFD],
        "the body is a zstd frame"
    );
    let state_bytes = big["state_bytes"].as_u64().expect("state_bytes") as usize;
    assert!(
        state_bytes >= 1024 && zstd.len < state_bytes,
        "{} compressed bytes for a {state_bytes}-byte state",
        zstd.len
    );

    // A 422 surfaces as the SDK's UnprocessableEntity error naming the field.
    let invalid = scenario(&lines, "invalid");
    assert_eq!(
        invalid["raised"], "TypeSafeUnprocessableEntityError",
        "{invalid}"
    );
    assert_eq!(invalid["status"], 422);
    let message = invalid["message"].as_str().expect("message");
    assert!(
        message.contains("questions.team.criteria"),
        "the SDK's message names the field path: {message:?}"
    );
    assert_eq!(
        invalid["body"]["error"]["code"],
        "system_one_too_many_options"
    );
    assert_request_id(invalid["request_id"].as_str().expect("error request_id"));
    assert_eq!(seen_for(&seen, "invalid").status, 422);
    eprintln!(
        "sdk: 3 scenarios through the Python SDK in {:.2?}",
        started.elapsed()
    );
}
