//! What a span learns after it started (the status code, the usage a backend reported, a
//! failure): set on its record directly, in one look-up, rather than through fields each
//! span would have to declare empty up front.

use tracing::Span;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Registry;

use super::context::nearest_context;
use super::record::{Name, SpanRecord, TraceContext, Value, CLIENT};

/// An exported span's record, to annotate.
pub struct Annotations<'a>(pub(super) &'a mut SpanRecord);

impl Annotations<'_> {
    /// Sets attribute `key` to `value`.
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.0.set(key, value.into());
    }

    /// Adds attribute `key`, one the span does not have yet (not looked for: a step's
    /// attributes as it is made, each set once).
    pub fn add(&mut self, key: &'static str, value: impl Into<Value>) {
        self.0.attributes.push((key, value.into()));
    }

    /// Marks the span failed (its status an error), described by `description`: an error
    /// code or status class, never caller text.
    pub fn error(&mut self, description: impl Into<String>) {
        self.0.error(description);
    }

    /// Names the span `name` in place of its static name (`chat <model>`).
    pub fn rename(&mut self, name: String) {
        self.0.name = Name::Owned(name);
    }

    /// Makes the span a CLIENT span: a request to another service.
    pub fn client(&mut self) {
        self.0.kind = CLIENT;
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
