//! W3C trace context: a caller's `traceparent` and `tracestate` in, the current span's out
//! on every upstream request.

use std::sync::atomic::Ordering;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::ON;

/// Makes the caller's trace (its `traceparent` and `tracestate`) the parent of `span`, when
/// spans are exported and the caller sent one; an invalid one is ignored (a new trace).
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if span.is_disabled() || !headers.contains_key("traceparent") {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Puts the current span's `traceparent` (and `tracestate`) on an upstream request's
/// headers, when spans are exported and one is current.
pub fn inject_current(headers: &mut http::HeaderMap) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    let context = span.context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
    }
}
