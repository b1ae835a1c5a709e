//! What both test tiers share: a service started on port 0 against the fake vLLM
//! (`fake_vllm`, over the fakes' harness `fake_server`), responses read whole, the
//! contract's error shape, small requests and files, and the one way a live test names the
//! script that starts what it lacks ([`require`]). Modules: `bodies` and `answers` (requests
//! and what is read from answers), `ledger` and `ledger_suite` (the ledger's scenarios, run
//! on SQLite by the hermetic tier and on PostgreSQL by the live one), `limits` and
//! `replicas` (shared limits and replicas of the service), `log` (one capturing
//! subscriber), `prior` (the position prior's planted bias and its store), `profiles`, `fake_jwks` (an identity provider's JWKS and the keys that sign
//! its tokens). What only one tier needs is in its own `setup/`.

// The fake vLLM and the fakes' harness (`fake_server`) are declared by each tier's main.rs:
// the live tier borrows the fake vLLM as a plain backend and leaves its fault levers to the
// hermetic tier. The fake vLLM is reached here as ever.
pub(crate) use crate::fake_vllm;

pub mod answers;
pub mod bodies;
/// The hermetic tier reads everything it receives; the live tier only vLLM's spans.
#[allow(dead_code)]
pub mod collector;
/// The hermetic tier turns every lever of it (tests/hermetic/signed_tokens.rs); the live tier signs
/// one token for the SDK, so the rest goes unused there.
#[allow(dead_code)]
pub mod fake_jwks;
pub mod ledger;
pub mod ledger_suite;
pub mod limits;
pub mod log;
pub mod prior;
pub mod profiles;
pub mod replicas;

use std::cell::Cell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use clap::Parser;
use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use systemone::cli::{Cli, Command};
use systemone::config::ServeConfig;
use systemone::models::tokens::verify::Verdict;
use systemone::models::tokens::TokenTable;
use systemone::AppState;

use fake_vllm::FakeVllm;

/// The environment variable `name`, trimmed; when it is unset or empty the test fails at
/// once with one line naming `script`, which starts or fetches what the variable points at
/// (`scripts/test.sh` runs them all). A live test never skips.
pub fn require(name: &str, script: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value.trim().to_string(),
        _ if script == "scripts/test.sh" => {
            panic!("{name} is not set: run the tests with {script}")
        }
        _ => panic!("{name} is not set: run {script} (scripts/test.sh runs it and exports {name})"),
    }
}

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

    /// POSTs a JSON value to `/v1/systemone` and hands back the raw response, unread (for
    /// the suites that read its bytes themselves); [`ask`] reads it into a [`Reply`].
    pub async fn post_raw(&self, body: &serde_json::Value) -> reqwest::Response {
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
    match parse(&args) {
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

/// `systemone calibrate` with these flags (a job's subcommand and its flags, or the old
/// flag form), parsed into the job it runs.
pub fn calibrate_args(flags: &[&str]) -> systemone::cli::calibrate::Job {
    let mut args = vec!["systemone", "calibrate"];
    args.extend_from_slice(flags);
    match parse(&args) {
        Command::Calibrate(c) => match c.job {
            Some(job) => job,
            None => c.flags.job().expect("the flags name a job"),
        },
        other => panic!("not calibrate: {other:?}"),
    }
}

/// Parses a whole command line (`systemone serve …`) into its serve configuration.
pub fn serve_config(args: &[&str]) -> ServeConfig {
    match parse(args) {
        Command::Serve(config) => *config,
        other => panic!("not serve: {other:?}"),
    }
}

/// Serialises reading the environment with the one suite that sets `SYSTEMONE_API_KEYS`
/// (`with_api_keys_env` of the hermetic tier): clap reads
/// `SYSTEMONE_API_KEYS` for every command line parsed while it is set, and every suite of
/// the binary parses in this one process.
pub static ENV_LOCK: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread holds [`ENV_LOCK`] (inside `with_api_keys_env`).
    pub static HOLDS_ENV_LOCK: Cell<bool> = const { Cell::new(false) };
}

/// Parses a command line, never while another thread has `SYSTEMONE_API_KEYS` set.
fn parse(args: &[&str]) -> Command {
    let _guard =
        (!HOLDS_ENV_LOCK.get()).then(|| ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner()));
    Cli::try_parse_from(args).expect("valid flags").command
}

/// This build's `systemone` binary, without `SYSTEMONE_API_KEYS` (which one suite sets for
/// a moment in this process and a child would inherit).
pub fn binary() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_systemone"));
    command.env_remove("SYSTEMONE_API_KEYS");
    command
}

/// A registry `[[model]]` named `name` served natively at `url` (`typesafe` flavor unless
/// `extra` says otherwise), with `extra` TOML lines.
pub fn native_model(name: &str, url: &str, extra: &str) -> String {
    format!("\n[[model]]\nname = \"{name}\"\nbackend = \"systemone\"\nbackend_url = \"{url}\"\n{extra}\n")
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
            let replicas = m.serving.fleet().map_or(&[][..], |f| f.replicas());
            let replicas_checked = replicas.iter().all(|r| {
                let status = r.verifier.status();
                status.verdict == Verdict::Disabled || status.last_check.is_some()
            });
            probed && checked && !status.checking && replicas_checked
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

/// Polls (10 ms apart, up to `within`) until `cond` holds.
pub async fn until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let started = tokio::time::Instant::now();
    while !cond() {
        assert!(
            started.elapsed() < within,
            "{what} did not happen within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The default model's token table, once built and checked (`--token-table auto` builds it
/// in the background); fails after two minutes.
pub async fn table_built(service: &Service) -> Arc<TokenTable> {
    let model = service.state.models.default_model();
    until(
        "the automatic table was built and verified",
        Duration::from_secs(120),
        || model.table.get().is_some() && model.verifier.status().verdict == Verdict::Verified,
    )
    .await;
    model.table.get().expect("built")
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

/// Asserts a 200 with an answer to the question `q`.
pub fn assert_answered(reply: &Reply) {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.body["answers"]["q"].is_object(), "{}", reply.text);
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
    Reply::read(service.post_raw(body).await).await
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

/// The lower-case hex sha256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A keys file (`--keys-file`) holding `entries` (TOML), in a fresh temp dir.
pub fn keys_file(entries: &str) -> PathBuf {
    temp_file("keys.toml", entries)
}

/// One `[[key]]` entry of a keys file: `name`, the sha256 of `key`, then `limits` (TOML
/// lines, maybe none).
pub fn key_entry(name: &str, key: &str, limits: &str) -> String {
    format!(
        "[[key]]\nname = \"{name}\"\nsha256 = \"{}\"\n{limits}\n\n",
        sha256_hex(key)
    )
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

/// A spawned service, killed (`SIGKILL`) and reaped when dropped, so a failing test leaves
/// no process behind.
pub struct Spawned(pub std::process::Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real binary's `serve` with `args` after `--listen 127.0.0.1:0` (logging at `warn`
/// but its own `listening` line), and the address that line names; the rest of its stderr
/// is drained in a thread. Reads blocking: async tests call it from `spawn_blocking`.
pub fn spawn_serve(args: &[&str]) -> (std::process::Child, SocketAddr) {
    spawn_serve_with(args, &[])
}

/// [`spawn_serve`] with the environment variables `env` set (e.g. the OTLP exporter's).
pub fn spawn_serve_with(args: &[&str], env: &[(&str, &str)]) -> (std::process::Child, SocketAddr) {
    use std::io::BufRead;
    let mut child = binary()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().copied())
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
