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
//! * Each client snippet runs unchanged (`examples/python/*.py` with `$SYSTEMONE_PYTHON`,
//!   `examples/node/*.cjs` with node and `NODE_PATH` from `$SYSTEMONE_NPM_SDK`) against the
//!   service on the fake vLLM, behind a key, and prints exactly the answers the service
//!   gives the same request over plain HTTP.
//!
//! Without `SYSTEMONE_PYTHON` or `SYSTEMONE_NPM_SDK` (exported by `scripts/test.sh`) the
//! snippet tests fail with a message that says so; they never skip.

mod common;

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

use common::fake_vllm::FakeVllm;
use common::{ask_as, get_as, Reply, Service};

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
        .as_array()
        .expect("logit_bias")
        .iter()
        .map(|pair| pair[0].as_u64().expect("id"))
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
    let addr = common::spawn_app(app).await;
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
    let addr = common::spawn_app(app).await;
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
    let registry = common::temp_file(
        "models.toml",
        &shipped
            .replace(LLAMA_URL, &llama_url)
            .replace(VLLM_URL, &vllm_url),
    );
    ci_key();
    let keys = repo("examples/keys.toml");
    let config = common::serve_config(&[
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
    let service = common::start(config).await;
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
    let text = common::metrics(&service).await;
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
    common::assert_error(&refused, 429, "system_one_rate_limited", "rate_limited");

    let ci = Some(ci_key());
    for i in 0..3 {
        let reply = ask_as(&service, ci, &nouls(None, 20)).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text);
    }
    let sent = llama.chats.load(Ordering::SeqCst);
    assert_eq!(sent, 60);
    let over = ask_as(&service, ci, &nouls(None, 20)).await;
    common::assert_error(&over, 429, "system_one_rate_limited", "rate_limited");
    assert_eq!(llama.chats.load(Ordering::SeqCst), sent, "nothing upstream");

    let text = common::metrics(&service).await;
    for line in [
        "systemone_key_rejections_total{key=\"acme\",kind=\"requests\"} 1",
        "systemone_key_rejections_total{key=\"ci\",kind=\"questions\"} 1",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

// ---------------------------------------------------------------------------------------
// The client snippets.
// ---------------------------------------------------------------------------------------

/// The key the snippets' service requires (`--api-keys`).
const SNIPPET_KEY: &str = "sk-examples-snippets";
/// The model the fake vLLM serves.
const SNIPPET_MODEL: &str = "glm-5.3-flash";

/// An environment variable the snippet tests need, or a failure that says what to set.
fn required_env(name: &str, what: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("{name} is not set: it must name {what} (scripts/test.sh exports it)"),
    }
}

fn python() -> PathBuf {
    let path = PathBuf::from(required_env(
        "SYSTEMONE_PYTHON",
        "a Python with typesafe-sdk==0.7.5, openai==3.51.0 and cohere==7.3.1",
    ));
    assert!(
        path.exists(),
        "SYSTEMONE_PYTHON={} does not exist",
        path.display()
    );
    path
}

/// The service on the fake vLLM behind [`SNIPPET_KEY`].
async fn snippet_service() -> (FakeVllm, Service) {
    common::setup(&["--api-keys", SNIPPET_KEY]).await
}

/// The environment a snippet reads.
fn snippet_env(service: &Service) -> Vec<(&'static str, String)> {
    vec![
        ("SYSTEMONE_BASE_URL", service.url("")),
        ("SYSTEMONE_API_KEY", SNIPPET_KEY.into()),
        ("SYSTEMONE_MODEL", SNIPPET_MODEL.into()),
    ]
}

/// Runs `examples/<file>` with `program` and the snippet environment (plus `extra`).
async fn run_snippet(
    program: PathBuf,
    file: &str,
    service: &Service,
    extra: Vec<(&'static str, String)>,
) -> String {
    let mut env = snippet_env(service);
    env.extend(extra);
    common::run_program(program, vec![format!("examples/{file}")], env).await
}

/// A number as the snippets print it.
fn f3(v: &Value) -> String {
    format!(
        "{:.3}",
        v.as_f64().unwrap_or_else(|| panic!("a number: {v}"))
    )
}

/// `name p, name p, …` over a `{key: p}` map, each key renamed by `label`.
fn listing(probabilities: &Value, label: impl Fn(&str) -> String) -> String {
    probabilities
        .as_object()
        .expect("probabilities")
        .iter()
        .map(|(k, p)| format!("{} {}", label(k), f3(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Asserts every line of `expected` is a line of `stdout`.
fn assert_lines(stdout: &str, expected: &[String]) {
    let printed: Vec<&str> = stdout.lines().map(str::trim_end).collect();
    for line in expected {
        assert!(
            printed.contains(&line.as_str()),
            "the snippet printed no line {line:?}:\n{stdout}"
        );
    }
}

/// What the TypeSafe snippets (Python and npm) must print: the answers of `/v1/systemone`
/// to the same request over plain HTTP.
async fn typesafe_expected(service: &Service) -> Vec<String> {
    let body = json!({
        "model": SNIPPET_MODEL,
        "state": "A customer writes: I was charged twice for the same transfer on Monday.",
        "questions": {
            "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
            "team": {"type": "choice", "instructions": "Which team should handle this?",
                     "criteria": {"payments": "wrong or duplicate charges",
                                  "technical": "app and login problems", "human": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["Routine", "Soon", "Immediate"]},
        },
    });
    let reply = ask_as(service, Some(SNIPPET_KEY), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let a = &reply.body["answers"];
    let legend = &a["urgency"]["legend"];
    vec![
        format!("model: {}", reply.body["model"].as_str().expect("model")),
        format!("refund: noul {}", f3(&a["refund"]["noul"])),
        format!(
            "team: choice {} ({})",
            a["team"]["choice"].as_str().expect("choice"),
            listing(&a["team"]["probabilities"], str::to_string)
        ),
        format!(
            "urgency: score {} ({})",
            f3(&a["urgency"]["score"]),
            listing(&a["urgency"]["probabilities"], |k| legend[k]
                .as_str()
                .expect("legend")
                .to_string())
        ),
    ]
}

/// `examples/python/typesafe_system_one.py` (the TypeSafe Python SDK, `typesafe-sdk`
/// 0.7.5) runs unchanged and prints the noul, choice and score the service answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typesafe_python_snippet_prints_the_answers() {
    let python = python();
    let (fake, service) = snippet_service().await;
    let stdout = run_snippet(python, "python/typesafe_system_one.py", &service, vec![]).await;
    assert_eq!(fake.chat_requests(), 3, "one read per question");
    assert_lines(&stdout, &typesafe_expected(&service).await);
}

/// `examples/node/typesafe_system_one.cjs` (the npm SDK `@typesafe-ai/sdk` 0.6.0, run with
/// node and `NODE_PATH` into `$SYSTEMONE_NPM_SDK`) prints the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typesafe_node_snippet_prints_the_answers() {
    let prefix = PathBuf::from(required_env(
        "SYSTEMONE_NPM_SDK",
        "the prefix scripts/fetch-npm-sdk.sh installed @typesafe-ai/sdk 0.6.0 into",
    ));
    let modules = prefix.join("node_modules");
    assert!(
        modules.join("@typesafe-ai/sdk/package.json").exists(),
        "no @typesafe-ai/sdk under SYSTEMONE_NPM_SDK={}: run scripts/fetch-npm-sdk.sh",
        prefix.display()
    );
    let node = std::env::var_os("SYSTEMONE_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("node"));
    let (fake, service) = snippet_service().await;
    let stdout = run_snippet(
        node,
        "node/typesafe_system_one.cjs",
        &service,
        vec![("NODE_PATH", modules.display().to_string())],
    )
    .await;
    assert_eq!(fake.chat_requests(), 3, "one read per question");
    assert_lines(&stdout, &typesafe_expected(&service).await);
}

/// `examples/python/openai_decisions.py` (`openai` 3.51.0, `client.decisions.create`)
/// prints the predicate, choice and score `/v1/decisions` answers to the same body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_decisions_snippet_prints_the_answers() {
    let python = python();
    let (_fake, service) = snippet_service().await;
    let stdout = run_snippet(python, "python/openai_decisions.py", &service, vec![]).await;
    let body = json!({
        "model": SNIPPET_MODEL,
        "input": "I was charged twice; please refund the extra charge.",
        "questions": [
            {"type": "predicate", "name": "refund", "instructions": "Does the customer ask for a refund?"},
            {"type": "choice", "name": "team", "instructions": "Which team should handle this?",
             "choices": [{"value": "billing", "description": "charges and refunds"}, {"value": "bug"}, {"value": "other"}]},
            {"type": "score", "name": "urgency", "instructions": "How urgent is it?",
             "levels": [{"label": "routine"}, {"label": "soon", "description": "within a day"}, {"label": "now"}]},
        ],
    });
    let reply = post_as(&service, "/v1/decisions", &body).await;
    let a = reply.body["answers"].as_array().expect("answers");
    let list = |answer: &Value, key: &str| {
        answer["probabilities"]
            .as_array()
            .expect("probabilities")
            .iter()
            .map(|p| {
                format!(
                    "{} {}",
                    p[key].as_str().expect("label"),
                    f3(&p["probability"])
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let expected = vec![
        format!("model: {}", reply.body["model"].as_str().expect("model")),
        format!("refund: predicate {}", f3(&a[0]["probability"])),
        format!(
            "team: choice {} ({})",
            a[1]["choice"].as_str().expect("choice"),
            list(&a[1], "value")
        ),
        format!(
            "urgency: score {} ({})",
            f3(&a[2]["score"]),
            list(&a[2], "label")
        ),
    ];
    assert_lines(&stdout, &expected);
}

/// `examples/python/cohere_rerank.py` (`cohere` 7.3.1, `ClientV2.rerank`) prints the two
/// best documents in `/v2/rerank`'s order with their scores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cohere_rerank_snippet_prints_the_ranking() {
    let python = python();
    let (_fake, service) = snippet_service().await;
    let stdout = run_snippet(python, "python/cohere_rerank.py", &service, vec![]).await;
    let documents = [
        "Refunds take five days to reach your card.",
        "We are closed on Sundays.",
        "Open a dispute in the app to get your money back.",
    ];
    let body = json!({"model": SNIPPET_MODEL, "query": "How do I get a refund?",
                      "documents": documents, "top_n": 2});
    let reply = post_as(&service, "/v2/rerank", &body).await;
    let results = reply.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    let expected: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(rank, r)| {
            let index = r["index"].as_u64().expect("index");
            let doc = documents[usize::try_from(index).expect("index")];
            format!(
                "{}. document {index} ({}): {doc}",
                rank + 1,
                f3(&r["relevance_score"])
            )
        })
        .collect();
    assert_lines(&stdout, &expected);
}

/// POSTs `body` to `path` with the snippets' key; asserts a 200.
async fn post_as(service: &Service, path: &str, body: &Value) -> Reply {
    let response = service
        .client
        .post(service.url(path))
        .bearer_auth(SNIPPET_KEY)
        .json(body)
        .send()
        .await
        .expect("service answers");
    let reply = Reply::read(response).await;
    assert_eq!(reply.status, 200, "{path}: {}", reply.text);
    reply
}
