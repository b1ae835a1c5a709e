//! Where a span sits in its trace: its context's ids and sampling decision, as a root, as a
//! child, or as the nearest exported ancestor's (shared by the `tracing` layer and the steps).

use std::sync::OnceLock;

use tracing_subscriber::registry::{LookupSpan, SpanRef};

use super::record::{SpanRecord, TraceContext};
use super::sampler::Sampler;

/// The sampler, set once when traces are installed: read by the layer at each trace's root
/// and by [`super::continue_trace`].
pub(super) static SAMPLER: OnceLock<Sampler> = OnceLock::new();

/// The trace context of `span` or, when it is not an exported one (the log's `request`
/// span), of its nearest exported ancestor.
pub(super) fn nearest_context<'a, R: LookupSpan<'a>>(
    span: &SpanRef<'a, R>,
) -> Option<TraceContext> {
    span.scope().find_map(|s| {
        s.extensions()
            .get::<SpanRecord>()
            .map(|r| r.context.clone())
    })
}

/// A new trace's root context, sampled as the sampler says.
pub(super) fn new_trace() -> TraceContext {
    let trace_id = trace_id();
    let sampled = SAMPLER.get().is_some_and(|s| s.root(&trace_id));
    TraceContext {
        trace_id,
        span_id: span_id(),
        sampled,
        trace_state: None,
    }
}

/// A random trace id (never all zeros, which W3C reserves for "none").
pub(super) fn trace_id() -> [u8; 16] {
    fastrand::u128(1..).to_be_bytes()
}

/// A random span id (never all zeros).
pub(super) fn span_id() -> [u8; 8] {
    fastrand::u64(1..).to_be_bytes()
}

/// A child's context: its parent's trace and decision, an id of its own.
pub(super) fn child_of(parent: &TraceContext) -> TraceContext {
    TraceContext {
        span_id: span_id(),
        ..parent.clone()
    }
}
