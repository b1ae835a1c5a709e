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
//! * [`auth`]: API keys (sha256 digests, constant-time compare), per-key rate limits and
//!   the daily question cap.
//! * [`json`]: strict parsing (duplicate keys) and the Python-compatible JSON writer.
//! * [`validate`]: raw body → [`validate::ValidRequest`], the only thing that runs.
//! * [`images`]: image bytes from data URLs, base64 and multipart parts; format sniffing.
//! * [`lower`]: choice / noul / score → numbered options.
//! * [`prompt`]: numbered questions → the exact user-message bytes, per layout and order.
//! * [`tokens`]: token tables (label → token id) per model.
//! * [`backend`]: one trait, one file per wire dialect ([`backend::vllm`]).
//! * [`pipeline`]: fan-out, staging, the in-flight cap, timeouts, cancel on first failure.
//! * [`decode`]: log-probabilities → option mass, normalised and merged probabilities.
//! * [`calibrate`]: the temperature formula and its files; confidence.
//! * [`fit`]: fitting calibration (temperatures, formula, bias, conformal cutoffs, the
//!   automation threshold) and evaluation metrics, pure; [`calibrate_cmd`] and
//!   [`eval`] are the `systemone calibrate` / `eval` commands around it.
//! * [`profile`]: server-side calibration profiles a request names (`"calibration"`):
//!   temperature, bias, conformal prediction sets, the automation threshold.
//! * [`limits`]: the process-wide in-flight cap.
//! * [`circuit`]: the circuit breaker in front of each model's backend.
//! * [`metrics`]: Prometheus metrics with bounded labels.
//! * [`error`]: the one table of codes → status, code string, error type.
//! * [`config`], [`models`]: flags, the TOML registry, and the models built from them.
//!
//! # Request lifecycle
//! 1. [`api`] assigns `req_<hex>`, checks content type and size, parses strictly (a
//!    multipart body: its `request` part, with the other parts kept as image bytes).
//!    Before the body is read, the bearer is checked against the API keys and counted
//!    against its key's requests per minute ([`auth`]).
//! 2. [`validate::validate`] applies every schema and size rule and lowers the questions
//!    (against the model's fallback while the model's [`circuit`] is open). An open circuit
//!    refuses the request here; the key's questions per minute and per day are counted.
//! 3. [`pipeline::Pipeline::run`] renders each (question, option order) with [`prompt::plan`],
//!    sends one read per slice of ≤128 ids through the model's [`backend::Backend`] while
//!    holding an in-flight permit, and merges the slices.
//! 4. [`decode::decode`] turns log-probabilities into calibrated answers.
//! 5. [`api::wire`] writes answers in question order with full `f64` precision.

pub mod api;
pub mod auth;
pub mod backend;
pub mod calibrate;
pub mod calibrate_cmd;
pub mod circuit;
pub mod config;
pub mod decode;
pub mod error;
pub mod eval;
pub mod fit;
pub mod images;
pub mod json;
pub mod limits;
pub mod lower;
pub mod metrics;
pub mod models;
pub mod pipeline;
pub mod profile;
pub mod prompt;
pub mod tokens;
pub mod validate;

use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

pub use api::{router, AppState};

/// Builds the shared state from a serve configuration.
pub fn build_state(config: &config::ServeConfig) -> Result<AppState, config::ConfigError> {
    let client = upstream_client(&config.upstream)?;
    let models = models::Models::from_configs(
        &config.model_configs()?,
        &client,
        config.upstream.token_check_timeout(),
        config.gateway.circuit(),
    )?;
    let served = models.public_names();
    let served: Vec<&str> = served.iter().map(String::as_str).collect();
    let profiles = profile::Profiles::load(config.profiles_dir.as_deref(), &served)
        .map_err(config::ConfigError::Invalid)?;
    let models = models.with_profiles(profiles);
    let keys = auth::Keys::load(
        config.gateway.keys_file.as_deref(),
        config.gateway.api_keys.as_ref(),
    )?;
    let metrics = Arc::new(metrics::Metrics::new());
    Ok(AppState {
        models: Arc::new(models),
        pipeline: Arc::new(pipeline::Pipeline::new(&config.upstream).with_metrics(metrics.clone())),
        limits: Arc::new(config.limits.clone()),
        metrics,
        keys: Arc::new(keys),
    })
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and lets
/// in-flight requests finish for at most `grace` (tokio time) before returning.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let (started, stopping) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!(
            grace_secs = grace.as_secs_f64(),
            "shutting down: no new connections, finishing in-flight requests"
        );
        let _ = started.send(());
    });
    let deadline = async move {
        if stopping.await.is_err() {
            // The server ended without a shutdown signal: nothing to bound.
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        result = server.into_future() => {
            tracing::info!("shut down: every in-flight request finished");
            result
        }
        () = deadline => {
            tracing::warn!(
                grace_secs = grace.as_secs_f64(),
                "shut down with requests still in flight: the grace period ran out"
            );
            Ok(())
        }
    }
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
