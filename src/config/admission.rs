//! [`AdmissionSettings`]: API keys (and the tiers and tokens of their file), cache salts, the circuit breaker's flags and the thresholds they make
//! ([`CircuitSettings`]), shutdown.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::parse::{clap_defaults, seconds, window_seconds};
use crate::secret::Secret;

/// Who and what the service admits: API keys (and tokens), cache salts, the circuit
/// breaker, shutdown.
#[derive(Debug, Clone, Args)]
pub struct AdmissionSettings {
    /// TOML file of API keys (`[[key]]` with `name`, `sha256` or `key_env`, and optional
    /// `requests_per_minute`, `questions_per_minute`, `daily_questions`, `tier`, `scopes`),
    /// tiers (`[[tier]]`) and signed tokens (`[jwt]`). With neither keys nor `[jwt]` (here
    /// or through `--api-keys`) the service is open: any bearer, or none, is accepted.
    #[arg(long, env = "SYSTEMONE_KEYS_FILE")]
    pub keys_file: Option<PathBuf>,

    /// Comma-separated API keys (named `key-1`, `key-2`, … in logs and metrics), without
    /// limits. Prefer the env variable: a flag shows in the process list.
    #[arg(long, env = "SYSTEMONE_API_KEYS", hide_env_values = true)]
    pub api_keys: Option<Secret>,

    /// Whether reads sent to a vLLM backend carry a `cache_salt` per tenant (a keyed hash
    /// of the caller's key name or token subject), so that tenants never share prefix-cache
    /// blocks and none can time another's prompts. Only when keys or tokens are configured
    /// (an open service has one tenant); other dialects send no salt.
    #[arg(long, env = "SYSTEMONE_CACHE_SALT", default_value_t = true, action = clap::ArgAction::Set)]
    pub cache_salt: bool,

    /// The key of the cache salts' hash. Unset: one drawn at start-up, so replicas that
    /// share a vLLM salt a tenant differently and share no cache for it; give them one.
    #[arg(long, env = "SYSTEMONE_CACHE_SALT_SECRET", hide_env_values = true)]
    pub cache_salt_secret: Option<Secret>,

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
    /// sliding window in tenths); older outcomes drop out. Keep it longer than
    /// `--read-timeout-secs` (the default is twice the default read timeout): a read that
    /// times out is counted when the timeout ends, so a window shorter than the timeout
    /// never holds more than one wave of a hung backend's failures.
    #[arg(long, env = "SYSTEMONE_CIRCUIT_WINDOW_SECS", default_value_t = 60.0, value_parser = window_seconds)]
    pub circuit_window_secs: f64,

    /// Failures in a row (429, 5xx, timeouts, unreachable, an answer that is not a valid
    /// completion), with no success between, after which one replica of a fleet is taken
    /// out for `--circuit-cooldown-secs` (its circuit opens; its keys go to the next
    /// replica in their order), whatever the window holds: a hung replica is skipped after
    /// this many read timeouts, not after `--circuit-min-calls`. The last replica still in
    /// service is never taken out by this rule (only by the failure rate); a model's single
    /// backend never is. 0 turns the rule off.
    #[arg(long, env = "SYSTEMONE_REPLICA_EJECT_AFTER", default_value_t = 5)]
    pub replica_eject_after: u32,

    /// Seconds an open circuit refuses requests (503 `system_one_circuit_open`) before one
    /// probe request is let through.
    #[arg(long, env = "SYSTEMONE_CIRCUIT_COOLDOWN_SECS", default_value_t = 10.0, value_parser = seconds)]
    pub circuit_cooldown_secs: f64,

    /// Seconds in-flight requests may take to finish after SIGTERM or ctrl-c (new
    /// connections are refused at once); the process exits when they are done or this ends.
    #[arg(long, env = "SYSTEMONE_SHUTDOWN_GRACE_SECS", default_value_t = 30.0)]
    pub shutdown_grace_secs: f64,
}

impl AdmissionSettings {
    /// The circuit breaker's thresholds.
    pub fn circuit(&self) -> CircuitSettings {
        CircuitSettings {
            failure_rate: self.circuit_failure_rate.min(100),
            min_calls: self.circuit_min_calls.max(1),
            window: Duration::from_secs_f64(self.circuit_window_secs),
            cooldown: Duration::from_secs_f64(self.circuit_cooldown_secs),
            eject_after: self.replica_eject_after,
        }
    }

    /// The bound on finishing in-flight requests at shutdown.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs_f64(self.shutdown_grace_secs.max(0.0))
    }
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
    /// Failures in a row that open a replica's circuit (0: off; a model's own backend
    /// ignores it).
    pub eject_after: u32,
}

impl Default for CircuitSettings {
    /// The `--circuit-*` flags' defaults.
    fn default() -> Self {
        clap_defaults::<AdmissionSettings>().circuit()
    }
}
