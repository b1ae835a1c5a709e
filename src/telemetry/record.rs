//! One exported span while it runs and after it ends: [`SpanRecord`], kept in the `tracing`
//! span's extensions by the layer ([`layer`](mod@super::layer)), queued when it closes and
//! encoded by [`super::encode`].
//!
//! Why a struct of its own rather than the SDK's span data: a key is the field's
//! `&'static str` name (no `String` per attribute), a value is a small enum, and nothing is
//! built that the export does not send.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};

/// An attribute's value, as OTLP's `AnyValue` holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    I64(i64),
    F64(f64),
    Bool(bool),
    /// A value known for the whole run (a status class, a dialect): not copied.
    Str(&'static str),
    /// A value read from a field (or made for the span).
    String(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::I64(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl From<&'static str> for Value {
    fn from(v: &'static str) -> Self {
        Value::Str(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}

/// A span's name: the callsite's (static), or an `otel.name` field's (`chat <model>`).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Name {
    Static(&'static str),
    Owned(String),
}

impl Name {
    pub(super) fn as_str(&self) -> &str {
        match self {
            Name::Static(s) => s,
            Name::Owned(s) => s,
        }
    }
}

/// Where the span's trace comes from and whether it is exported: what a child inherits and
/// what a `traceparent` says.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TraceContext {
    pub(super) trace_id: [u8; 16],
    pub(super) span_id: [u8; 8],
    /// Whether the trace is exported (the sampler's decision at its root, or the caller's).
    pub(super) sampled: bool,
    /// The caller's `tracestate`, passed on as it came (shared by the trace's spans).
    pub(super) trace_state: Option<Arc<str>>,
}

/// An event on a span (`fallback`, `prior sample`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SpanEvent {
    pub(super) time: u64,
    pub(super) name: String,
    pub(super) attributes: Vec<(&'static str, Value)>,
}

/// One span: its context, parent, timing, name, kind, attributes, events and status.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SpanRecord {
    pub(super) context: TraceContext,
    /// The parent's span id, zero for a root of a new trace.
    pub(super) parent: [u8; 8],
    /// Nanoseconds since the Unix epoch.
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) name: Name,
    /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub(super) kind: i32,
    pub(super) attributes: Vec<(&'static str, Value)>,
    pub(super) events: Vec<SpanEvent>,
    /// OTLP's status code (0 unset, 1 ok, 2 error) and its description.
    pub(super) status: (i32, Option<String>),
}

/// OTLP's `SpanKind` internal, what a span is unless it says otherwise.
pub(super) const INTERNAL: i32 = 1;
/// OTLP's `SpanKind` client: a request to another service.
pub(super) const CLIENT: i32 = 3;
/// OTLP's error status code.
pub(super) const ERROR: i32 = 2;

impl SpanRecord {
    /// A span of `context` under `parent`, named `name`, starting now.
    pub(super) fn new(
        context: TraceContext,
        parent: [u8; 8],
        name: &'static str,
        fields: usize,
    ) -> Self {
        SpanRecord {
            context,
            parent,
            start: now(),
            end: 0,
            name: Name::Static(name),
            kind: INTERNAL,
            attributes: Vec::with_capacity(fields),
            events: Vec::new(),
            status: (0, None),
        }
    }

    /// Sets attribute `key` (replacing a value it had).
    pub(super) fn set(&mut self, key: &'static str, value: Value) {
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, old)) => *old = value,
            None => self.attributes.push((key, value)),
        }
    }

    /// Marks the span failed, with `description` (an error code or status class).
    pub(super) fn error(&mut self, description: impl Into<String>) {
        self.status = (ERROR, Some(description.into()));
    }

    /// Takes one field of the span (`otel.*` ones set its name, kind and status).
    fn field(&mut self, key: &'static str, value: Value) {
        match (key, value) {
            ("otel.name", value) => self.name = Name::Owned(text(value)),
            ("otel.kind", value) => self.kind = kind(&text(value)),
            ("otel.status_code", value) => self.status.0 = status_code(&text(value)),
            ("otel.status_description" | "otel.status_message", value) => {
                self.status.1 = Some(text(value));
            }
            (key, value) => self.set(key, value),
        }
    }
}

/// Nanoseconds since the Unix epoch, now (0 before it: a clock that wrong is not worth a
/// panic).
pub(super) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A value as text (an `otel.*` field's).
fn text(value: Value) -> String {
    match value {
        Value::String(s) => s,
        Value::Str(s) => s.to_owned(),
        Value::I64(n) => n.to_string(),
        Value::F64(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
    }
}

/// An `otel.kind` field's value as OTLP's number (internal when it names no kind).
fn kind(name: &str) -> i32 {
    match name.to_ascii_lowercase().as_str() {
        "server" => 2,
        "client" => CLIENT,
        "producer" => 4,
        "consumer" => 5,
        _ => INTERNAL,
    }
}

/// An `otel.status_code` field's value as OTLP's number.
fn status_code(name: &str) -> i32 {
    match name.to_ascii_lowercase().as_str() {
        "ok" => 1,
        "error" => ERROR,
        _ => 0,
    }
}

/// Reads a span's fields into its record.
pub(super) struct SpanFields<'a>(pub(super) &'a mut SpanRecord);

impl Visit for SpanFields<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.field(field.name(), Value::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let value = i64::try_from(value).unwrap_or(i64::MAX);
        self.0.field(field.name(), Value::I64(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.field(field.name(), Value::F64(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.field(field.name(), Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.field(field.name(), Value::String(value.to_owned()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .field(field.name(), Value::String(format!("{value:?}")));
    }
}

/// Reads an event's fields: its message is its name, the rest its attributes.
pub(super) struct EventFields<'a>(pub(super) &'a mut SpanEvent);

impl EventFields<'_> {
    fn field(&mut self, key: &'static str, value: Value) {
        match (key, value) {
            ("message", value) => self.0.name = text(value),
            (key, value) => self.0.attributes.push((key, value)),
        }
    }
}

impl Visit for EventFields<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field.name(), Value::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(
            field.name(),
            Value::I64(i64::try_from(value).unwrap_or(i64::MAX)),
        );
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.field(field.name(), Value::F64(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field.name(), Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field.name(), Value::String(value.to_owned()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.field(field.name(), Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> SpanRecord {
        let context = TraceContext {
            trace_id: [1; 16],
            span_id: [2; 8],
            sampled: true,
            trace_state: None,
        };
        SpanRecord::new(context, [0; 8], "read", 2)
    }

    #[test]
    fn otel_fields_set_the_name_kind_and_status_and_the_rest_are_attributes() {
        let mut span = record();
        span.field("otel.name", Value::String("chat m".into()));
        span.field("otel.kind", Value::Str("client"));
        span.field("otel.status_code", Value::Str("ERROR"));
        span.field("otel.status_description", Value::Str("timeout"));
        span.field("systemone.attempt", Value::I64(1));
        span.set("systemone.attempt", Value::I64(2));
        assert_eq!(span.name.as_str(), "chat m");
        assert_eq!(span.kind, 3);
        assert_eq!(span.status, (ERROR, Some("timeout".into())));
        assert_eq!(span.attributes, vec![("systemone.attempt", Value::I64(2))]);
    }
}
