//! What a span learns after it started (the status code, the usage a backend reported, a
//! failure): set on its record directly, in one look-up, rather than through fields each
//! span would have to declare empty up front; and whether the current trace was sampled out
//! (then a step makes no span at all).

use std::sync::atomic::Ordering;

use tracing::Span;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Registry;

use super::layer::nearest_context;
use super::record::{SpanRecord, TraceContext, Value};
use super::ON;

/// An exported span's record, to annotate.
pub struct Annotations<'a>(&'a mut SpanRecord);

impl Annotations<'_> {
    /// Sets attribute `key` to `value`.
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.0.set(key, value.into());
    }

    /// Marks the span failed (its status an error), described by `description`: an error
    /// code or status class, never caller text.
    pub fn error(&mut self, description: impl Into<String>) {
        self.0.error(description);
    }
}

/// Runs `annotate` on `span`'s record when the span is exported (sampled), else does
/// nothing: a disabled or sampled-out span costs one check, or one look-up.
pub fn annotate(span: &Span, annotate: impl FnOnce(&mut Annotations<'_>)) {
    if span.is_disabled() {
        return;
    }
    with_record(span, |record| {
        if record.context.sampled {
            annotate(&mut Annotations(record));
        }
    });
}

/// Whether the current span's trace is one the sampler left out. A step's span is then not
/// made (its constructor returns `Span::none()`): a `tracing` span costs a slab entry, an
/// enter and exit on every poll of the future it instruments and a close, whether or not
/// its trace is exported (docs/benchmarks/load.md). A root (no exported span current) is
/// always made: it asks the sampler.
pub fn sampled_out() -> bool {
    if !ON.load(Ordering::Relaxed) {
        return false;
    }
    let span = tracing::Span::current();
    !span.is_disabled() && context_of(&span).is_some_and(|c| !c.sampled)
}

/// The trace context of `span` (or its nearest exported ancestor), if it has one.
pub(super) fn context_of(span: &Span) -> Option<TraceContext> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        nearest_context(&registry.span(id)?)
    })
    .flatten()
}

/// Runs `change` on `span`'s own record, if it has one.
pub(super) fn with_record(span: &Span, change: impl FnOnce(&mut SpanRecord)) {
    span.with_subscriber(|(id, dispatch)| {
        let Some(registry) = dispatch.downcast_ref::<Registry>() else {
            return;
        };
        let Some(span) = registry.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        if let Some(record) = extensions.get_mut::<SpanRecord>() {
            change(record);
        }
    });
}
