//! Traces: where each answer spent its time, span by span, exported over OTLP/HTTP to the
//! operator's collector (docs/operations/tracing.md).
//!
//! The request's SERVER span (and a batch line's root) is a `tracing` span of the one target
//! [`TARGET`], made in `http/trace.rs` and recorded by the service's own layer (`layer.rs`);
//! its steps (`http/trace.rs`: validation, escalation, the ledger's commit;
//! `engine/spans.rs`: the pipeline's, each upstream read a GenAI CLIENT span) are
//! [`StepSpan`]s (`step.rs`), lighter than `tracing` spans, each the child of the one current
//! when it is made. The export task encodes both to OTLP protobuf (`encode.rs`) and posts
//! them (`client.rs`). With traces off (the default) no layer takes that target, so each
//! such span is a disabled callsite (a load of its cached interest), and a step is one
//! flag's load. The log's layer never takes that target, with traces on or off.
//!
//! Propagation is W3C trace context: a caller's `traceparent`/`tracestate` is the
//! request's parent ([`continue_trace`]) and every upstream request carries the current
//! span's `traceparent` ([`inject_current`]), so a model server that traces (vLLM with
//! `--otlp-traces-endpoint`) puts its spans under the read that caused them.
//!
//! Never caller text: a span's attributes are ids, counts, configured names and outcomes,
//! as the metrics' labels are (the canary test in tests/hermetic/traces.rs reads everything
//! exported).

mod annotate;
mod client;
mod context;
mod encode;
mod install;
mod layer;
mod propagate;
mod queue;
mod record;
mod resource;
mod sampler;
mod step;

use std::sync::atomic::AtomicBool;

use tracing_subscriber::{Layer, Registry};

pub use annotate::{annotate, Annotations};
pub use install::{layer, Telemetry};
pub use propagate::{continue_trace, inject_current};
pub use record::Value;
pub use step::{step, InStep, StepSpan};

/// The `tracing` target of every span that is exported (and of nothing else).
pub const TARGET: &str = "systemone::otel";

/// Whether spans are exported: read before the work of propagation is done.
static ON: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported.
fn on() -> bool {
    ON.load(std::sync::atomic::Ordering::Relaxed)
}

/// The layer that exports spans, as the subscriber takes it beside the log's.
pub type TraceLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// A count as a span's attribute: an `i64`, OpenTelemetry's integer.
pub fn int(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The log's filter directive that keeps the exported spans out of the log (whatever
/// `RUST_LOG` says: it is added last).
pub fn not_in_the_log() -> Option<tracing_subscriber::filter::Directive> {
    format!("{TARGET}=off").parse().ok()
}
