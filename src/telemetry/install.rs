//! Installing the exporter: the sampler, the export queue and its task, and the `tracing`
//! layer that feeds it.

use std::sync::atomic::Ordering;

use super::client::Exporter;
use super::context::SAMPLER;
use super::layer::SpanLayer;
use super::sampler::Sampler;
use super::{queue, resource, TraceLayer, ON};
use crate::config::TraceSettings;

/// The exporter while it runs: flush it before the process ends.
#[derive(Debug)]
pub struct Telemetry {
    flush: queue::Flush,
    endpoint: String,
    sampler: Sampler,
    /// A sampler setting that could not be used, to log once the log is up.
    warning: Option<String>,
}

/// The layer that exports the spans of [`super::TARGET`] to the configured endpoint, and its
/// [`Telemetry`]; `None` when traces are off. The export task runs on `runtime`.
pub fn layer(
    settings: &TraceSettings,
    runtime: &tokio::runtime::Handle,
) -> Result<Option<(TraceLayer, Telemetry)>, String> {
    let Some(endpoint) = settings.endpoint().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let env = |name: &str| std::env::var(name).ok();
    let exporter = Exporter::new(endpoint.clone(), resource::attributes(env), env)?;
    let sizes = queue::Sizes::from_env(env);
    let (queue, flush) = queue::start(exporter, sizes, runtime);
    let (sampler, warning) = Sampler::from_env(env);
    // One sampler per process: a second install (none happens) keeps the first's.
    let _ = SAMPLER.set(sampler);
    let _ = super::step::QUEUE.set(queue.clone());
    ON.store(true, Ordering::Relaxed);
    let telemetry = Telemetry {
        flush,
        endpoint,
        sampler,
        warning,
    };
    Ok(Some((Box::new(SpanLayer { queue }), telemetry)))
}

impl Telemetry {
    /// Where spans are posted.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The sampler in use, as `OTEL_TRACES_SAMPLER` would name it.
    pub fn sampler(&self) -> String {
        self.sampler.to_string()
    }

    /// Why a sampler setting was not used, if one was not.
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// Sends every span still queued (within 5 s): what `systemone serve` does before it
    /// returns.
    pub async fn shutdown(self) {
        let (done, sent) = tokio::sync::oneshot::channel();
        if self.flush.send(done).await.is_ok() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), sent).await;
        }
    }
}
