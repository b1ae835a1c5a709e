//! Installing the exporter: the OTLP/HTTP exporter on the service's own client, the export
//! queue, the SDK's provider (sampler, resource) and the `tracing` layer that feeds it.

use std::sync::atomic::Ordering;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter as _};
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::Layer;

use super::{client, queue, TraceLayer, ON, TARGET};
use crate::config::TraceSettings;

/// The exporter while it runs: flush it before the process ends.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    flush: queue::Flush,
    endpoint: String,
}

/// The layer that exports the spans of [`TARGET`] to the configured endpoint, and its
/// [`Telemetry`]; `None` when traces are off. The export task runs on `runtime`.
pub fn layer(
    settings: &TraceSettings,
    runtime: &tokio::runtime::Handle,
) -> Result<Option<(TraceLayer, Telemetry)>, String> {
    let Some(endpoint) = settings.endpoint().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client::RuntimeClient::new(runtime.clone())?)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|e| format!("--otlp-traces-endpoint {endpoint}: {e}"))?;
    // The exporter sends the resource with each batch; the provider would hand it to the
    // SDK's own processors, the queue owns the exporter from here on.
    let resource = resource();
    exporter.set_resource(&resource);
    let sizes = queue::Sizes::from_env(|name| std::env::var(name).ok());
    let (processor, flush) = queue::start(exporter, sizes, runtime);
    // The SDK reads OTEL_TRACES_SAMPLER and _ARG itself (parent-based always-on when unset).
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("systemone");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        // Nothing reads the OpenTelemetry context of the current thread: a span's parent is
        // the current `tracing` span, and `inject_current` takes the context from that span.
        // Activating it on every enter (each poll of an instrumented future) cost a clone,
        // an attach and a guard per poll (docs/benchmarks/load.md).
        .with_context_activation(false)
        .with_filter(Targets::new().with_target(TARGET, LevelFilter::TRACE));
    ON.store(true, Ordering::Relaxed);
    let telemetry = Telemetry {
        provider,
        flush,
        endpoint,
    };
    Ok(Some((Box::new(layer), telemetry)))
}

/// The service's resource: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` (read by the
/// SDK), with `service.name` `systemone` when neither names one.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("systemone").build()
    }
}

impl Telemetry {
    /// Where spans are posted.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends every span still queued (within 5 s), then stops the provider: what
    /// `systemone serve` does before it returns.
    pub async fn shutdown(self) {
        let (done, sent) = tokio::sync::oneshot::channel();
        if self.flush.send(done).await.is_ok() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), sent).await;
        }
        let _ = self.provider.shutdown();
    }
}
