//! OTLP's `ExportTraceServiceRequest` in protobuf, written straight from the records.
//!
//! Why by hand rather than `prost` and `opentelemetry-proto`'s generated types: those types
//! own a `String` per attribute key and value and a `Vec` per span, so each span would be
//! copied into them before being encoded, which is the export's cost this replaces. The
//! handful of messages and wire types OTLP traces use fit in this file; each message's
//! length is computed before it is written (no buffer per message), and the tests decode
//! the output with `opentelemetry-proto`.

use super::record::{SpanEvent, SpanRecord, Value};

/// Protobuf's wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// The request for `spans`, under the resource `resource` (its attributes) and the
/// instrumentation scope `scope`.
pub(super) fn request(resource: &[(String, String)], scope: &str, spans: &[SpanRecord]) -> Vec<u8> {
    let resource_len: usize = resource
        .iter()
        .map(|(k, v)| field(1, key_value_len(k, &text(v))))
        .sum();
    let scope_len = field(1, string(1, scope));
    let span_lens: Vec<usize> = spans.iter().map(span_len).collect();
    let scope_spans_len = scope_len + span_lens.iter().map(|l| field(2, *l)).sum::<usize>();
    let resource_spans_len = field(1, resource_len) + field(2, scope_spans_len);
    let mut out = Vec::with_capacity(field(1, resource_spans_len));
    header(&mut out, 1, resource_spans_len);
    header(&mut out, 1, resource_len);
    for (k, v) in resource {
        put_key_value(&mut out, 1, k, &text(v));
    }
    header(&mut out, 2, scope_spans_len);
    header(&mut out, 1, string(1, scope));
    put_string(&mut out, 1, scope);
    for (span, len) in spans.iter().zip(span_lens) {
        header(&mut out, 2, len);
        put_span(&mut out, span);
    }
    out
}

/// A resource value: always a string.
fn text(v: &str) -> Value {
    Value::String(v.to_owned())
}

/// The bytes of a length-delimited field `number` whose contents are `len` bytes.
fn field(number: u32, len: usize) -> usize {
    varint_len(u64::from(number << 3)) + varint_len(len as u64) + len
}

fn string(number: u32, s: &str) -> usize {
    field(number, s.len())
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, number: u32, wire: u8) {
    put_varint(out, u64::from(number << 3 | u32::from(wire)));
}

/// A length-delimited field's tag and length (its contents follow).
fn header(out: &mut Vec<u8>, number: u32, len: usize) {
    tag(out, number, LEN);
    put_varint(out, len as u64);
}

fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    header(out, number, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_string(out: &mut Vec<u8>, number: u32, s: &str) {
    put_bytes(out, number, s.as_bytes());
}

fn put_fixed64(out: &mut Vec<u8>, number: u32, v: u64) {
    tag(out, number, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

/// An `AnyValue`'s contents.
fn any_value_len(value: &Value) -> usize {
    match value {
        Value::I64(n) => 1 + varint_len(*n as u64),
        Value::F64(_) => 9,
        Value::Bool(_) => 2,
        Value::Str(s) => string(1, s),
        Value::String(s) => string(1, s),
    }
}

fn put_any_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::I64(n) => {
            tag(out, 3, VARINT);
            put_varint(out, *n as u64);
        }
        Value::F64(n) => put_fixed64(out, 4, n.to_bits()),
        Value::Bool(b) => {
            tag(out, 2, VARINT);
            out.push(u8::from(*b));
        }
        Value::Str(s) => put_string(out, 1, s),
        Value::String(s) => put_string(out, 1, s),
    }
}

/// A `KeyValue`'s contents.
fn key_value_len(key: &str, value: &Value) -> usize {
    string(1, key) + field(2, any_value_len(value))
}

/// A `KeyValue` as field `number` of its message.
fn put_key_value(out: &mut Vec<u8>, number: u32, key: &str, value: &Value) {
    header(out, number, key_value_len(key, value));
    put_string(out, 1, key);
    header(out, 2, any_value_len(value));
    put_any_value(out, value);
}

fn attributes_len(number: u32, attributes: &[(&'static str, Value)]) -> usize {
    attributes
        .iter()
        .map(|(k, v)| field(number, key_value_len(k, v)))
        .sum()
}

fn put_attributes(out: &mut Vec<u8>, number: u32, attributes: &[(&'static str, Value)]) {
    for (k, v) in attributes {
        put_key_value(out, number, k, v);
    }
}

/// A `Span.Event`'s contents.
fn event_len(event: &SpanEvent) -> usize {
    9 + string(2, &event.name) + attributes_len(3, &event.attributes)
}

fn put_event(out: &mut Vec<u8>, event: &SpanEvent) {
    header(out, 11, event_len(event));
    put_fixed64(out, 1, event.time);
    put_string(out, 2, &event.name);
    put_attributes(out, 3, &event.attributes);
}

/// A `Status`'s contents (a message, then a code).
fn status_len(status: &(i32, Option<String>)) -> usize {
    status.1.as_deref().map_or(0, |m| string(2, m)) + 1 + varint_len(status.0 as u64)
}

fn put_status(out: &mut Vec<u8>, status: &(i32, Option<String>)) {
    header(out, 15, status_len(status));
    if let Some(message) = &status.1 {
        put_string(out, 2, message);
    }
    tag(out, 3, VARINT);
    put_varint(out, status.0 as u64);
}

/// A `Span`'s contents.
fn span_len(span: &SpanRecord) -> usize {
    let state = span
        .context
        .trace_state
        .as_deref()
        .map_or(0, |s| string(3, s));
    let parent = if span.parent == [0; 8] {
        0
    } else {
        field(4, 8)
    };
    let events: usize = span.events.iter().map(|e| field(11, event_len(e))).sum();
    let status = if span.status.0 == 0 {
        0
    } else {
        field(15, status_len(&span.status))
    };
    field(1, 16)
        + field(2, 8)
        + state
        + parent
        + string(5, span.name.as_str())
        + 1
        + varint_len(span.kind as u64)
        + 18
        + attributes_len(9, &span.attributes)
        + events
        + status
}

fn put_span(out: &mut Vec<u8>, span: &SpanRecord) {
    put_bytes(out, 1, &span.context.trace_id);
    put_bytes(out, 2, &span.context.span_id);
    if let Some(state) = &span.context.trace_state {
        put_string(out, 3, state);
    }
    if span.parent != [0; 8] {
        put_bytes(out, 4, &span.parent);
    }
    put_string(out, 5, span.name.as_str());
    tag(out, 6, VARINT);
    put_varint(out, span.kind as u64);
    put_fixed64(out, 7, span.start);
    put_fixed64(out, 8, span.end);
    put_attributes(out, 9, &span.attributes);
    for event in &span.events {
        put_event(out, event);
    }
    if span.status.0 != 0 {
        put_status(out, &span.status);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message;

    use super::super::record::{Name, TraceContext};
    use super::*;

    fn span(parent: [u8; 8]) -> SpanRecord {
        let context = TraceContext {
            trace_id: [0xab; 16],
            span_id: [0xcd; 8],
            sampled: true,
            trace_state: Some(Arc::from("vendor=opaque")),
        };
        let mut span = SpanRecord::new(context, parent, "read", 4);
        span.name = Name::Owned("chat glm".into());
        span.kind = 3;
        span.start = 1_700_000_000_000_000_000;
        span.end = span.start + 1234;
        span.set("systemone.attempt", Value::I64(-3));
        span.set("gen_ai.request.model", Value::String("glm".into()));
        span.set("gen_ai.provider.name", Value::Str("vllm"));
        span.set("systemone.prior_sample", Value::Bool(true));
        span.set("ratio", Value::F64(0.25));
        span.events.push(SpanEvent {
            time: span.start + 1,
            name: "fallback".into(),
            attributes: vec![("model", Value::Str("other"))],
        });
        span.error("timeout");
        span
    }

    #[test]
    fn opentelemetry_proto_decodes_what_is_written() {
        let resource = [("service.name".to_owned(), "systemone".to_owned())];
        let bytes = request(&resource, "systemone", &[span([7; 8]), span([0; 8])]);
        let decoded = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let rs = &decoded.resource_spans[0];
        let attrs = &rs.resource.as_ref().expect("resource").attributes;
        assert_eq!(attrs[0].key, "service.name");
        let scope = &rs.scope_spans[0];
        assert_eq!(
            scope.scope.as_ref().map(|s| s.name.as_str()),
            Some("systemone")
        );
        let (child, root) = (&scope.spans[0], &scope.spans[1]);
        assert_eq!(child.trace_id, vec![0xab; 16]);
        assert_eq!(child.span_id, vec![0xcd; 8]);
        assert_eq!(child.parent_span_id, vec![7; 8]);
        assert!(root.parent_span_id.is_empty());
        assert_eq!(child.trace_state, "vendor=opaque");
        assert_eq!((child.name.as_str(), child.kind), ("chat glm", 3));
        assert_eq!(child.end_time_unix_nano - child.start_time_unix_nano, 1234);
        let values: Vec<(String, Option<Any>)> = child
            .attributes
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone().and_then(|v| v.value)))
            .collect();
        assert_eq!(
            values,
            vec![
                ("systemone.attempt".into(), Some(Any::IntValue(-3))),
                (
                    "gen_ai.request.model".into(),
                    Some(Any::StringValue("glm".into()))
                ),
                (
                    "gen_ai.provider.name".into(),
                    Some(Any::StringValue("vllm".into()))
                ),
                ("systemone.prior_sample".into(), Some(Any::BoolValue(true))),
                ("ratio".into(), Some(Any::DoubleValue(0.25))),
            ]
        );
        assert_eq!(child.events[0].name, "fallback");
        assert_eq!(child.events[0].attributes[0].key, "model");
        let status = child.status.as_ref().expect("status");
        assert_eq!((status.code, status.message.as_str()), (2, "timeout"));
        assert_eq!(
            bytes.len(),
            decoded.encoded_len(),
            "no byte more than prost writes"
        );
    }

    #[test]
    fn an_empty_batch_and_a_plain_span_decode() {
        let bytes = request(&[], "systemone", &[]);
        let decoded = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("decodes");
        assert!(decoded.resource_spans[0].scope_spans[0].spans.is_empty());
        let context = TraceContext {
            trace_id: [1; 16],
            span_id: [2; 8],
            sampled: true,
            trace_state: None,
        };
        let plain = SpanRecord::new(context, [0; 8], "validation", 0);
        let bytes = request(&[], "s", &[plain]);
        let decoded = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let got = &decoded.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(
            (got.name.as_str(), got.kind, got.status.is_none()),
            ("validation", 1, true)
        );
    }
}
