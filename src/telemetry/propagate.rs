//! W3C trace context: a caller's `traceparent` and `tracestate` in, the current span's out
//! on every upstream request.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::header::HeaderValue;

use super::annotate::with_record;
use super::context::SAMPLER;
use super::record::TraceContext;
use super::ON;

/// Makes the caller's trace (its `traceparent` and `tracestate`) the parent of `span`, when
/// spans are exported and the caller sent one; an invalid one is ignored (a new trace).
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if span.is_disabled() {
        return;
    }
    let Some(parent) = headers
        .get("traceparent")
        .and_then(|v| parse(v.to_str().ok()?))
    else {
        return;
    };
    let state = headers
        .get("tracestate")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 512)
        .map(Arc::from);
    with_record(span, |record| {
        let (trace_id, span_id, flag) = parent;
        record.context.trace_id = trace_id;
        record.context.sampled = SAMPLER.get().is_some_and(|s| s.remote(&trace_id, flag));
        record.context.trace_state = state;
        record.parent = span_id;
    });
}

/// Puts the current step's (or span's) `traceparent` (and `tracestate`) on an upstream
/// request's headers, when spans are exported and one is current.
pub fn inject_current(headers: &mut http::HeaderMap) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let Some(context) = super::step::current_context() else {
        return;
    };
    if let Ok(value) = HeaderValue::from_str(&traceparent(&context)) {
        headers.insert("traceparent", value);
    }
    if let Some(state) = context.trace_state.as_deref() {
        if let Ok(value) = HeaderValue::from_str(state) {
            headers.insert("tracestate", value);
        }
    }
}

/// `context` as a `traceparent` (version 00), written digit by digit into one `String`
/// (one per upstream request; `hex::encode` made a `String` of `char`s per id).
fn traceparent(context: &TraceContext) -> String {
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    hex_into(&mut out, &context.trace_id);
    out.push('-');
    hex_into(&mut out, &context.span_id);
    out.push_str(if context.sampled { "-01" } else { "-00" });
    out
}

/// Appends `bytes` to `out` as lowercase hex.
fn hex_into(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// A `traceparent`'s trace id, parent span id and sampled flag, as W3C's rules read it: a
/// version of two hex digits other than `ff` (a later version may append fields), ids not
/// all zeros, lowercase hex.
fn parse(header: &str) -> Option<([u8; 16], [u8; 8], bool)> {
    let mut parts = header.trim().split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    let version = u8::from_str_radix(version, 16)
        .ok()
        .filter(|_| version.len() == 2)?;
    if version == 0xff || (version == 0 && parts.next().is_some()) {
        return None;
    }
    let trace_id: [u8; 16] = unhex(trace)?;
    let span_id: [u8; 8] = unhex(span)?;
    let flags: [u8; 1] = unhex(flags)?;
    let zero = trace_id == [0; 16] || span_id == [0; 8];
    (!zero).then_some((trace_id, span_id, flags[0] & 1 == 1))
}

/// Exactly `N` bytes of lowercase hex.
fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != N * 2 {
        return None;
    }
    let value = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks(2).enumerate() {
        out[i] = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_bad_ones_are_refused() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (trace_id, span_id, sampled) = parse(header).expect("valid");
        let context = TraceContext {
            trace_id,
            span_id,
            sampled,
            trace_state: None,
        };
        assert_eq!(traceparent(&context), header);
        assert_eq!(
            parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").map(|p| p.2),
            Some(false)
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert!(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_some());
    }
}
