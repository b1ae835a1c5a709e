//! Configuration: one clap struct (every flag has a `SYSTEMONE_*` twin) plus an optional
//! TOML model registry for serving several models.
//!
//! Flags describe one model (the common case). `--config FILE` replaces that one model with
//! the file's `[[model]]` list; process-wide settings (listen address, limits, in-flight
//! cap, timeouts) always come from flags or env. Secrets are held in [`Secret`], whose
//! `Debug` and `Display` print `[redacted]`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Deserialize;

use crate::secret::Secret;

/// Seconds between live token-table checks, unless configured (flag and registry alike).
pub const DEFAULT_TOKEN_CHECK_INTERVAL_SECS: u64 = 600;
/// Seconds one live token-table check may take, unless configured.
pub const DEFAULT_TOKEN_CHECK_TIMEOUT_SECS: f64 = 30.0;
/// Token ids read per upstream request, unless configured (flag and registry alike).
pub const DEFAULT_MAX_IDS_PER_READ: usize = 128;
/// Most rotated option orders a request (or a model's default) may ask for.
pub const MAX_PERMUTATIONS: usize = 8;
/// The noul `/v2/rerank` asks of each document, unless a model configures its own
/// (`rerank_question`). The query is the state; the document follows it (README "Rerank").
pub const DEFAULT_RERANK_QUESTION: &str =
    "Is the document after the state relevant to the query in the state, that is, does it help answer the query?";

/// A flag group with every flag at its `#[arg(default_value…)]`, the environment ignored:
/// the defaults are written once, in the attributes `--help` shows.
fn clap_defaults<T: Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults")).mut_args(|a| a.env(None));
    let matches = command
        .try_get_matches_from(["defaults"])
        .expect("every flag has a valid default");
    T::from_arg_matches(&matches).expect("every flag has a valid default")
}

/// The `token_table` that builds the table from the backend's tokenizer at startup.
pub const AUTO_TABLE: &str = "auto";

/// Which wire dialect a backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// vLLM's OpenAI-compatible server with `allowed_token_ids` and `logprob_token_ids`.
    Vllm,
    /// llama.cpp's `llama-server` (the default: the local backend).
    Llamacpp,
    /// Any OpenAI-compatible host (standard fields only), read the way a startup probe
    /// found exact, or refused.
    Openai,
    /// A native System One server (`POST /v1/systemone`): the whole request is forwarded,
    /// in the dialect of its [`Flavor`].
    Systemone,
}

impl BackendKind {
    /// The dialect's name, as `--backend` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Vllm => "vllm",
            BackendKind::Llamacpp => "llamacpp",
            BackendKind::Openai => "openai",
            BackendKind::Systemone => "systemone",
        }
    }
}

/// Which native System One server a `systemone` backend is: each flavor's quirks are in
/// its own file under `src/backend/systemone/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// TypeSafe's API (and another `systemone`): `x-typesafe-request-id`, 422 `detail`
    /// lists, `retry-after-ms`, 529 when overloaded.
    #[default]
    Typesafe,
    /// Ollama's `/v1/systemone`: `{"error": …}` bodies, images as a base64 list,
    /// `keep_alive` from configuration only, 2–26 options.
    Ollama,
    /// vLLM's native `/v1/systemone`: 501 for a model it cannot serve natively.
    Vllm,
}

impl Flavor {
    /// The flavor's name, as `--flavor` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavor::Typesafe => "typesafe",
            Flavor::Ollama => "ollama",
            Flavor::Vllm => "vllm",
        }
    }
}

/// One model name, or several in order (`fallback = "a"` or `fallback = ["a", "b"]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    /// The names, in order.
    pub fn names(&self) -> Vec<String> {
        match self {
            OneOrMany::One(name) => vec![name.clone()],
            OneOrMany::Many(names) => names.clone(),
        }
    }
}

/// When a model's answer is asked again of its `escalate_to` model, besides a confidence
/// under `escalate_below`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscalateWhen {
    /// The calibration profile that covered the answer did not set `automate` (an answer
    /// no profile covered is not escalated by this rule).
    NotAutomate,
}

/// The prompt layout (technique §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Each request leads with its own question: best accuracy.
    #[default]
    Accuracy,
    /// Every request leads with all questions, so the backend's prefix cache is shared.
    Cost,
}

/// Which labels a model asks with once a question has more options than its single-token
/// labels (technique §3; a question that fits them is asked with them, byte for byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LabelScheme {
    /// Fixed-width numerals (`00`…`99`, `000`…`254`), scored by the chain rule: the prompt
    /// numbers the options as the reference does.
    #[default]
    Numerals,
    /// Single letters (`A`…`Z`, `a`…`z`) for up to 52 options, one read each order; numerals
    /// beyond. Needs a table built with `tokens build --letters`.
    Letters,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Everything `systemone serve` needs.
#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Address to listen on.
    #[arg(long, env = "SYSTEMONE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// TOML file with a `[[model]]` registry; replaces the single-model flags below.
    #[arg(long, env = "SYSTEMONE_CONFIG")]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub model: ModelConfig,

    /// Directory of calibration profiles (`*.json` from `systemone calibrate --profile`)
    /// that requests may name with `"calibration"`, beside the shipped ones.
    #[arg(long, env = "SYSTEMONE_PROFILES_DIR")]
    pub profiles_dir: Option<PathBuf>,

    /// Log the first 200 bytes of a backend's error answers, at `trace`. Off by default: a
    /// backend may repeat the prompt in an error, and the prompt holds callers' states and
    /// questions. Only for debugging a backend, never where callers' content must stay out
    /// of the logs. Without it an error is logged by status, length and a hash.
    #[arg(long, env = "SYSTEMONE_LOG_BACKEND_ERROR_TEXT")]
    pub log_backend_error_text: bool,

    /// Async worker threads [default: half the CPUs; where that is 1 or less, 0]. The
    /// service waits on its backend far more than it computes (heavy steps go to the
    /// blocking pool), and with more workers than that each request wakes an idle one
    /// (tokio keeps one searching): on 2 CPUs one worker spent 0.83-0.97x the CPU per
    /// answer of two, for 0.85-1.13x the answers a second. 0 runs everything on one thread
    /// (tokio's current-thread runtime: no worker to hand work to or wake): 0.84-0.99x the
    /// CPU per answer of one worker, for 0.98-1.18x the answers a second (docs/benchmarks.md).
    /// Raise it when one thread's ~7,000-10,000 answers a second are not enough.
    #[arg(long, env = "SYSTEMONE_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub worker_threads: Option<u16>,

    #[command(flatten)]
    pub limits: Limits,

    #[command(flatten)]
    pub upstream: UpstreamSettings,

    #[command(flatten)]
    pub gateway: GatewaySettings,

    #[command(flatten)]
    pub edge: EdgeSettings,

    #[command(flatten)]
    pub limit_store: LimitStoreSettings,

    #[command(flatten)]
    pub ledger: LedgerSettings,

    /// Log format (`text` for people, `json` for collectors). Level via `RUST_LOG`.
    #[arg(long, env = "SYSTEMONE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Request limits (contract "Limits"). Every one is configurable.
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Most questions in one request.
    #[arg(long, env = "SYSTEMONE_MAX_QUESTIONS", default_value_t = 64)]
    pub max_questions: usize,
    /// Most options in one choice question (also capped by the model's labels).
    #[arg(long, env = "SYSTEMONE_MAX_OPTIONS", default_value_t = 255)]
    pub max_options: usize,
    /// Most levels in one score question.
    #[arg(long, env = "SYSTEMONE_MAX_LEVELS", default_value_t = 10)]
    pub max_levels: usize,
    /// Most tokens in the state.
    #[arg(long, env = "SYSTEMONE_MAX_STATE_TOKENS", default_value_t = 32_768)]
    pub max_state_tokens: usize,
    /// Most tokens in one question (instructions + criteria).
    #[arg(long, env = "SYSTEMONE_MAX_QUESTION_TOKENS", default_value_t = 16_384)]
    pub max_question_tokens: usize,
    /// Most upstream prompt tokens over all upstream requests of one call.
    #[arg(long, env = "SYSTEMONE_MAX_REQUEST_TOKENS", default_value_t = 200_000)]
    pub max_request_tokens: usize,
    /// Most bytes in a request body, after decompression.
    #[arg(long, env = "SYSTEMONE_MAX_BODY_BYTES", default_value_t = 24 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Most documents in one `/v2/rerank` call (Cohere recommends at most 1,000); they are
    /// asked in batches of `--max-questions`.
    #[arg(long, env = "SYSTEMONE_MAX_RERANK_DOCUMENTS", default_value_t = 1000)]
    pub max_rerank_documents: usize,
    /// Most images in one request (`images` entries plus `assets` entries).
    #[arg(long, env = "SYSTEMONE_MAX_IMAGES", default_value_t = 4)]
    pub max_images: usize,
    /// Most bytes in one image, decoded.
    #[arg(long, env = "SYSTEMONE_MAX_IMAGE_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_image_bytes: usize,
    /// Most bytes in all images of one request together, decoded.
    #[arg(long, env = "SYSTEMONE_MAX_IMAGE_TOTAL_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_image_total_bytes: usize,
}

impl Default for Limits {
    /// The `--max-*` flags' defaults (the contract's limits).
    fn default() -> Self {
        clap_defaults()
    }
}

/// How the service treats its backends, process-wide.
#[derive(Debug, Clone, Args)]
pub struct UpstreamSettings {
    /// Most upstream requests in flight across the whole process; callers wait beyond it.
    #[arg(long, env = "SYSTEMONE_MAX_IN_FLIGHT", default_value_t = 16)]
    pub max_in_flight: usize,
    /// Seconds one upstream read may take (504 `system_one_upstream_timeout`).
    #[arg(long, env = "SYSTEMONE_READ_TIMEOUT_SECS", default_value_t = 30.0)]
    pub read_timeout_secs: f64,
    /// Seconds one whole request may take, waiting for slots included (504 `system_one_deadline_exceeded`).
    #[arg(long, env = "SYSTEMONE_REQUEST_TIMEOUT_SECS", default_value_t = 120.0)]
    pub request_timeout_secs: f64,
    /// Seconds to wait for a TCP connection to a backend.
    #[arg(long, env = "SYSTEMONE_CONNECT_TIMEOUT_SECS", default_value_t = 5.0)]
    pub connect_timeout_secs: f64,
    /// Seconds one live token-table check may take before it counts as inconclusive.
    #[arg(
        long,
        env = "SYSTEMONE_TOKEN_CHECK_TIMEOUT_SECS",
        default_value_t = DEFAULT_TOKEN_CHECK_TIMEOUT_SECS
    )]
    pub token_check_timeout_secs: f64,
}

impl Default for UpstreamSettings {
    /// The flags' defaults.
    fn default() -> Self {
        clap_defaults()
    }
}

impl UpstreamSettings {
    /// The per-read timeout.
    pub fn read_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.read_timeout_secs)
    }
    /// The whole-request deadline.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.request_timeout_secs)
    }
    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.connect_timeout_secs)
    }
    /// The bound on one live token-table check.
    pub fn token_check_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.token_check_timeout_secs)
    }
}

/// Callers and backends at the gateway: API keys, the circuit breaker, shutdown.
#[derive(Debug, Clone, Args)]
pub struct GatewaySettings {
    /// TOML file of API keys (`[[key]]` with `name`, `sha256` or `key_env`, and optional
    /// `requests_per_minute`, `questions_per_minute`, `daily_questions`). With neither this
    /// nor `--api-keys` the service is open: any bearer, or none, is accepted.
    #[arg(long, env = "SYSTEMONE_KEYS_FILE")]
    pub keys_file: Option<PathBuf>,

    /// Comma-separated API keys (named `key-1`, `key-2`, … in logs and metrics), without
    /// limits. Prefer the env variable: a flag shows in the process list.
    #[arg(long, env = "SYSTEMONE_API_KEYS", hide_env_values = true)]
    pub api_keys: Option<Secret>,

    /// Percentage of a backend's requests over the last `--circuit-window-secs` that failed
    /// (429, 5xx, timeouts, unreachable) at which its circuit breaker opens, once the window
    /// holds `--circuit-min-calls` requests; 0 turns the breaker off. A rate, not a run of
    /// failures: faults that land together (read timeouts after a stall) are judged
    /// against the requests around them.
    #[arg(long, env = "SYSTEMONE_CIRCUIT_FAILURE_RATE", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub circuit_failure_rate: u8,

    /// Requests (that succeeded or failed) the window must hold before its failure rate can
    /// open the circuit, so that a few early failures are not a rate.
    #[arg(long, env = "SYSTEMONE_CIRCUIT_MIN_CALLS", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub circuit_min_calls: u32,

    /// Seconds of a backend's most recent outcomes the failure rate is taken over (a
    /// sliding window in tenths); older outcomes drop out.
    #[arg(long, env = "SYSTEMONE_CIRCUIT_WINDOW_SECS", default_value_t = 10.0, value_parser = window_seconds)]
    pub circuit_window_secs: f64,

    /// Seconds an open circuit refuses requests (503 `system_one_circuit_open`) before one
    /// probe request is let through.
    #[arg(long, env = "SYSTEMONE_CIRCUIT_COOLDOWN_SECS", default_value_t = 10.0, value_parser = seconds)]
    pub circuit_cooldown_secs: f64,

    /// Seconds in-flight requests may take to finish after SIGTERM or ctrl-c (new
    /// connections are refused at once); the process exits when they are done or this ends.
    #[arg(long, env = "SYSTEMONE_SHUTDOWN_GRACE_SECS", default_value_t = 30.0)]
    pub shutdown_grace_secs: f64,
}

/// How the edge treats client connections (`src/http/edge/`): deadlines, caps, head
/// limits. A timeout of 0 turns that rule off.
#[derive(Debug, Clone, Args)]
pub struct EdgeSettings {
    /// Seconds a client may take to send a request's head (method, path, headers), from
    /// its first byte (or from connecting, for the first request); then 408
    /// `system_one_request_timeout` and the connection is closed.
    #[arg(long, env = "SYSTEMONE_HEADER_READ_TIMEOUT_SECS", default_value_t = 10.0, value_parser = seconds)]
    pub header_read_timeout_secs: f64,

    /// Seconds a client may take to send a request's body, from the end of its head; then
    /// 408 `system_one_request_timeout`.
    #[arg(long, env = "SYSTEMONE_BODY_READ_TIMEOUT_SECS", default_value_t = 30.0, value_parser = seconds)]
    pub body_read_timeout_secs: f64,

    /// Seconds a keep-alive connection may sit idle between requests before it is closed
    /// (without a response: none is due).
    #[arg(long, env = "SYSTEMONE_IDLE_TIMEOUT_SECS", default_value_t = 60.0, value_parser = seconds)]
    pub idle_timeout_secs: f64,

    /// Most client connections open at once. A connection beyond it is answered 503
    /// `system_one_overloaded` with `Retry-After` and closed; open ones are served as usual.
    #[arg(long, env = "SYSTEMONE_MAX_CONNECTIONS", default_value_t = 4096, value_parser = at_least_one)]
    pub max_connections: usize,

    /// Most API requests (`/v1`, `/v2`) being handled at once, waiting for upstream slots
    /// included; beyond it a request is answered 503 `system_one_overloaded` with
    /// `Retry-After` at once rather than queued. Health, readiness and metrics are not
    /// counted, so an operator can still look in.
    #[arg(long, env = "SYSTEMONE_MAX_CONCURRENT_REQUESTS", default_value_t = 512, value_parser = at_least_one)]
    pub max_concurrent_requests: usize,

    /// MiB that request bodies being decompressed and parsed may hold together (the wire
    /// bytes, the decoded bytes and the parsed JSON, estimated). A 23 KB gzip body can
    /// expand to the whole body limit and parse to more, so without a shared cap 512
    /// concurrent requests could ask for tens of GB. A request that cannot get its share
    /// waits for it up to `--body-read-timeout-secs`, then gets 503 `system_one_overloaded`
    /// with `Retry-After`. 1024 MiB leaves room for about 20 bodies at the 24 MiB limit
    /// (each its text and its value) at once and keeps the service under 1 GB on a
    /// machine it shares with the model server.
    #[arg(long, env = "SYSTEMONE_MAX_BODY_MEMORY_MB", default_value_t = 1024, value_parser = at_least_one)]
    pub max_body_memory_mb: usize,

    /// Most bytes of one request head (request line and headers); beyond it 431
    /// `system_one_headers_too_large`.
    #[arg(long, env = "SYSTEMONE_MAX_HEADER_BYTES", default_value_t = 32 * 1024, value_parser = at_least_one)]
    pub max_header_bytes: usize,

    /// Most header lines in one request head; beyond it 431 `system_one_headers_too_large`.
    #[arg(long, env = "SYSTEMONE_MAX_HEADERS", default_value_t = 100, value_parser = at_least_one)]
    pub max_headers: usize,
}

impl Default for EdgeSettings {
    /// The flags' defaults.
    fn default() -> Self {
        clap_defaults()
    }
}

impl EdgeSettings {
    /// The head deadline (`None`: off).
    pub fn header_read_timeout(&self) -> Option<Duration> {
        deadline(self.header_read_timeout_secs)
    }
    /// The body deadline (`None`: off).
    pub fn body_read_timeout(&self) -> Option<Duration> {
        deadline(self.body_read_timeout_secs)
    }
    /// The idle keep-alive deadline (`None`: off).
    pub fn idle_timeout(&self) -> Option<Duration> {
        deadline(self.idle_timeout_secs)
    }
}

/// A timeout flag as a deadline: 0 is off. The flag's parser has already refused
/// negative, non-finite and absurd values.
fn deadline(secs: f64) -> Option<Duration> {
    (secs > 0.0).then(|| Duration::from_secs_f64(secs))
}

/// Parses a count that must be at least 1 (a cap of 0 would refuse everything).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// Parses a window in seconds: like [`seconds`], but more than 0 (an empty window would
/// hold no outcome to judge).
fn window_seconds(text: &str) -> Result<f64, String> {
    match seconds(text)? {
        secs if secs > 0.0 => Ok(secs),
        _ => Err(format!("{text:?} is not more than 0 seconds")),
    }
}

/// Parses a timeout in seconds: finite, 0 (off) up to a day.
fn seconds(text: &str) -> Result<f64, String> {
    const DAY: f64 = 86_400.0;
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if secs.is_finite() && (0.0..=DAY).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!("{secs} is outside 0 (off) to {DAY} seconds"))
    }
}

impl GatewaySettings {
    /// The circuit breaker's thresholds.
    pub fn circuit(&self) -> CircuitSettings {
        CircuitSettings {
            failure_rate: self.circuit_failure_rate.min(100),
            min_calls: self.circuit_min_calls.max(1),
            window: Duration::from_secs_f64(self.circuit_window_secs),
            cooldown: Duration::from_secs_f64(self.circuit_cooldown_secs),
        }
    }

    /// The bound on finishing in-flight requests at shutdown.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs_f64(self.shutdown_grace_secs.max(0.0))
    }
}

/// What the limits do when the shared store (Redis) is down or slower than its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum FailurePolicy {
    /// Serve, counting the key's limits in this process until the store answers again
    /// (a key may then get up to its quota once per replica).
    #[default]
    #[value(name = "fail_open")]
    FailOpen,
    /// Refuse with 503 `system_one_limits_unavailable` and `Retry-After`.
    #[value(name = "fail_closed")]
    FailClosed,
}

impl FailurePolicy {
    /// The name in flags, logs, metrics and `/readyz`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::FailOpen => "fail_open",
            FailurePolicy::FailClosed => "fail_closed",
        }
    }
}

/// Where the per-key limits, daily caps and usage records live (memory by default).
#[derive(Debug, Clone, Args)]
pub struct LimitStoreSettings {
    /// Redis shared by every replica, `redis://[user:password@]host:port[/db]` (or
    /// `redis_url` in the `--config` registry): per-minute limits, daily caps and usage are
    /// counted there. Redacted in every log and `Debug`.
    #[arg(long, env = "SYSTEMONE_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<Secret>,

    /// Prefix of every Redis key this service writes (one per deployment sharing a Redis).
    #[arg(long, env = "SYSTEMONE_REDIS_PREFIX", default_value = "systemone")]
    pub redis_prefix: String,

    /// Directory of the embedded store (`limits.redb`) for a single instance: daily caps and
    /// usage survive a restart. Not with `--redis-url`.
    #[arg(long, env = "SYSTEMONE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,

    /// Milliseconds one call to Redis may take before the failure policy applies.
    #[arg(long, env = "SYSTEMONE_LIMITS_TIMEOUT_MS", default_value_t = 50)]
    pub limits_timeout_ms: u64,

    /// What to do when Redis is down or slow: `fail_open` (serve, count in this process)
    /// or `fail_closed` (503 `system_one_limits_unavailable`).
    #[arg(long, env = "SYSTEMONE_LIMITS_POLICY", value_enum, default_value_t = FailurePolicy::FailOpen)]
    pub limits_policy: FailurePolicy,

    /// The configured key name that may read every key's usage (`GET /v1/usage`); other
    /// keys read only their own.
    #[arg(long, env = "SYSTEMONE_ADMIN_KEY")]
    pub admin_key: Option<String>,
}

impl Default for LimitStoreSettings {
    /// The flags' defaults: in memory, `fail_open`, 50 ms.
    fn default() -> Self {
        clap_defaults()
    }
}

impl LimitStoreSettings {
    /// The bound on one Redis call.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.limits_timeout_ms.max(1))
    }
}

/// Where the decision ledger is kept: `sqlite:PATH`, `postgres://…` or `off`.
#[derive(Clone, PartialEq, Eq)]
pub enum LedgerTarget {
    /// No ledger: nothing is recorded.
    Off,
    /// The default: an embedded SQLite file, `ledger.sqlite` under `--state-dir` (else the
    /// user's state directory, see [`LedgerSettings::target`]).
    Default,
    /// An embedded SQLite file at this path.
    Sqlite(PathBuf),
    /// A PostgreSQL URL (redacted in `Debug`: it may hold a password).
    Postgres(Secret),
}

impl std::fmt::Debug for LedgerTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerTarget::Off => f.write_str("off"),
            LedgerTarget::Default => f.write_str("default"),
            LedgerTarget::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            LedgerTarget::Postgres(_) => f.write_str("postgres://[redacted]"),
        }
    }
}

impl std::str::FromStr for LedgerTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "off" {
            return Ok(LedgerTarget::Off);
        }
        if s == "default" {
            return Ok(LedgerTarget::Default);
        }
        if let Some(path) = s.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err("sqlite: needs a file path (sqlite:PATH)".into());
            }
            return Ok(LedgerTarget::Sqlite(PathBuf::from(path)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(LedgerTarget::Postgres(Secret::new(s)));
        }
        Err("expected off, sqlite:PATH or postgres://… (the value is not repeated: it may hold a password)".into())
    }
}

/// Whether the ledger keeps the request body itself (`--ledger-inputs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LedgerInputs {
    /// Keyed hashes of the caller's text only: names, labels and the body.
    #[default]
    #[value(name = "hashes")]
    Hashes,
    /// The validated request too (state, questions, labels): only where the operator may
    /// keep callers' content.
    #[value(name = "full")]
    Full,
}

/// The decision ledger: a record per answered or refused request, durable before the
/// answer leaves (README "Decision ledger").
#[derive(Debug, Clone, Args)]
pub struct LedgerSettings {
    /// Where decisions are recorded: `sqlite:PATH`, `postgres://…` (many replicas; needs
    /// `SYSTEMONE_LEDGER_KEY`) or `off` [default: `ledger.sqlite` under `--state-dir`,
    /// else under `$XDG_STATE_HOME/systemone` or `~/.local/state/systemone`].
    #[arg(
        long,
        env = "SYSTEMONE_LEDGER",
        hide_env_values = true,
        default_value = "default",
        hide_default_value = true
    )]
    pub ledger: LedgerTarget,

    /// Milliseconds a request waits for its record to be committed before the ledger
    /// policy applies.
    #[arg(long, env = "SYSTEMONE_LEDGER_TIMEOUT_MS", default_value_t = 1000)]
    pub ledger_timeout_ms: u64,

    /// What to do when the ledger is down or slower than its timeout: `fail_closed` (503
    /// `system_one_ledger_unavailable`: nothing is answered that is not on record) or
    /// `fail_open` (answer, and count the miss).
    #[arg(long, env = "SYSTEMONE_LEDGER_POLICY", value_enum, default_value_t = FailurePolicy::FailClosed)]
    pub ledger_policy: FailurePolicy,

    /// Microseconds the group-commit writer waits, when more than one record is waiting,
    /// for more to join the batch before it writes (PostgreSQL's `commit_delay`, with one
    /// sibling): fewer, larger commits for less CPU per answer under load, at up to this
    /// much added latency. A lone record never waits; 0 writes at once. 500 was the best of
    /// 0, 500 and 2000 at 64 callers on CPU and p50 alike (docs/benchmarks.md).
    #[arg(long, env = "SYSTEMONE_LEDGER_COMMIT_DELAY_US", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub ledger_commit_delay_us: u64,

    /// Days a record is kept; older ones are deleted in the background (0 keeps them all).
    #[arg(long, env = "SYSTEMONE_LEDGER_RETENTION_DAYS", default_value_t = 400)]
    pub ledger_retention_days: u64,

    /// `hashes` (keyed hashes of names, labels and the body) or `full` (the validated
    /// request too, kept `--ledger-inputs-retention-days`).
    #[arg(long, env = "SYSTEMONE_LEDGER_INPUTS", value_enum, default_value_t = LedgerInputs::Hashes)]
    pub ledger_inputs: LedgerInputs,

    /// Days the full inputs (`--ledger-inputs full`) are kept before they are erased from
    /// their records (the hashes stay).
    #[arg(
        long,
        env = "SYSTEMONE_LEDGER_INPUTS_RETENTION_DAYS",
        default_value_t = 30
    )]
    pub ledger_inputs_retention_days: u64,

    /// The key of the ledger's keyed hashes (HMAC-SHA256). Without it the embedded ledger
    /// makes one and keeps it beside its file (`ledger.key`); PostgreSQL refuses to start
    /// without it (replicas must hash alike). Redacted in every log and `Debug`.
    #[arg(long, env = "SYSTEMONE_LEDGER_KEY", hide_env_values = true)]
    pub ledger_key: Option<Secret>,

    /// How often the retention sweep runs (at startup, then on this interval). Not a flag:
    /// hourly in a service; tests shorten it to see a sweep happen.
    #[arg(skip = LEDGER_RETENTION_EVERY)]
    pub ledger_retention_every: Duration,
}

/// The retention sweep's interval in a service.
pub const LEDGER_RETENTION_EVERY: Duration = Duration::from_secs(3_600);

impl Default for LedgerSettings {
    /// The flags' defaults: the embedded file, `fail_closed`, 1 s, 400 days.
    fn default() -> Self {
        clap_defaults()
    }
}

impl LedgerSettings {
    /// The bound on one request's wait for its record.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.ledger_timeout_ms.max(1))
    }

    /// How long the writer waits for a batch to fill (`--ledger-commit-delay-us`).
    pub fn commit_delay(&self) -> Duration {
        Duration::from_micros(self.ledger_commit_delay_us)
    }

    /// The ledger to open: `--ledger`, the default resolved against `state_dir` and the
    /// user's state directory (`None`: off).
    pub fn target(&self, state_dir: Option<&std::path::Path>) -> Result<LedgerTarget, ConfigError> {
        if self.ledger != LedgerTarget::Default {
            return Ok(self.ledger.clone());
        }
        let dir = match state_dir {
            Some(dir) => dir.to_path_buf(),
            None => user_state_dir().ok_or_else(|| {
                ConfigError::Invalid(
                    "--ledger: neither --state-dir, XDG_STATE_HOME nor HOME is set; name a file (sqlite:PATH) or say off".into(),
                )
            })?,
        };
        Ok(LedgerTarget::Sqlite(dir.join("ledger.sqlite")))
    }
}

/// `$XDG_STATE_HOME/systemone`, else `$HOME/.local/state/systemone`.
fn user_state_dir() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(state) = non_empty("XDG_STATE_HOME") {
        return Some(PathBuf::from(state).join("systemone"));
    }
    non_empty("HOME").map(|home| PathBuf::from(home).join(".local/state/systemone"))
}

/// When a circuit opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitSettings {
    /// The percentage (1–100) of failed requests in the window that opens the circuit;
    /// 0 turns the breaker off.
    pub failure_rate: u8,
    /// Requests the window must hold before its rate is judged (at least 1).
    pub min_calls: u32,
    /// How far back the window reaches.
    pub window: Duration,
    /// How long an open circuit refuses requests before letting a probe through.
    pub cooldown: Duration,
}

impl Default for CircuitSettings {
    /// The `--circuit-*` flags' defaults.
    fn default() -> Self {
        clap_defaults::<GatewaySettings>().circuit()
    }
}

/// One model: a `[[model]]` of the TOML registry, or the one model the flags describe when
/// no `--config` file is given (the same struct: each field's flag and TOML key side by
/// side, with the same defaults). A field without a flag (`#[arg(skip)]`) is for the
/// registry only; one without a TOML key (`#[serde(skip)]`) for the flags only. Checks
/// across fields are in [`ModelConfig::check`].
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Public model name callers use.
    #[arg(
        long = "model",
        value_name = "MODEL",
        env = "SYSTEMONE_MODEL",
        default_value = "gemma-3-270m"
    )]
    pub name: String,

    /// Extra public names for the model (`jev-latest` always names the default model).
    #[arg(long = "alias", env = "SYSTEMONE_ALIASES", value_delimiter = ',')]
    #[serde(default)]
    pub aliases: Vec<String>,

    /// Whether this is the default model of the registry (the first model is, when none
    /// says so); the flags' one model always is.
    #[arg(skip = true)]
    #[serde(default)]
    pub default: bool,

    /// Backend dialect. The default is the embedded local backend: llama.cpp's
    /// `llama-server` with Gemma 3 270M, started by `scripts/run-local.sh`.
    #[arg(long, env = "SYSTEMONE_BACKEND", value_enum, default_value_t = BackendKind::Llamacpp)]
    pub backend: BackendKind,

    /// Backend base URL, ending in `/v1`.
    #[arg(
        long,
        env = "SYSTEMONE_BACKEND_URL",
        default_value = "http://127.0.0.1:8081/v1"
    )]
    pub backend_url: String,

    /// The backend's id for the model (defaults to `--model`).
    #[arg(long, env = "SYSTEMONE_UPSTREAM_MODEL")]
    pub upstream_model: Option<String>,

    /// Registry only: other models of the registry that serve this model's requests while
    /// this model's circuit breaker is open, in order (a name, or a list): the first whose
    /// circuit admits, following each one's own fallbacks (the answer's `model` then names
    /// the one that served it). A loop is refused at startup.
    #[arg(skip)]
    #[serde(default)]
    pub fallback: Option<OneOrMany>,

    /// Registry only: the model that answers again the questions this model answered with
    /// low confidence (`escalate_below`, or `escalate_when`), all of them in one request.
    #[arg(skip)]
    #[serde(default)]
    pub escalate_to: Option<String>,

    /// Registry only: escalate an answer whose `confidence` is under this (0 < x ≤ 1).
    #[arg(skip)]
    #[serde(default)]
    pub escalate_below: Option<f64>,

    /// Registry only: escalate an answer by its calibration profile (`not_automate`).
    #[arg(skip)]
    #[serde(default)]
    pub escalate_when: Option<EscalateWhen>,

    /// Registry only: when the escalation model fails, fail the request (else it is
    /// answered with the first answers and `x-systemone-escalation: failed`).
    #[arg(skip)]
    #[serde(default)]
    pub escalate_required: bool,

    /// The native server's flavor (`--backend systemone` only): `typesafe` (the default;
    /// also another `systemone`), `ollama` or `vllm`.
    #[arg(long, env = "SYSTEMONE_FLAVOR", value_enum, default_value_t = Flavor::Typesafe)]
    #[serde(default)]
    pub flavor: Flavor,

    /// Ollama's `keep_alive` (`--backend systemone --flavor ollama` only), sent with every
    /// request; a caller's `keep_alive` is never forwarded.
    #[arg(long, env = "SYSTEMONE_KEEP_ALIVE")]
    #[serde(default)]
    pub keep_alive: Option<String>,

    /// Registry only: the environment variable holding the backend API key (the file
    /// never holds keys).
    #[arg(skip)]
    pub backend_api_key_env: Option<String>,

    /// API key sent to the backend as a bearer token (never logged). In the registry it
    /// is resolved from `backend_api_key_env`, never read from the file.
    #[arg(long, env = "SYSTEMONE_BACKEND_API_KEY", hide_env_values = true)]
    #[serde(skip)]
    pub backend_api_key: Option<Secret>,

    /// Token table: a file path, the name of a table shipped in `token-tables/`, or `auto`:
    /// built at startup from the tokenizer the backend serves (vllm, llamacpp), with the
    /// rules of `systemone tokens build`, and rebuilt when a check finds it changed (the
    /// default; an `openai` host, which serves no tokenizer, needs a table).
    #[arg(long, env = "SYSTEMONE_TOKEN_TABLE", default_value = AUTO_TABLE)]
    #[serde(default = "default_token_table")]
    pub token_table: String,

    /// Calibration file (`a`, `b` of `ln T = a + b·ln n`): a path or a shipped name.
    /// Without one, the reference's GLM-5.3-Flash formula applies.
    #[arg(long, env = "SYSTEMONE_CALIBRATION")]
    pub calibration: Option<String>,

    /// Default prompt layout for the model (a request's `layout` overrides it).
    #[arg(long, env = "SYSTEMONE_LAYOUT", value_enum, default_value_t = Layout::Accuracy)]
    #[serde(default)]
    pub layout: Layout,

    /// Option orders each question is asked in when a request does not say (1 to 8; a
    /// request's own `permutations` overrides it). Each order is one more read; their
    /// average cancels the model's preference for a label position, so a second
    /// `systemone` over the same backend with `--permutations 2` or more is a stronger
    /// native upstream to escalate to.
    #[arg(long, env = "SYSTEMONE_PERMUTATIONS", default_value_t = 1)]
    #[serde(default = "default_permutations")]
    pub permutations: usize,

    /// Labels for questions with more options than the single-token labels.
    #[arg(long, env = "SYSTEMONE_LABEL_SCHEME", value_enum, default_value_t = LabelScheme::Numerals)]
    #[serde(default)]
    pub label_scheme: LabelScheme,

    /// The model's `tokenizer.json`: token limits are then counted exactly, and the token
    /// table is checked against it at startup. Without it, limits use a byte estimate.
    #[arg(long, env = "SYSTEMONE_TOKENIZER")]
    pub tokenizer: Option<String>,

    /// Seconds between live checks of the token table against the serving tokenizer
    /// (0 turns the check off, for backends that cannot tokenize; always off with
    /// `--backend openai`, whose probe checks the label ids it sees instead).
    #[arg(
        long,
        env = "SYSTEMONE_TOKEN_CHECK_INTERVAL_SECS",
        default_value_t = DEFAULT_TOKEN_CHECK_INTERVAL_SECS
    )]
    #[serde(default = "default_check_interval")]
    pub token_check_interval_secs: u64,

    /// Let the backend reuse its prefix cache (llama.cpp `cache_prompt`). A cached prefix
    /// can move llama.cpp's probabilities slightly; turn off for bit-exact comparisons.
    #[arg(long, env = "SYSTEMONE_CACHE_PROMPT", default_value_t = true, action = clap::ArgAction::Set)]
    #[serde(default = "default_true")]
    pub cache_prompt: bool,

    /// Send `chat_template_kwargs: {"enable_thinking": false}` (Qwen 3 style thinking models).
    #[arg(long, env = "SYSTEMONE_DISABLE_THINKING")]
    #[serde(default)]
    pub disable_thinking: bool,

    /// Most token ids read in one upstream request (vLLM deployments cap this at 128; the
    /// `openai` dialect takes its cap from its probe instead).
    #[arg(long, env = "SYSTEMONE_MAX_IDS_PER_READ", default_value_t = DEFAULT_MAX_IDS_PER_READ)]
    #[serde(default = "default_max_ids")]
    pub max_ids_per_read: usize,

    /// The model reads images: requests may carry `images` / `assets`, sent to the backend
    /// as `image_url` parts. Without it any image is a 422 `system_one_images_unsupported`.
    #[arg(long, env = "SYSTEMONE_VISION")]
    #[serde(default)]
    pub vision: bool,

    /// The model's release date (`YYYY-MM-DD`), listed by `/v1/models`; `unknown` without it.
    #[arg(long, env = "SYSTEMONE_RELEASE_DATE")]
    #[serde(default)]
    pub release_date: Option<String>,

    /// The yes/no question `/v2/rerank` asks of each document (the instructions of its
    /// noul); callers cannot change it.
    #[arg(long, env = "SYSTEMONE_RERANK_QUESTION", default_value = DEFAULT_RERANK_QUESTION)]
    #[serde(default = "default_rerank_question")]
    pub rerank_question: String,
}

impl ModelConfig {
    /// The checks across this model's fields (those across models, fallbacks and names,
    /// are the registry's, in `Models::new`).
    pub fn check(&self) -> Result<(), ConfigError> {
        let invalid = |e: String| ConfigError::Invalid(format!("model {}: {e}", self.name));
        if let Some(date) = &self.release_date {
            checked_date(date).map_err(invalid)?;
        }
        if !(1..=MAX_PERMUTATIONS).contains(&self.permutations) {
            return Err(invalid(format!(
                "permutations must be from 1 to {MAX_PERMUTATIONS}, got {}",
                self.permutations
            )));
        }
        self.check_escalation().map_err(invalid)
    }

    /// `escalate_to` with exactly one rule (`escalate_below` in (0, 1], or
    /// `escalate_when`), and neither rule without it.
    fn check_escalation(&self) -> Result<(), String> {
        let rules =
            usize::from(self.escalate_below.is_some()) + usize::from(self.escalate_when.is_some());
        match (&self.escalate_to, rules) {
            (None, 0) if !self.escalate_required => Ok(()),
            (None, _) => {
                Err("escalate_below, escalate_when and escalate_required need escalate_to".into())
            }
            (Some(_), 0) => Err("escalate_to needs escalate_below or escalate_when".into()),
            (Some(_), 2) => Err("escalate_below and escalate_when cannot both be set".into()),
            (Some(_), _) => match self.escalate_below {
                Some(x) if !(x > 0.0 && x <= 1.0) => Err(format!(
                    "escalate_below must be a confidence in (0, 1], got {x}"
                )),
                _ => Ok(()),
            },
        }
    }

    /// Time between live token-table checks: the configured interval, except that plain
    /// OpenAI has no tokenizer endpoint (the `openai` dialect's probe checks the label ids
    /// it sees instead).
    pub fn token_check_interval(&self) -> Duration {
        match self.backend {
            BackendKind::Openai | BackendKind::Systemone => Duration::ZERO,
            BackendKind::Vllm | BackendKind::Llamacpp => {
                Duration::from_secs(self.token_check_interval_secs)
            }
        }
    }
}

/// `date` when it is written `YYYY-MM-DD` with month 01–12 and day 01–31 (what the SDKs
/// expect).
fn checked_date(date: &str) -> Result<(), String> {
    let b = date.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let shaped = b.len() == 10 && b[4] == b'-' && b[7] == b'-';
    let ok = shaped && digits(0..4) && digits(5..7) && digits(8..10) && {
        let (month, day) = (&date[5..7], &date[8..10]);
        ("01"..="12").contains(&month) && ("01"..="31").contains(&day)
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "release_date must be a date written YYYY-MM-DD, got {date:?}"
        ))
    }
}

fn default_token_table() -> String {
    AUTO_TABLE.to_string()
}

fn default_rerank_question() -> String {
    DEFAULT_RERANK_QUESTION.to_string()
}

fn default_true() -> bool {
    true
}

fn default_permutations() -> usize {
    1
}

fn default_max_ids() -> usize {
    DEFAULT_MAX_IDS_PER_READ
}

fn default_check_interval() -> u64 {
    DEFAULT_TOKEN_CHECK_INTERVAL_SECS
}

/// The TOML file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryFile {
    /// The models, in the order `/v1/models` lists them.
    pub model: Vec<ModelConfig>,
    /// Redis for the per-key limits and usage (`--redis-url` overrides it).
    #[serde(default)]
    pub redis_url: Option<Secret>,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

impl ServeConfig {
    /// The models to serve: the TOML registry when `--config` is given, else the flags' one.
    pub fn model_configs(&self) -> Result<Vec<ModelConfig>, ConfigError> {
        match &self.config {
            Some(path) => load_registry(path),
            None => Ok(vec![ModelConfig {
                default: true,
                ..self.model.clone()
            }]),
        }
    }
}

impl ServeConfig {
    /// The Redis URL for the limits: `--redis-url` / `SYSTEMONE_REDIS_URL`, else the
    /// registry's `redis_url`, else none.
    pub fn redis_url(&self) -> Result<Option<Secret>, ConfigError> {
        if let Some(url) = &self.limit_store.redis_url {
            return Ok(Some(url.clone()));
        }
        match &self.config {
            Some(path) => Ok(read_registry(path)?.redis_url),
            None => Ok(None),
        }
    }
}

/// Reads and parses a registry file.
fn read_registry(path: &std::path::Path) -> Result<RegistryFile, ConfigError> {
    let err = |reason: String| ConfigError::File {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    toml::from_str(&text).map_err(|e| err(e.to_string()))
}

/// Reads a `[[model]]` registry and resolves each model's key from its env variable.
pub fn load_registry(path: &std::path::Path) -> Result<Vec<ModelConfig>, ConfigError> {
    let err = |reason: String| ConfigError::File {
        path: path.display().to_string(),
        reason,
    };
    let file = read_registry(path)?;
    if file.model.is_empty() {
        return Err(err("no [[model]] entries".into()));
    }
    let mut models = file.model;
    for m in &mut models {
        if let Some(var) = &m.backend_api_key_env {
            m.backend_api_key = std::env::var(var).ok().map(Secret::new);
        }
    }
    Ok(models)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `systemone serve` as the binary parses it (the serve flags are flattened there).
    #[derive(Debug, clap::Parser)]
    struct Serve {
        #[command(flatten)]
        config: ServeConfig,
    }

    fn serve_flags(flags: &[&str]) -> ServeConfig {
        use clap::Parser;
        let args = ["systemone"].iter().chain(flags);
        Serve::try_parse_from(args).expect("parses").config
    }

    #[test]
    fn escalation_needs_a_target_and_exactly_one_rule() {
        let base = serve_flags(&[]).model;
        let with =
            |to: Option<&str>, below: Option<f64>, when: Option<EscalateWhen>, required: bool| {
                ModelConfig {
                    escalate_to: to.map(String::from),
                    escalate_below: below,
                    escalate_when: when,
                    escalate_required: required,
                    ..base.clone()
                }
                .check()
                .map_err(|e| e.to_string())
            };
        let not_automate = Some(EscalateWhen::NotAutomate);
        assert!(with(None, None, None, false).is_ok());
        assert!(with(Some("b"), Some(0.4), None, true).is_ok());
        assert!(with(Some("b"), None, not_automate, false).is_ok());
        let cases = [
            (
                with(Some("b"), None, None, false),
                "escalate_to needs escalate_below or escalate_when",
            ),
            (
                with(Some("b"), Some(0.4), not_automate, false),
                "cannot both be set",
            ),
            (
                with(Some("b"), Some(0.0), None, false),
                "escalate_below must be a confidence in (0, 1], got 0",
            ),
            (with(Some("b"), Some(1.5), None, false), "got 1.5"),
            (with(None, Some(0.4), None, false), "need escalate_to"),
            (with(None, None, None, true), "need escalate_to"),
        ];
        for (got, want) in cases {
            let err = got.expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn a_model_default_of_permutations_is_1_to_8() {
        assert_eq!(
            serve_flags(&[]).model.permutations,
            1,
            "the documented default"
        );
        let flags = serve_flags(&["--permutations", "8"]).model;
        assert!(flags.check().is_ok());
        for bad in [0, 9] {
            let err = ModelConfig {
                permutations: bad,
                ..flags.clone()
            }
            .check()
            .expect_err("refused")
            .to_string();
            assert!(
                err.contains(&format!("permutations must be from 1 to 8, got {bad}")),
                "{err}"
            );
        }
    }

    #[test]
    fn release_dates_must_be_written_yyyy_mm_dd() {
        assert_eq!(checked_date("2025-08-14"), Ok(()));
        for bad in [
            "2025-8-14",
            "2025-13-01",
            "2025-00-10",
            "2025-01-32",
            "14.08.2025",
            "",
            "2025-08-1x",
        ] {
            let err = checked_date(bad).expect_err(bad);
            assert!(err.contains("YYYY-MM-DD") && err.contains(bad), "{err}");
        }
    }

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let cfg = serve_flags(&[
            "--backend-api-key",
            "sk-canary-123",
            "--token-table",
            "golden-fake",
        ]);
        let debug = format!("{cfg:?}");
        assert!(!debug.contains("sk-canary-123"), "{debug}");
        assert!(debug.contains("[redacted]"));
        let model = cfg.model_configs().expect("one model");
        assert!(!format!("{model:?}").contains("sk-canary-123"));
        assert_eq!(
            model[0].backend_api_key.as_ref().map(Secret::expose),
            Some("sk-canary-123")
        );
    }

    #[test]
    fn defaults_match_the_contract() {
        let cfg = serve_flags(&[]);
        assert_eq!(cfg.upstream.max_in_flight, 16);
        assert_eq!(cfg.upstream.read_timeout(), Duration::from_secs(30));
        assert_eq!(cfg.upstream.request_timeout(), Duration::from_secs(120));
        assert_eq!(cfg.limits.max_body_bytes, 24 * 1024 * 1024);
        assert_eq!(cfg.model.max_ids_per_read, 128);
        assert_eq!(cfg.model.rerank_question, DEFAULT_RERANK_QUESTION);
        assert_eq!(cfg.limits.max_rerank_documents, 1000);
    }

    #[test]
    fn defaults_are_the_flags_defaults() {
        let cfg = serve_flags(&[]);
        let limits = Limits::default();
        assert_eq!(limits.max_questions, 64);
        assert_eq!(limits.max_options, 255);
        assert_eq!(limits.max_state_tokens, cfg.limits.max_state_tokens);
        assert_eq!(limits.max_image_total_bytes, 8 * 1024 * 1024);
        let upstream = UpstreamSettings::default();
        assert_eq!(upstream.max_in_flight, cfg.upstream.max_in_flight);
        assert_eq!(upstream.token_check_timeout(), Duration::from_secs(30));
        assert_eq!(CircuitSettings::default(), cfg.gateway.circuit());
        assert_eq!(CircuitSettings::default().failure_rate, 50);
    }

    #[test]
    fn gateway_defaults_and_api_keys_are_redacted() {
        let cfg = serve_flags(&[
            "--api-keys",
            "sk-gateway-canary-1,sk-gateway-canary-2",
            "--keys-file",
            "/etc/systemone/keys.toml",
        ]);
        let debug = format!("{cfg:?}");
        assert!(!debug.contains("sk-gateway-canary"), "{debug}");
        assert!(debug.contains("keys.toml"));
        let circuit = cfg.gateway.circuit();
        assert_eq!(
            (circuit.failure_rate, circuit.min_calls),
            (50, 20),
            "{circuit:?}"
        );
        assert_eq!(circuit.window, Duration::from_secs(10));
        assert_eq!(circuit.cooldown, Duration::from_secs(10));
        assert_eq!(cfg.gateway.shutdown_grace(), Duration::from_secs(30));
    }

    #[test]
    fn circuit_flags_outside_their_range_are_refused() {
        use clap::Parser;
        for (flag, value) in [
            ("--circuit-failure-rate", "101"),
            ("--circuit-failure-rate", "-1"),
            ("--circuit-min-calls", "0"),
            ("--circuit-window-secs", "0"),
            ("--circuit-window-secs", "NaN"),
            ("--circuit-cooldown-secs", "inf"),
            ("--circuit-cooldown-secs", "-1"),
        ] {
            let parsed = Serve::try_parse_from(["systemone", flag, value]);
            assert!(parsed.is_err(), "{flag} {value} was accepted");
        }
        let circuit = serve_flags(&[
            "--circuit-failure-rate",
            "0",
            "--circuit-min-calls",
            "1",
            "--circuit-window-secs",
            "0.5",
            "--circuit-cooldown-secs",
            "0",
        ])
        .gateway
        .circuit();
        assert_eq!(
            circuit,
            CircuitSettings {
                failure_rate: 0,
                min_calls: 1,
                window: Duration::from_millis(500),
                cooldown: Duration::ZERO,
            }
        );
    }

    #[test]
    fn the_limit_store_flags_parse_and_the_redis_url_is_redacted() {
        let cfg = serve_flags(&[
            "--redis-url",
            "redis://:hunter2-canary@127.0.0.1:6379/0",
            "--limits-policy",
            "fail_closed",
            "--limits-timeout-ms",
            "20",
        ]);
        let debug = format!("{cfg:?}");
        assert!(!debug.contains("hunter2-canary"), "{debug}");
        assert_eq!(cfg.limit_store.limits_policy, FailurePolicy::FailClosed);
        assert_eq!(cfg.limit_store.timeout(), Duration::from_millis(20));
        let defaults = LimitStoreSettings::default();
        assert_eq!(defaults.limits_policy, FailurePolicy::FailOpen);
        assert_eq!(defaults.timeout(), Duration::from_millis(50));
        assert_eq!(defaults.redis_prefix, "systemone");
        assert!(defaults.redis_url.is_none() && defaults.state_dir.is_none());
        use clap::Parser;
        let bad = Serve::try_parse_from(["systemone", "--limits-policy", "fail-open"]);
        assert!(bad.is_err(), "only fail_open and fail_closed are accepted");
    }

    #[test]
    fn the_registry_may_name_the_redis_url_and_the_flag_wins() {
        let dir = std::env::temp_dir().join(format!("systemone-cfg-redis-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let path = dir.join("models.toml");
        std::fs::write(
            &path,
            "redis_url = \"redis://127.0.0.1:7000\"\n[[model]]\nname = \"a\"\nbackend = \"vllm\"\nbackend_url = \"http://127.0.0.1:1/v1\"\ntoken_table = \"golden-fake\"\n",
        )
        .expect("write");
        let path = path.to_str().expect("utf-8");
        let from_file = serve_flags(&["--config", path]).redis_url().expect("reads");
        assert_eq!(
            from_file.as_ref().map(Secret::expose),
            Some("redis://127.0.0.1:7000")
        );
        let flag = serve_flags(&["--config", path, "--redis-url", "redis://127.0.0.1:7001"])
            .redis_url()
            .expect("reads");
        assert_eq!(
            flag.as_ref().map(Secret::expose),
            Some("redis://127.0.0.1:7001")
        );
        assert_eq!(serve_flags(&[]).redis_url().expect("none"), None);
    }

    #[test]
    fn a_registry_file_describes_several_models() {
        let dir = std::env::temp_dir().join(format!("systemone-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let path = dir.join("models.toml");
        std::fs::write(
            &path,
            r#"
[[model]]
name = "a"
backend = "vllm"
backend_url = "http://127.0.0.1:1/v1"
token_table = "golden-fake"

[[model]]
name = "b"
aliases = ["bee"]
default = true
backend = "vllm"
backend_url = "http://127.0.0.1:2/v1"
upstream_model = "org/b"
token_table = "golden-fake"
layout = "cost"
permutations = 4
label_scheme = "letters"
rerank_question = "Does the document answer the query?"
fallback = "a"

[[model]]
name = "c"
backend = "systemone"
flavor = "ollama"
keep_alive = "5m"
backend_url = "http://127.0.0.1:3/v1"
fallback = ["a", "b"]
escalate_to = "b"
escalate_below = 0.5
"#,
        )
        .expect("write");
        let models = load_registry(&path).expect("loads");
        assert_eq!(models.len(), 3);
        assert_eq!(models[1].fallback, Some(OneOrMany::One("a".into())));
        let c = &models[2];
        assert_eq!(
            c.fallback.as_ref().map(OneOrMany::names),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            (c.backend, c.flavor, c.keep_alive.as_deref()),
            (BackendKind::Systemone, Flavor::Ollama, Some("5m"))
        );
        assert_eq!(
            (c.escalate_to.as_deref(), c.escalate_below),
            (Some("b"), Some(0.5))
        );
        assert_eq!(models[0].flavor, Flavor::Typesafe, "the documented default");
        assert_eq!(models[1].layout, Layout::Cost);
        assert_eq!((models[0].permutations, models[1].permutations), (1, 4));
        assert_eq!(models[0].label_scheme, LabelScheme::Numerals);
        assert_eq!(models[1].label_scheme, LabelScheme::Letters);
        assert_eq!(models[1].aliases, vec!["bee".to_string()]);
        assert_eq!(models[0].rerank_question, DEFAULT_RERANK_QUESTION);
        assert_eq!(
            models[1].rerank_question,
            "Does the document answer the query?"
        );
        std::fs::write(&path, "[[model]]\nname = \"a\"\nbogus = 1\n").expect("write");
        assert!(load_registry(&path).is_err());
    }
}
