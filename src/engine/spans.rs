//! The pipeline's spans in the exported trace ([`crate::telemetry`]): the wait for an
//! in-flight permit and the token-table check (each only when there is a wait), the
//! position prior's sample, each upstream read as a GenAI CLIENT span, decoding and
//! calibration, a native forward. Each is a disabled `tracing` span unless traces are on, and
//! none at all in a trace the sampler left out ([`crate::telemetry::sampled_out`]).
//!
//! A read's span follows the OpenTelemetry GenAI conventions: named
//! `{gen_ai.operation.name} {gen_ai.request.model}` (`chat glm-5.3-flash`), with the
//! requested and answering model and the usage the backend reported; the service's own
//! attributes (`systemone.*`) say which replica, which attempt, how many options, which
//! layout, whether the read was the prior's sample, the tokens served from the cache and
//! evaluated. Never a prompt, a label or anything else the caller wrote.

use tracing::Span;

use crate::backend::{BackendError, ReadReply};
use crate::request::ValidRequest;
use crate::telemetry::{annotate, int, TARGET};

/// What a read's span says of where it went and what it asks.
pub(super) struct ReadSpan<'a> {
    /// The backend's dialect (`vllm`, `llamacpp`, `openai`).
    pub dialect: &'static str,
    /// The replica's label, of a model with several.
    pub replica: Option<&'a str>,
    /// Which replica of the request's order this is (1 the first).
    pub attempt: u32,
    /// Options of the question read.
    pub options: usize,
    /// Whether the read is the position prior's sample (an order the caller did not ask).
    pub sample: bool,
}

/// The GenAI operation every read is: a (masked, prefilled) chat completion.
const OPERATION: &str = "chat";

/// The CLIENT span of one upstream read of `req`.
pub(super) fn read(req: &ValidRequest, at: &ReadSpan<'_>) -> Span {
    if crate::telemetry::sampled_out() {
        return Span::none();
    }
    let model = req.model().upstream_model.as_str();
    tracing::info_span!(
        target: TARGET,
        "read",
        otel.name = format!("{OPERATION} {model}"),
        otel.kind = "client",
        gen_ai.operation.name = OPERATION,
        gen_ai.provider.name = at.dialect,
        gen_ai.request.model = model,
        systemone.model = req.model().name.as_str(),
        systemone.replica = at.replica,
        systemone.attempt = i64::from(at.attempt),
        systemone.options = int(at.options),
        systemone.layout = req.layout().as_str(),
        systemone.prior_sample = at.sample,
    )
}

/// What the read returned, on its span: the answering model and usage, or the failure's
/// status `class`.
pub(super) fn read_ended(
    span: &Span,
    result: &Result<ReadReply, BackendError>,
    class: &'static str,
) {
    let Ok(reply) = result else {
        failed(span, class);
        return;
    };
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    annotate(span, |span| {
        if let Some(model) = &reply.model {
            span.set("gen_ai.response.model", model.clone());
        }
        if let Some(usage) = &reply.usage {
            span.set("gen_ai.usage.input_tokens", count(usage.prompt_tokens));
            span.set("gen_ai.usage.output_tokens", count(usage.completion_tokens));
            span.set("systemone.cached_tokens", count(usage.cached_tokens));
            span.set("systemone.evaluated_tokens", count(usage.evaluated_tokens));
        }
        span.set("systemone.http_requests", count(reply.http_requests));
    });
}

/// Waiting for a slot under the process-wide in-flight cap (made only when no slot is free
/// at once: a read that did not wait has none).
pub(super) fn permit_wait() -> Span {
    if crate::telemetry::sampled_out() {
        return Span::none();
    }
    tracing::info_span!(target: TARGET, "in-flight permit")
}

/// Waiting for the model's token-table check's verdict (its first, at startup; made only
/// while that check is pending).
pub(super) fn token_table_check() -> Span {
    if crate::telemetry::sampled_out() {
        return Span::none();
    }
    tracing::info_span!(target: TARGET, "token-table check")
}

/// An event on the current span: the request is asked once more, rotated, as the position
/// prior's sample (its reads say `systemone.prior_sample`).
pub(super) fn prior_sampled() {
    tracing::info!(target: TARGET, "prior sample");
}

/// Decoding one question's reads and calibrating its answer.
pub(super) fn decode(options: usize, orders: usize) -> Span {
    if crate::telemetry::sampled_out() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "decode and calibrate",
        systemone.options = int(options),
        systemone.orders = int(orders),
    )
}

/// The CLIENT span of a whole request forwarded to a native System One upstream.
pub(super) fn forward(req: &ValidRequest) -> Span {
    if crate::telemetry::sampled_out() {
        return Span::none();
    }
    let model = req.model().upstream_model.as_str();
    tracing::info_span!(
        target: TARGET,
        "forward",
        otel.name = format!("forward {model}"),
        otel.kind = "client",
        gen_ai.request.model = model,
        systemone.model = req.model().name.as_str(),
        systemone.questions = int(req.questions().len()),
    )
}

/// A failed read or forward, on its span: its status `class` (`timeout`, `5xx`, …).
pub(super) fn failed(span: &Span, class: &'static str) {
    annotate(span, |span| {
        span.set("error.type", class);
        span.error(class);
    });
}
