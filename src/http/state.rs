//! [`AppState`]: everything handlers share, built once from the serve configuration.

use std::sync::Arc;

use crate::calibration::profile::{Profiles, Served};
use crate::config::{ConfigError, EdgeSettings, Limits, ServeConfig, UpstreamSettings};
use crate::engine::Pipeline;
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::models::Models;
use crate::quota::Quotas;

use super::auth::{CallerChecks, Keys};
use super::budget::BodyBudget;

/// Everything handlers share, built once at startup.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The models served, by name and alias.
    pub models: Arc<Models>,
    /// Runs validated requests under the process-wide cap.
    pub pipeline: Arc<Pipeline>,
    /// The contract's limits.
    pub limits: Arc<Limits>,
    /// Counters and gauges for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The API keys and their limits (empty: open).
    pub keys: Arc<Keys>,
    /// Where the keys' limits and usage are counted (memory, `redb` or Redis).
    pub quotas: Arc<Quotas>,
    /// The key name that may read every key's usage (`--admin-key`).
    pub admin_key: Option<String>,
    /// Connection deadlines and caps, and the concurrent-request cap.
    pub edge: Arc<EdgeSettings>,
    /// The memory request bodies may hold together while decoded and parsed.
    pub body_budget: Arc<BodyBudget>,
    /// The decision ledger. Off in the state [`build_state`] makes (which needs no
    /// runtime); `serve` opens the configured one ([`crate::ledger::Ledger::open`]).
    pub ledger: Ledger,
}

impl CallerChecks for AppState {
    fn keys(&self) -> &Keys {
        &self.keys
    }
    fn quotas(&self) -> &Quotas {
        &self.quotas
    }
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Builds the shared state from a serve configuration.
pub fn build_state(config: &ServeConfig) -> Result<AppState, ConfigError> {
    crate::backend::set_log_error_text(config.log_backend_error_text);
    let client = upstream_client(&config.upstream)?;
    let models = Models::from_configs(
        &config.model_configs()?,
        &client,
        config.upstream.token_check_timeout(),
        config.gateway.circuit(),
    )?;
    let served: Vec<Served<'_>> = models
        .iter()
        .map(|m| Served {
            name: &m.name,
            also: m
                .aliases
                .iter()
                .map(String::as_str)
                .chain([m.upstream_model.as_str()])
                .collect(),
        })
        .collect();
    let profiles =
        Profiles::load(config.profiles_dir.as_deref(), &served).map_err(ConfigError::Invalid)?;
    let models = models.with_profiles(profiles);
    let keys = Keys::load(
        config.gateway.keys_file.as_deref(),
        config.gateway.api_keys.as_ref(),
    )?;
    let metrics = Arc::new(Metrics::new());
    let settings = &config.limit_store;
    if let Some(admin) = &settings.admin_key {
        if !keys.names().contains(admin) {
            return Err(ConfigError::Invalid(format!(
                "--admin-key {admin:?} names no configured key (the names are those of --keys-file and key-1, key-2, … of SYSTEMONE_API_KEYS)"
            )));
        }
    }
    let quotas = Quotas::from_settings(settings, config.redis_url()?.as_ref(), metrics.clone())?;
    Ok(AppState {
        models: Arc::new(models),
        pipeline: Arc::new(Pipeline::new(&config.upstream).with_metrics(metrics.clone())),
        limits: Arc::new(config.limits.clone()),
        metrics,
        keys: Arc::new(keys),
        quotas: Arc::new(quotas),
        admin_key: settings.admin_key.clone(),
        edge: Arc::new(config.edge.clone()),
        body_budget: Arc::new(BodyBudget::new(
            config.edge.max_body_memory_mb,
            config.edge.body_read_timeout(),
        )),
        ledger: Ledger::off(),
    })
}

/// The HTTP client every backend shares: one connection pool, sized to the in-flight cap.
pub fn upstream_client(settings: &UpstreamSettings) -> Result<crate::backend::Pool, ConfigError> {
    crate::backend::pool::pool(settings.connect_timeout(), settings.max_in_flight.max(1))
        .map_err(ConfigError::Invalid)
}
