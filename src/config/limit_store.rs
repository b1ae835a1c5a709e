//! [`LimitStoreSettings`]: where per-key limits and usage live, and the [`FailurePolicy`]
//! when a shared store fails.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::parse::clap_defaults;
use crate::secret::Secret;

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
