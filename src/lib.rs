//! `systemone`: System One semantics (calibrated typed decisions) over any chat LLM.
//!
//! Callers send TypeSafe's typed-decision request (`POST /v1/systemone`: a `state` plus
//! named `choice` / `noul` / `score` questions). Each question becomes one masked,
//! single-token chat completion: the prompt numbers the options, the assistant turn is
//! prefilled with `answer=`, generation is restricted to the option-number tokens, and the
//! distribution is read from their log-probabilities.
//!
//! # Layout
//! The request path reads top to bottom as the module list:
//! * [`api`]: routes, request ids, body extraction, response wire types.
//! * [`json`]: strict parsing (duplicate keys) and the Python-compatible JSON writer.
//! * [`validate`]: raw body → [`validate::ValidRequest`], the only thing that runs.
//! * [`lower`]: choice / noul / score → numbered options.
//! * [`prompt`]: numbered questions → the exact user-message bytes, per layout and order.
//! * [`tokens`]: token tables (label → token id) per model.
//! * [`backend`]: one trait, one file per wire dialect ([`backend::vllm`]).
//! * [`pipeline`]: fan-out, staging, the in-flight cap, timeouts, cancel on first failure.
//! * [`decode`]: log-probabilities → option mass, normalised and merged probabilities.
//! * [`calibrate`]: the temperature formula and its files; confidence.
//! * [`limits`]: the process-wide in-flight cap.
//! * [`metrics`]: Prometheus metrics with bounded labels.
//! * [`error`]: the one table of codes → status, code string, error type.
//! * [`config`], [`models`]: flags, the TOML registry, and the models built from them.
//!
//! # Request lifecycle
//! 1. [`api`] assigns `req_<hex>`, checks content type and size, parses strictly.
//! 2. [`validate::validate`] applies every schema and size rule and lowers the questions.
//! 3. [`pipeline::Pipeline::run`] renders each (question, option order) with [`prompt::plan`],
//!    sends one read per slice of ≤128 ids through the model's [`backend::Backend`] while
//!    holding an in-flight permit, and merges the slices.
//! 4. [`decode::decode`] turns log-probabilities into calibrated answers.
//! 5. [`api::wire`] writes answers in question order with full `f64` precision.

pub mod api;
pub mod backend;
pub mod calibrate;
pub mod config;
pub mod decode;
pub mod error;
pub mod json;
pub mod limits;
pub mod lower;
pub mod metrics;
pub mod models;
pub mod pipeline;
pub mod prompt;
pub mod tokens;
pub mod validate;

use std::sync::Arc;

pub use api::{router, AppState};

/// Builds the shared state from a serve configuration.
pub fn build_state(config: &config::ServeConfig) -> Result<AppState, config::ConfigError> {
    let client = upstream_client(&config.upstream)?;
    let models = models::Models::from_configs(
        &config.model_configs()?,
        &client,
        config.upstream.token_check_timeout(),
    )?;
    Ok(AppState {
        models: Arc::new(models),
        pipeline: Arc::new(pipeline::Pipeline::new(&config.upstream)),
        limits: Arc::new(config.limits.clone()),
        metrics: Arc::new(metrics::Metrics::new()),
    })
}

/// The HTTP client every backend shares: one connection pool, sized to the in-flight cap.
pub fn upstream_client(
    settings: &config::UpstreamSettings,
) -> Result<reqwest::Client, config::ConfigError> {
    reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout())
        .pool_max_idle_per_host(settings.max_in_flight.max(1))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| config::ConfigError::Invalid(format!("cannot build the HTTP client: {e}")))
}

/// The router for a state (what `serve` runs).
pub fn app(state: AppState) -> axum::Router {
    router(state)
}
