//! What the end-to-end tests against a real llama.cpp `llama-server` serving Gemma 3 270M
//! share (`tests/live/llamacpp_*.rs` and the other live suites on it): the environment they need (they
//! fail, never skip, without it), a turn at the single-slot backend, the service's
//! configuration for it, and the checks of the contract's answer and usage shapes.
//!
//! The tests of the live binary take turns at the backend ([`backend_turn`]), so no test's
//! reads queue behind another's and each test's timing (printed to stderr) is its own.

use axum::http::HeaderMap;
use serde_json::{json, Map, Value};

use systemone::calibration::{Calibration, DEFAULT_FORMULA};
use systemone::config::ServeConfig;

use crate::support::Service;

/// The public (and llama-server `--alias`) name of the model.
pub const MODEL: &str = "gemma-3-270m";

/// One test at a time talks to the single-slot backend.
static BACKEND: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------
// Environment and setup
// ---------------------------------------------------------------------------------------

/// `SYSTEMONE_LLAMA_URL` (a llama-server serving Gemma 3 270M, its base URL ending in
/// `/v1`) without a trailing slash.
pub fn llama_url() -> String {
    crate::support::require("SYSTEMONE_LLAMA_URL", "scripts/start-llama.sh")
        .trim_end_matches('/')
        .to_string()
}

/// The server root (for `/health`, `/tokenize`): the base URL without `/v1`.
pub fn llama_root(url: &str) -> String {
    url.trim_end_matches("/v1").to_string()
}

/// Waits for this test's turn at the backend and checks that it is up.
pub async fn backend_turn() -> (String, tokio::sync::MutexGuard<'static, ()>) {
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

/// A llama.cpp-dialect serve configuration for Gemma 3 270M at `backend_url`. Reads may
/// take 300 s and a request 900 s unless `extra` says otherwise: on 2 cores shared with
/// other builds and a vLLM, a long prompt can pass the default 30 s (seen in CI), and these
/// tests check numbers, not latency.
pub fn llama_config(backend_url: &str, extra: &[&str]) -> ServeConfig {
    let mut flags = vec!["--model", MODEL, "--token-table", "gemma-3"];
    if !extra.contains(&"--read-timeout-secs") {
        flags.extend(["--read-timeout-secs", "300"]);
    }
    if !extra.contains(&"--request-timeout-secs") {
        flags.extend(["--request-timeout-secs", "900"]);
    }
    flags.extend_from_slice(extra);
    crate::support::llamacpp_config(backend_url, &flags)
}

// ---------------------------------------------------------------------------------------
// Replies and the contract's shapes
// ---------------------------------------------------------------------------------------

/// One response of the service, read whole.
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii header"))
    }
}

/// POSTs `body` to the service's `/v1/systemone`.
pub async fn ask(service: &Service, body: &Value) -> Reply {
    let response = service.post_raw(body).await;
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

pub fn num(v: &Value) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("expected a number, got {v}"))
}

pub fn assert_close(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, want {want} (|diff| {:e} > {tol:e})",
        (got - want).abs()
    );
}

/// `req_` followed by lowercase hex, as the contract and the Python SDK expect.
pub fn assert_request_id(id: &str) {
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
pub fn assert_request_id_headers(reply: &Reply) -> String {
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

/// The temperature the local default answers `n` options with (n < 2 counts as 2): the
/// formula shipped for Gemma 3 270M (`calibration/gemma-3-270m.json`, fitted on development
/// data), which a model of that name takes when no `--calibration` is configured; it is
/// not GLM-5.3-Flash's default.
pub fn default_temperature(n: usize) -> f64 {
    let shipped = Calibration::load(MODEL).expect("the shipped gemma-3-270m formula");
    assert_ne!(shipped, DEFAULT_FORMULA, "Gemma 3 270M has its own formula");
    shipped.temperature(n)
}

/// `1 - H(p)/ln n`, clamped to [0, 1].
fn confidence_of(p: &[f64]) -> f64 {
    let h: f64 = p.iter().filter(|x| **x > 0.0).map(|x| -x * x.ln()).sum();
    (1.0 - h / (p.len() as f64).ln()).clamp(0.0, 1.0)
}

/// Checks one answer against the contract's shape for its type and returns its
/// probabilities in option order (`[P(no), P(yes)]` for a noul). `options` are the choice
/// labels, the score's level texts, or `["no", "yes"]`.
pub fn check_answer(answer: &Value, kind: &str, options: &[&str]) -> Vec<f64> {
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
pub fn check_usage(body: &Value, reads: u64) -> &Map<String, Value> {
    let answers = body["answers"].as_object().expect("answers object");
    assert!(
        answers
            .values()
            .all(|a| a.get("option_mass_unknown").is_none()),
        "the llama.cpp dialect always knows the option mass: {body}"
    );
    let usage = body["usage"].as_object().expect("usage object");
    // Each read is one request, plus one where an option was outside the raw top-K (the
    // exact recovery) and one more where none was in it (the whole-vocabulary read).
    let upstream_requests = usage["upstream_requests"].as_u64().expect("a count");
    assert!(
        (reads..=3 * reads).contains(&upstream_requests),
        "{reads} reads: {body}"
    );
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
pub fn answer<'a>(body: &'a Value, id: &str) -> &'a Value {
    body["answers"]
        .get(id)
        .unwrap_or_else(|| panic!("no answer {id:?} in {body}"))
}

pub fn answer_ids(body: &Value) -> Vec<String> {
    body["answers"]
        .as_object()
        .expect("answers object")
        .keys()
        .cloned()
        .collect()
}

const TEAM_LABELS: [&str; 4] = ["billing", "bug", "sales", "other"];
const URGENCY_LEVELS: [&str; 3] = ["Routine", "Soon", "Immediate"];
pub const NO_YES: [&str; 2] = ["no", "yes"];

/// A short state with a noul (`refund`), a 4-option choice (`team`) and a 3-level score
/// (`urgency`), in that order; `temperature` is added when given.
pub fn mixed_body(temperature: Option<Value>) -> Value {
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
pub fn check_mixed(body: &Value) -> Vec<(&'static str, Vec<f64>)> {
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

/// The raw (pre-mask) log-probabilities of `ids` from llama-server's `top_logprobs`.
pub fn raw_logprobs(response: &Value, ids: &[u32]) -> Vec<f64> {
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

/// The SpamAssassin development rows (`SYSTEMONE_SPAM_DEV`, from `scripts/spam-data.py`):
/// `{"state", "questions": {"spam": noul}, "gold": {"spam": bool}}`, both labels present.
pub fn spam_rows() -> Vec<Value> {
    let path = crate::support::require("SYSTEMONE_SPAM_DEV", "scripts/spam-data.py");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    let spam = rows.iter().filter(|r| r["gold"]["spam"] == true).count();
    assert!(
        rows.len() >= 8 && spam > 0 && spam < rows.len(),
        "{path}: ham and spam rows"
    );
    rows
}
