//! Shared test support: the fake vLLM server, a service started against it on port 0, and
//! what the HTTP tests share (responses read whole, the contract's error shape, small
//! requests and files). What only some suites share has a module of its own: `rows` (the
//! validation table's runner), `props` (the property tests' in-process harness and valid
//! requests), `llama` and `proxy` (the llama.cpp end-to-end tests' setup, shape checks and
//! recording proxy), `redis` (a real redis-server and replicas sharing it).

#![allow(dead_code)]

pub mod fake_native;
pub mod fake_openai;
pub mod fake_vllm;
pub mod ledger;
pub mod llama;
pub mod log;
pub mod post_bias_proxy;
pub mod props;
pub mod proxy;
pub mod real_tokenizers;
pub mod redis;
pub mod rows;
pub mod tcp_counter;
pub mod vllm_real;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use systemone::cli::{Cli, Command};
use systemone::config::ServeConfig;
use systemone::AppState;

use fake_vllm::FakeVllm;

/// A service running on 127.0.0.1:0 in the current runtime.
pub struct Service {
    pub addr: SocketAddr,
    pub state: AppState,
    pub client: reqwest::Client,
}

impl Service {
    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs a JSON value to `/v1/systemone`.
    pub async fn ask(&self, body: &serde_json::Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/systemone"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("service answers")
    }
}

/// `systemone eval` with these flags, parsed.
pub fn eval_args(flags: &[&str]) -> systemone::cli::eval::EvalArgs {
    let mut args = vec!["systemone", "eval"];
    args.extend_from_slice(flags);
    match Cli::try_parse_from(args).expect("valid flags").command {
        Command::Eval(a) => *a,
        other => panic!("not eval: {other:?}"),
    }
}

/// Asserts one family of an `eval` report: its type, row count, finite metrics and a mean
/// option mass in (0, 1].
pub fn assert_family(report: &Value, family: &str, kind: &str, n: u64) {
    let f = &report["families"][family];
    assert_eq!(
        (f["type"].as_str(), f["n"].as_u64()),
        (Some(kind), Some(n)),
        "{f}"
    );
    for key in [
        "accuracy",
        "macro_f1",
        "brier",
        "ece_equal_size_15",
        "ece_equal_width_10",
        "excess_ece",
    ] {
        assert!(
            f[key].as_f64().is_some_and(f64::is_finite),
            "{family} {key}: {f}"
        );
    }
    let mass = f["mean_option_mass"].as_f64().expect("option mass");
    assert!(mass > 0.0 && mass <= 1.0, "{family}: {mass}");
}

/// `systemone calibrate` with these flags, parsed.
pub fn calibrate_args(flags: &[&str]) -> systemone::cli::calibrate::CalibrateArgs {
    let mut args = vec!["systemone", "calibrate"];
    args.extend_from_slice(flags);
    match Cli::try_parse_from(args).expect("valid flags").command {
        Command::Calibrate(a) => a,
        other => panic!("not calibrate: {other:?}"),
    }
}

/// Parses a whole command line (`systemone serve …`) into its serve configuration.
pub fn serve_config(args: &[&str]) -> ServeConfig {
    match Cli::try_parse_from(args).expect("valid flags").command {
        Command::Serve(config) => *config,
        other => panic!("not serve: {other:?}"),
    }
}

/// `systemone serve --config <a file holding the registry `toml`>` with extra flags, parsed.
pub fn registry_config(toml: &str, flags: &[&str]) -> ServeConfig {
    let path = temp_file("models.toml", toml);
    let path = path.to_str().expect("utf-8 path");
    let mut args = vec!["systemone", "serve", "--config", path];
    args.extend_from_slice(flags);
    serve_config(&args)
}

/// The serve configuration of one model `model` on a native System One upstream at
/// `backend_url` (`--backend systemone`), with extra flags.
pub fn native_config(backend_url: &str, model: &str, extra: &[&str]) -> ServeConfig {
    let mut args = vec!["systemone", "serve", "--backend", "systemone"];
    args.extend(["--backend-url", backend_url, "--model", model]);
    args.extend_from_slice(extra);
    serve_config(&args)
}

/// Why the service refuses to start with the registry `toml`.
pub fn registry_error(toml: &str) -> String {
    match systemone::build_state(&registry_config(toml, &[])) {
        Ok(_) => panic!("the registry was accepted: {toml}"),
        Err(e) => e.to_string(),
    }
}

/// The serve configuration for a llama.cpp backend (`llama-server`) at `backend_url`, with
/// extra flags.
pub fn llamacpp_config(backend_url: &str, extra: &[&str]) -> ServeConfig {
    let mut args = vec![
        "systemone",
        "serve",
        "--backend",
        "llamacpp",
        "--backend-url",
        backend_url,
    ];
    args.extend_from_slice(extra);
    serve_config(&args)
}

/// The serve configuration for a backend at `backend_url`, with extra flags.
pub fn config(backend_url: &str, extra: &[&str]) -> ServeConfig {
    config_with_table(backend_url, "golden-fake", extra)
}

/// Like [`config`], but with the token table `table` instead of `golden-fake`.
pub fn config_with_table(backend_url: &str, table: &str, extra: &[&str]) -> ServeConfig {
    let mut args = vec![
        "systemone",
        "serve",
        "--backend",
        "vllm",
        "--backend-url",
        backend_url,
        "--token-table",
        table,
        "--model",
        "glm-5.3-flash",
    ];
    args.extend_from_slice(extra);
    serve_config(&args)
}

/// The serve configuration for an OpenAI-compatible host (`--backend openai`) at
/// `backend_url` with the token table `table`, with extra flags (`--model` among them).
pub fn openai_config(backend_url: &str, table: &str, extra: &[&str]) -> ServeConfig {
    let mut args = vec![
        "systemone",
        "serve",
        "--backend",
        "openai",
        "--backend-url",
        backend_url,
        "--token-table",
        table,
    ];
    args.extend_from_slice(extra);
    serve_config(&args)
}

/// Serves `app` on 127.0.0.1:0 in the current runtime; returns the bound address.
pub async fn spawn_app(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// Starts the service with `config`.
pub async fn start(config: ServeConfig) -> Service {
    let state = systemone::build_state(&config).expect("state builds");
    let addr = spawn_app(systemone::app(state.clone())).await;
    Service {
        addr,
        state,
        client: reqwest::Client::new(),
    }
}

/// Waits (up to 300 s, polling) until every model's background upkeep has finished its
/// first host probe and token-table check: `/readyz` answers from memory and never waits
/// for them, so a test that reads what they found waits here first.
pub async fn settled(service: &Service) {
    use systemone::backend::host_report::Probe;
    use systemone::models::tokens::verify::Verdict;
    for _ in 0..3000 {
        let done = service.state.models.iter().all(|m| {
            let probed = m
                .serving
                .host_report()
                .is_none_or(|h| h.probe != Probe::Unprobed);
            let status = m.verifier.status();
            let checked = status.verdict == Verdict::Disabled || status.last_check.is_some();
            probed && checked && !status.checking
        });
        if done {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the models' first probe and check did not finish within 300 s");
}

/// A fake vLLM server plus a service in front of it, with `extra` flags.
pub async fn setup(extra: &[&str]) -> (FakeVllm, Service) {
    let fake = FakeVllm::start().await;
    let service = start(config(&fake.base_url(), extra)).await;
    (fake, service)
}

// ---------------------------------------------------------------------------------------
// Responses.
// ---------------------------------------------------------------------------------------

/// One response, read whole.
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
}

impl Reply {
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body reads");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            text,
            body,
        }
    }

    /// Like [`Reply::read`], asserting that the body is JSON.
    pub async fn read_json(response: reqwest::Response) -> Self {
        let reply = Reply::read(response).await;
        if let Err(e) = serde_json::from_str::<Value>(&reply.text) {
            panic!("a JSON body: {e}: {}", reply.text);
        }
        reply
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii header"))
    }

    /// `error.message`, or `""`.
    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }

    /// `Retry-After` in seconds, if present.
    pub fn retry_after(&self) -> Option<u64> {
        self.header("retry-after")
            .map(|v| v.parse().expect("Retry-After is whole seconds"))
    }

    /// `Retry-After` in seconds, which must be present.
    pub fn retry_secs(&self) -> u64 {
        self.retry_after().expect("Retry-After")
    }

    /// Asserts the status, `error.code` and `error.type`.
    pub fn assert_code(&self, status: u16, code: &str, kind: &str) {
        assert_eq!(self.status, status, "status; body {}", self.text);
        assert_eq!(self.body["error"]["code"], json!(code), "{}", self.text);
        assert_eq!(self.body["error"]["type"], json!(kind), "{}", self.text);
    }
}

/// Asserts the contract's error shape: status, code in the header and the body, type, a
/// message, and no answers.
pub fn assert_error(reply: &Reply, status: u16, code: &str, kind: &str) {
    reply.assert_code(status, code, kind);
    assert_eq!(
        reply.header("x-systemone-error-code"),
        Some(code),
        "header code; body {}",
        reply.text
    );
    assert!(!reply.message().is_empty(), "{}", reply.text);
    assert!(
        reply.body.get("answers").is_none(),
        "an error carries no answers: {}",
        reply.text
    );
}

/// POSTs `body` as JSON to `url`.
pub async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Reply {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("service answers");
    Reply::read(response).await
}

/// POSTs `body` to the service's `/v1/systemone`.
pub async fn ask(service: &Service, body: &Value) -> Reply {
    post(&service.client, &service.url("/v1/systemone"), body).await
}

/// GETs `path` from the service.
pub async fn get(service: &Service, path: &str) -> Reply {
    get_as(service, path, None).await
}

/// Like [`ask`], with `Authorization: Bearer <bearer>` when there is one.
pub async fn ask_as(service: &Service, bearer: Option<&str>, body: &Value) -> Reply {
    let mut request = service
        .client
        .post(service.url("/v1/systemone"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = bearer {
        request = request.bearer_auth(key);
    }
    Reply::read(request.send().await.expect("service answers")).await
}

/// Like [`get`], with `Authorization: Bearer <bearer>` when there is one.
pub async fn get_as(service: &Service, path: &str, bearer: Option<&str>) -> Reply {
    let mut request = service.client.get(service.url(path));
    if let Some(key) = bearer {
        request = request.bearer_auth(key);
    }
    Reply::read(request.send().await.expect("service answers")).await
}

/// Waits (10 s at most) until every upstream in-flight slot is free: a read abandoned
/// mid-exchange frees its slot only once its connection is closed at both ends, a moment
/// after its request was answered.
pub async fn slots_freed(service: &Service) {
    let freed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while service.state.pipeline.in_flight().in_use() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(freed.is_ok(), "in-flight slots still taken after 10 s");
}

/// The service's `/metrics` text.
pub async fn metrics(service: &Service) -> String {
    service
        .client
        .get(service.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

// ---------------------------------------------------------------------------------------
// Requests and files.
// ---------------------------------------------------------------------------------------

/// `criteria` with `n` labels `opt_0` … `opt_{n-1}`.
pub fn criteria(n: usize) -> Value {
    let map: Map<String, Value> = (0..n)
        .map(|i| (format!("opt_{i}"), json!(format!("option number {i}"))))
        .collect();
    Value::Object(map)
}

/// A JSON list of token ids (`logprob_token_ids`, `allowed_token_ids`, …).
pub fn ids_of(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id"))
        .collect()
}

/// The smallest valid PNG (1×1, grey).
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x7e, 0x9b,
    0x55, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0x60, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x01, 0xe2, 0x21, 0xbc, 0x33, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

/// The lower-case hex sha256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `text` to a file `name` in a fresh directory under the system temp dir; returns
/// the file's path.
pub fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "systemone-test-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

// ---------------------------------------------------------------------------------------
// The official SDKs
// ---------------------------------------------------------------------------------------

/// Runs `program args` with `env`, returning stdout; panics with stderr on failure.
pub async fn run_program(
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
) -> String {
    tokio::task::spawn_blocking(move || {
        let output = std::process::Command::new(&program)
            .args(&args)
            .envs(env)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{} {args:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    })
    .await
    .expect("runner")
}

/// The Python that has `typesafe-sdk` 0.7.5: `$SYSTEMONE_PYTHON`, else the project's `.venv`.
pub fn sdk_python() -> PathBuf {
    let path = std::env::var_os("SYSTEMONE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python")));
    assert!(
        path.exists(),
        "no Python with the TypeSafe SDK at {}: set SYSTEMONE_PYTHON, or run scripts/test.sh \
         (it installs typesafe-sdk[zstd]==0.7.5 into .venv)",
        path.display()
    );
    path
}

/// The real binary's `serve` with `args` after `--listen 127.0.0.1:0` (logging at `warn`
/// but its own `listening` line), and the address that line names; the rest of its stderr
/// is drained in a thread. Reads blocking: async tests call it from `spawn_blocking`.
pub fn spawn_serve(args: &[&str]) -> (std::process::Child, SocketAddr) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_systemone"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "warn,systemone::cli=info")
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = lines.by_ref().map_while(Result::ok).find_map(|line| {
        let at = line.split("address=").nth(1)?;
        at.split_whitespace().next()?.parse::<SocketAddr>().ok()
    });
    std::thread::spawn(move || lines.for_each(drop));
    (child, addr.expect("the service's listening line"))
}
