//! Everything under `examples/` exercised, so it cannot rot.
//!
//! * `examples/models.toml` and `examples/keys.toml` load through the real configuration
//!   path (`--config`, `--keys-file`), the registry's backend URLs pointed (in a temp copy;
//!   every other byte as shipped) at fakes that tokenize exactly as the shipped tables say:
//!   a small fake `llama-server` for `gemma-3-270m` (Gemma 3 ids) and the fake vLLM behind
//!   a front that answers its tokenizer endpoint with Qwen 3 ids, for `qwen3-8b`. So the
//!   live token checks pass as against real servers, both models and their aliases answer,
//!   `/v1/models` lists every name, the fallback serves while the llama-server fails, and
//!   the keys' limits from the file give 429s.
//! * The client snippets (`examples/python/`, `examples/node/`) run in the live tier
//!   (`tests/live/examples.rs`).

use crate::support;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::support::fake_vllm::FakeVllm;
use crate::support::{ask_as, get_as, Service};

/// The public demo key whose sha256 `examples/keys.toml` lists for `acme`.
const ACME_KEY: &str = "sk-demo-acme";
/// The variable `examples/keys.toml` names for the `ci` key.
const CI_KEY_ENV: &str = "SYSTEMONE_CI_KEY";
/// The URLs `examples/models.toml` ships with, in its model order.
const LLAMA_URL: &str = "http://127.0.0.1:8081/v1";
const VLLM_URL: &str = "http://127.0.0.1:8000/v1";

/// A path under the repository.
fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `ci` key: random per run, put where `examples/keys.toml` says to look for it.
fn ci_key() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| {
        let key = format!("sk-ci-{}", uuid::Uuid::new_v4().simple());
        std::env::set_var(CI_KEY_ENV, &key);
        key
    })
}

// ---------------------------------------------------------------------------------------
// Fakes that tokenize as the shipped token tables say.
// ---------------------------------------------------------------------------------------

/// A shipped token table as a tokenizer: every text the live check sends (`answer=`,
/// `answer=<label>`) maps to the table's ids; anything else to its bytes.
struct TableTokenizer(HashMap<String, Vec<u64>>);

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("an id list")
        .iter()
        .map(|x| x.as_u64().expect("an id"))
        .collect()
}

impl TableTokenizer {
    fn shipped(name: &str) -> Self {
        let table: Value = serde_json::from_str(&read(&format!("token-tables/{name}.json")))
            .expect("a JSON table");
        let prefix = table["prefix"].as_str().expect("prefix");
        let head = ids(&table["prefix_ids"]);
        let with = |tail: Vec<u64>| head.iter().copied().chain(tail).collect::<Vec<_>>();
        let mut map = HashMap::from([(prefix.to_string(), head.clone())]);
        for label in table["labels"].as_array().expect("labels") {
            let number = label["number"].as_u64().expect("number");
            let id = label["id"].as_u64().expect("id");
            map.insert(format!("{prefix}{number}"), with(vec![id]));
        }
        for scheme in table["multi_token"].as_array().into_iter().flatten() {
            for label in scheme["labels"].as_array().expect("labels") {
                let text = label["text"].as_str().expect("text");
                map.insert(format!("{prefix}{text}"), with(ids(&label["ids"])));
            }
        }
        TableTokenizer(map)
    }

    fn tokenize(&self, text: &str) -> Vec<u64> {
        self.0
            .get(text)
            .cloned()
            .unwrap_or_else(|| text.bytes().map(u64::from).collect())
    }
}

/// A small `llama-server` serving Gemma 3 270M: `/tokenize` by the shipped `gemma-3`
/// table, a Gemma chat template, and reads whose raw top-K holds every biased option.
struct FakeLlama {
    tokenizer: TableTokenizer,
    /// Answer every chat request with a 500.
    failing: AtomicBool,
    /// Chat requests received.
    chats: AtomicUsize,
}

async fn llama_tokenize(
    State(fake): State<Arc<FakeLlama>>,
    Json(body): Json<Value>,
) -> Json<Value> {
    let text = body["content"].as_str().unwrap_or("");
    Json(json!({"tokens": fake.tokenizer.tokenize(text)}))
}

async fn llama_template(Json(body): Json<Value>) -> Json<Value> {
    let user = body["messages"][0]["content"].as_str().unwrap_or("");
    let prefill = body["messages"][1]["content"].as_str().unwrap_or("");
    Json(json!({"prompt": format!(
        "<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n{prefill}"
    )}))
}

async fn llama_chat(State(fake): State<Arc<FakeLlama>>, Json(body): Json<Value>) -> Response {
    fake.chats.fetch_add(1, Ordering::SeqCst);
    if fake.failing.load(Ordering::SeqCst) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": {"code": 500, "message": "the fake llama-server fails"}})),
        )
            .into_response();
    }
    let options: Vec<u64> = body["logit_bias"]
        .as_object()
        .expect("logit_bias as OpenAI's map")
        .keys()
        .map(|id| id.parse().expect("an id"))
        .collect();
    let mut top = vec![json!({"id": 623, "token": " \"", "logprob": 0.4f64.ln()})];
    top.extend(
        options.iter().enumerate().map(
            |(i, id)| json!({"id": id, "token": "x", "logprob": (0.01 * (i as f64 + 1.0)).ln()}),
        ),
    );
    let position = json!({"id": 623, "token": " \"", "logprob": 0.4f64.ln(), "top_logprobs": top});
    Json(json!({
        "model": "gemma-3-270m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "0"},
                     "logprobs": {"content": [position]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 1},
    }))
    .into_response()
}

/// Starts a [`FakeLlama`]; returns it with its base URL (`…/v1`).
async fn start_llama() -> (Arc<FakeLlama>, String) {
    let fake = Arc::new(FakeLlama {
        tokenizer: TableTokenizer::shipped("gemma-3"),
        failing: AtomicBool::new(false),
        chats: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/tokenize", post(llama_tokenize))
        .route("/apply-template", post(llama_template))
        .route("/v1/chat/completions", post(llama_chat))
        .with_state(fake.clone());
    let addr = support::spawn_app(app).await;
    (fake, format!("http://{addr}/v1"))
}

/// A vLLM server serving Qwen 3: the fake vLLM's chat completions, and a tokenizer
/// endpoint (`/tokenize`) by the shipped `qwen-3` table.
struct VllmFront {
    tokenizer: TableTokenizer,
    chat_url: String,
    client: reqwest::Client,
}

async fn front_tokenize(
    State(front): State<Arc<VllmFront>>,
    Json(body): Json<Value>,
) -> Json<Value> {
    let tokens = front
        .tokenizer
        .tokenize(body["prompt"].as_str().unwrap_or(""));
    Json(json!({"count": tokens.len(), "max_model_len": 40960, "tokens": tokens}))
}

async fn front_chat(State(front): State<Arc<VllmFront>>, body: Bytes) -> Response {
    let answer = front
        .client
        .post(&front.chat_url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the fake vLLM answers");
    let status = StatusCode::from_u16(answer.status().as_u16()).expect("a status");
    let text = answer.text().await.expect("a body");
    (status, [("content-type", "application/json")], text).into_response()
}

/// Starts the fake vLLM and its Qwen 3 front; returns the fake with the front's base URL.
async fn start_vllm() -> (FakeVllm, String) {
    let fake = FakeVllm::start().await;
    let front = Arc::new(VllmFront {
        tokenizer: TableTokenizer::shipped("qwen-3"),
        chat_url: format!("{}/chat/completions", fake.base_url()),
        client: reqwest::Client::new(),
    });
    let app = Router::new()
        .route("/tokenize", post(front_tokenize))
        .route("/v1/chat/completions", post(front_chat))
        .with_state(front);
    let addr = support::spawn_app(app).await;
    (fake, format!("http://{addr}/v1"))
}

/// The service on `examples/models.toml` (backend URLs pointed at the fakes) and
/// `examples/keys.toml`, as shipped.
async fn registry_service() -> (Arc<FakeLlama>, FakeVllm, Service) {
    let (llama, llama_url) = start_llama().await;
    let (vllm, vllm_url) = start_vllm().await;
    let shipped = read("examples/models.toml");
    for url in [LLAMA_URL, VLLM_URL] {
        assert_eq!(
            shipped.matches(url).count(),
            1,
            "examples/models.toml names {url} once"
        );
    }
    let registry = support::temp_file(
        "models.toml",
        &shipped
            .replace(LLAMA_URL, &llama_url)
            .replace(VLLM_URL, &vllm_url),
    );
    ci_key();
    let keys = repo("examples/keys.toml");
    let config = support::serve_config(&[
        "systemone",
        "serve",
        "--config",
        registry.to_str().expect("utf-8"),
        "--keys-file",
        keys.to_str().expect("utf-8"),
        // Five failing requests make a rate here (the default minimum is 20 in a window).
        "--circuit-min-calls",
        "5",
    ]);
    let service = support::start(config).await;
    (llama, vllm, service)
}

/// A request with `n` noul questions, for `model` when given.
fn nouls(model: Option<&str>, n: usize) -> Value {
    let questions: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "noul", "instructions": format!("Is point {i} met?")}),
            )
        })
        .collect();
    let mut body = json!({"state": "A customer asks for a refund.", "questions": questions});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    body
}

/// The registry and the keys file load as shipped: `/v1/models` (behind a key) lists both
/// models, their aliases and `jev-latest` with their release dates; the default model and
/// an alias of each model are answered by that model's backend, after live token checks
/// against the shipped Gemma 3 and Qwen 3 tables passed (a mismatch would be a 503), with
/// `disable_thinking` reaching the vLLM backend; while the llama-server answers 500s, the
/// circuit of `gemma-3-270m` opens once 3 of its 5 requests failed (`--circuit-min-calls 5`,
/// the default 50% rate) and `qwen3-8b` serves
/// its requests by default, name and alias without contacting the llama-server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_registry_serves_aliases_and_falls_back() {
    let (llama, vllm, service) = registry_service().await;
    let acme = Some(ACME_KEY);

    let no_key = get_as(&service, "/v1/models", None).await;
    assert_eq!(
        no_key.status, 403,
        "the keys file is in force: {}",
        no_key.text
    );
    let models = get_as(&service, "/v1/models", acme).await;
    assert_eq!(models.status, 200, "{}", models.text);
    let listed: HashMap<&str, &str> = models.body["models"]
        .as_array()
        .expect("TypeSafe's models")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().expect("name"),
                m["release_date"].as_str().expect("a string release_date"),
            )
        })
        .collect();
    for (name, date) in [
        ("gemma-3-270m", "2025-08-14"),
        ("local", "2025-08-14"),
        ("cheap", "2025-08-14"),
        ("jev-latest", "2025-08-14"),
        ("qwen3-8b", "2025-04-29"),
        ("qwen", "2025-04-29"),
    ] {
        assert_eq!(listed.get(name), Some(&date), "{name} in {}", models.text);
    }

    for (model, served, upstream) in [
        (None, "gemma-3-270m", "gemma-3-270m"),
        (Some("local"), "gemma-3-270m", "gemma-3-270m"),
        (Some("qwen"), "qwen3-8b", "Qwen/Qwen3-8B"),
    ] {
        let reply = ask_as(&service, acme, &nouls(model, 1)).await;
        assert_eq!(reply.status, 200, "{model:?}: {}", reply.text);
        assert_eq!(reply.header("x-systemone-model"), Some(served), "{model:?}");
        assert_eq!(reply.body["model"], json!(upstream), "{}", reply.text);
    }
    assert_eq!(llama.chats.load(Ordering::SeqCst), 2);
    let bodies = vllm.chat_bodies();
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["model"], json!("Qwen/Qwen3-8B"));
    assert_eq!(
        bodies[0]["chat_template_kwargs"],
        json!({"enable_thinking": false}),
        "disable_thinking from the file"
    );

    llama.failing.store(true, Ordering::SeqCst);
    // With the 2 answered above, 3 failures are 5 calls, 60% failed: the circuit opens.
    for _ in 0..3 {
        let failed = ask_as(&service, acme, &nouls(Some("local"), 1)).await;
        assert_eq!(failed.status, 502, "{}", failed.text);
    }
    let llama_sent = llama.chats.load(Ordering::SeqCst);
    for model in [None, Some("gemma-3-270m"), Some("cheap")] {
        let reply = ask_as(&service, acme, &nouls(model, 1)).await;
        assert_eq!(reply.status, 200, "{model:?}: {}", reply.text);
        assert_eq!(reply.header("x-systemone-model"), Some("qwen3-8b"));
        assert_eq!(reply.body["model"], json!("Qwen/Qwen3-8B"));
    }
    assert_eq!(
        llama.chats.load(Ordering::SeqCst),
        llama_sent,
        "the open circuit keeps requests off the llama-server"
    );
    assert_eq!(vllm.chat_requests(), 4);
    let text = support::metrics(&service).await;
    assert!(
        text.contains("systemone_circuit_state{model=\"gemma-3-270m\"} 1"),
        "{text}"
    );
}

/// The keys' limits are the file's: `acme` (by sha256) gets exactly its 60 requests per
/// minute as a burst, then 429 `system_one_rate_limited`; `ci` (its key from
/// `SYSTEMONE_CI_KEY`) gets its 60 questions per minute as three 20-question requests,
/// then a 429 that never reaches the backend; `/metrics` counts both rejections by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_keys_file_enforces_its_limits() {
    let (llama, _vllm, service) = registry_service().await;

    let mut passed = 0;
    let refused = loop {
        let reply = get_as(&service, "/v1/models", Some(ACME_KEY)).await;
        if reply.status != 200 {
            break reply;
        }
        passed += 1;
        // The bucket refills one request a second; a slow run may see a few more.
        assert!(passed < 90, "acme's requests_per_minute never refused");
    };
    assert!(passed >= 60, "acme's burst is its 60 requests: {passed}");
    support::assert_error(&refused, 429, "system_one_rate_limited", "rate_limited");

    let ci = Some(ci_key());
    for i in 0..3 {
        let reply = ask_as(&service, ci, &nouls(None, 20)).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text);
    }
    let sent = llama.chats.load(Ordering::SeqCst);
    assert_eq!(sent, 60);
    let over = ask_as(&service, ci, &nouls(None, 20)).await;
    support::assert_error(&over, 429, "system_one_rate_limited", "rate_limited");
    assert_eq!(llama.chats.load(Ordering::SeqCst), sent, "nothing upstream");

    let text = support::metrics(&service).await;
    for line in [
        "systemone_key_rejections_total{key=\"acme\",kind=\"requests\"} 1",
        "systemone_key_rejections_total{key=\"ci\",kind=\"questions\"} 1",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}
