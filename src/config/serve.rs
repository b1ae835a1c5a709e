//! [`ServeConfig`]: everything `systemone serve` needs, the flag groups flattened into it.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::batches::BatchSettings;
use super::edge::EdgeSettings;
use super::error::ConfigError;
use super::gateway::GatewaySettings;
use super::ledger::LedgerSettings;
use super::limit_store::LimitStoreSettings;
use super::limits::Limits;
use super::model::ModelConfig;
use super::registry::{load_registry, read_registry};
use super::trace::TraceSettings;
use super::upstream::UpstreamSettings;
use crate::secret::Secret;

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

    /// Directory of calibration profiles (`*.json` from `systemone calibrate profile`)
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

    /// Milliseconds between exchanges of the models' position priors with their store:
    /// `prior.redb` under `--state-dir`, or the `--redis-url` Redis shared by replicas
    /// (docs/calibration/prior.md). Each adds what this process learned since the last and
    /// reads every replica's sums back; samples come a few a minute, so 5 s keeps replicas
    /// within a few samples of each other at a handful of Redis calls per model and shape.
    #[arg(long, env = "SYSTEMONE_PRIOR_SYNC_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub prior_sync_ms: u64,

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

    #[command(flatten)]
    pub batches: BatchSettings,

    #[command(flatten)]
    pub trace: TraceSettings,

    /// Log format (`text` for people, `json` for collectors). Level via `RUST_LOG`.
    #[arg(long, env = "SYSTEMONE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
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
