//! [`UpstreamSettings`]: how the service treats its backends, process-wide.

use std::time::Duration;

use clap::Args;

use super::parse::clap_defaults;

/// Seconds one live token-table check may take, unless configured.
pub const DEFAULT_TOKEN_CHECK_TIMEOUT_SECS: f64 = 30.0;

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
