//! [`AppState`]: everything handlers share, built once from the serve configuration.

use std::sync::Arc;

use crate::batch::Batches;
use crate::calibration::profile::{Profiles, Served};
use crate::config::{ConfigError, EdgeSettings, Limits, ServeConfig, UpstreamSettings};
use crate::engine::Pipeline;
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::models::prior_sync::{PriorStore, PriorSync};
use crate::models::Models;
use crate::quota::Quotas;

use super::auth::salt::CacheSalt;
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
    /// Each tenant's `cache_salt` for vLLM reads (off when the service is open).
    pub cache_salt: Arc<CacheSalt>,
    /// The key name that may read every key's usage (`--admin-key`).
    pub admin_key: Option<String>,
    /// Connection deadlines and caps, and the concurrent-request cap.
    pub edge: Arc<EdgeSettings>,
    /// The memory request bodies may hold together while decoded and parsed.
    pub body_budget: Arc<BodyBudget>,
    /// The decision ledger. Off in the state [`build_state`] makes (which needs no
    /// runtime); `serve` opens the configured one ([`crate::ledger::Ledger::open`]).
    pub ledger: Ledger,
    /// Batch jobs: their store (opened on first use) and the batches running here.
    pub batches: Arc<Batches>,
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
        config.admission.circuit(),
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
        config.admission.keys_file.as_deref(),
        config.admission.api_keys.as_ref(),
    )?;
    let metrics = Arc::new(Metrics::new());
    let settings = &config.limit_store;
    check_names(&keys, settings.admin_key.as_deref(), &models)?;
    let open = keys.is_open();
    let quotas = Quotas::from_settings(settings, config.redis_url()?.as_ref(), metrics.clone())?;
    let quotas = Arc::new(quotas);
    let models = models.with_prior_sync(prior_sync(config, &metrics)?);
    Ok(AppState {
        models: Arc::new(models),
        pipeline: Arc::new(Pipeline::new(&config.upstream).with_metrics(metrics.clone())),
        limits: Arc::new(config.limits.clone()),
        metrics,
        keys: Arc::new(keys),
        quotas: quotas.clone(),
        cache_salt: Arc::new(CacheSalt::new(
            config.admission.cache_salt && !open,
            config.admission.cache_salt_secret.as_ref(),
        )),
        admin_key: settings.admin_key.clone(),
        edge: Arc::new(config.edge.clone()),
        body_budget: Arc::new(BodyBudget::new(
            config.edge.max_body_memory_mb,
            config.edge.body_read_timeout(),
        )),
        ledger: Ledger::off(),
        batches: batches(config, quotas),
    })
}

/// The batch jobs, under the state directory, charging their lines' usage to `quotas`.
fn batches(config: &ServeConfig, quotas: Arc<Quotas>) -> Arc<Batches> {
    Arc::new(Batches::new(
        config.batches.clone(),
        config.limit_store.state_dir.clone(),
        quotas,
        config.upstream.max_in_flight,
    ))
}

/// Where the position priors are kept beyond the process: the shared Redis when there is
/// one, else the state directory's file, else nowhere (memory).
fn prior_sync(
    config: &ServeConfig,
    metrics: &Arc<Metrics>,
) -> Result<Option<PriorSync>, ConfigError> {
    let settings = &config.limit_store;
    let store = match (config.redis_url()?, &settings.state_dir) {
        (Some(url), _) => PriorStore::redis(&url, &settings.redis_prefix)?,
        (None, Some(dir)) => PriorStore::embedded(dir),
        (None, None) => return Ok(None),
    };
    let interval = std::time::Duration::from_millis(config.prior_sync_ms);
    Ok(Some(PriorSync::new(store, interval, metrics.clone())))
}

/// `--admin-key` must name a key, and every model a `[[tier]]` lists must be served (by
/// name or alias): a typo would refuse the tier's callers a model the operator meant to
/// give them.
fn check_names(keys: &Keys, admin: Option<&str>, models: &Models) -> Result<(), ConfigError> {
    if let Some(admin) = admin {
        if !keys.names().iter().any(|n| n == admin) {
            return Err(ConfigError::Invalid(format!(
                "--admin-key {admin:?} names no configured key (the names are those of --keys-file and key-1, key-2, … of SYSTEMONE_API_KEYS)"
            )));
        }
    }
    for (tier, listed) in keys.tier_models() {
        if let Some(unknown) = listed.iter().find(|m| models.resolve(m).is_none()) {
            return Err(ConfigError::Invalid(format!(
                "tier {tier:?} lists model {unknown:?}, which no configured model is named or aliased"
            )));
        }
    }
    Ok(())
}

/// The HTTP client every backend shares: one connection pool, sized to the in-flight cap.
pub fn upstream_client(settings: &UpstreamSettings) -> Result<crate::backend::Pool, ConfigError> {
    crate::backend::pool::pool(settings.connect_timeout(), settings.max_in_flight.max(1))
        .map_err(ConfigError::Invalid)
}
