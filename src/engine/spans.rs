//! The pipeline's spans in the exported trace ([`crate::telemetry`]): the wait for an
//! in-flight permit and the token-table check (each only when there is a wait), the
//! position prior's sample, each upstream read as a GenAI CLIENT span, decoding and
//! calibration, a native forward. Each is a [`StepSpan`] (not a `tracing` span: cheaper,
//! docs/benchmarks/load.md), nothing unless traces are on and the trace is sampled.
//!
//! A read's span follows the OpenTelemetry GenAI conventions: named
//! `{gen_ai.operation.name} {gen_ai.request.model}` (`chat glm-5.3-flash`), with the
//! requested and answering model and the usage the backend reported; the service's own
//! attributes (`systemone.*`) say which replica, which attempt, how many options, which
//! layout, whether the read was the prior's sample, the tokens served from the cache and
//! evaluated. Never a prompt, a label or anything else the caller wrote.

use crate::backend::{BackendError, ReadReply};
use crate::request::ValidRequest;
use crate::telemetry::{int, step, StepSpan, TARGET};

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
pub(super) fn read(req: &ValidRequest, at: &ReadSpan<'_>) -> StepSpan {
    step("read", 15, |span| {
        let model = req.model().upstream_model.as_str();
        span.rename(format!("{OPERATION} {model}"));
        span.client();
        span.add("gen_ai.operation.name", OPERATION);
        span.add("gen_ai.provider.name", at.dialect);
        span.add("gen_ai.request.model", model.to_owned());
        span.add("systemone.model", req.model().name.clone());
        if let Some(replica) = at.replica {
            span.add("systemone.replica", replica.to_owned());
        }
        span.add("systemone.attempt", i64::from(at.attempt));
        span.add("systemone.options", int(at.options));
        span.add("systemone.layout", req.layout().as_str().to_owned());
        span.add("systemone.prior_sample", at.sample);
    })
}

/// What the read returned, on its span: the answering model and usage, or the failure's
/// status `class`.
pub(super) fn read_ended(
    span: &StepSpan,
    result: &Result<ReadReply, BackendError>,
    class: &'static str,
) {
    let Ok(reply) = result else {
        failed(span, class);
        return;
    };
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    span.annotate(|span| {
        if let Some(model) = &reply.model {
            span.add("gen_ai.response.model", model.clone());
        }
        if let Some(usage) = &reply.usage {
            span.add("gen_ai.usage.input_tokens", count(usage.prompt_tokens));
            span.add("gen_ai.usage.output_tokens", count(usage.completion_tokens));
            span.add("systemone.cached_tokens", count(usage.cached_tokens));
            span.add("systemone.evaluated_tokens", count(usage.evaluated_tokens));
        }
        span.add("systemone.http_requests", count(reply.http_requests));
    });
}

/// Waiting for a slot under the process-wide in-flight cap (made only when no slot is free
/// at once: a read that did not wait has none).
pub(super) fn permit_wait() -> StepSpan {
    step("in-flight permit", 0, |_| {})
}

/// Waiting for the model's token-table check's verdict (its first, at startup; made only
/// while that check is pending).
pub(super) fn token_table_check() -> StepSpan {
    step("token-table check", 0, |_| {})
}

/// An event on the current span: the request is asked once more, rotated, as the position
/// prior's sample (its reads say `systemone.prior_sample`).
pub(super) fn prior_sampled() {
    tracing::info!(target: TARGET, "prior sample");
}

/// Decoding one question's reads and calibrating its answer.
pub(super) fn decode(options: usize, orders: usize) -> StepSpan {
    step("decode and calibrate", 2, |span| {
        span.add("systemone.options", int(options));
        span.add("systemone.orders", int(orders));
    })
}

/// The CLIENT span of a whole request forwarded to a native System One upstream.
pub(super) fn forward(req: &ValidRequest) -> StepSpan {
    step("forward", 3, |span| {
        let model = req.model().upstream_model.as_str();
        span.rename(format!("forward {model}"));
        span.client();
        span.add("gen_ai.request.model", model.to_owned());
        span.add("systemone.model", req.model().name.clone());
        span.add("systemone.questions", int(req.questions().len()));
    })
}

/// A failed read or forward, on its span: its status `class` (`timeout`, `5xx`, …).
pub(super) fn failed(span: &StepSpan, class: &'static str) {
    span.annotate(|span| {
        span.add("error.type", class);
        span.error(class);
    });
}
