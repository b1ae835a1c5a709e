//! The spans the HTTP layer makes for the exported trace ([`crate::telemetry`]): the
//! request's SERVER span, and the flow's steps under it (validation, escalation, the
//! ledger's commit). The SERVER span is a `tracing` span, disabled unless traces are on; the
//! steps are [`StepSpan`]s, not made at all unless traces are on and the trace is sampled.
//!
//! A SERVER span says route, status, the contract's error code, the request id and the
//! caller's configured name (`systemone.caller`: an API key's name, `token` or
//! `token:<tier>`); never a key, a token or anything from the body.

use axum::http::{HeaderMap, Method};
use tracing::Span;

use crate::telemetry::{self, step, StepSpan, TARGET};

/// The SERVER span of one request on `route` (its template, e.g. `/v1/systemone`), a child
/// of the caller's trace when it sent a `traceparent`.
pub(super) fn server(method: &Method, route: &str, id: &str, headers: &HeaderMap) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = method.as_str(),
        http.route = route,
        systemone.request_id = id,
    );
    telemetry::continue_trace(&span, headers);
    span
}

/// One line of a batch job, run through door `route` in this process: a trace of its own
/// (the job's lines are not one request), with the line's request id.
pub(super) fn batch_line(route: &str, id: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "batch line",
        otel.name = format!("batch line {route}"),
        http.route = route,
        systemone.request_id = id,
    )
}

/// How the request ended, on its SERVER span: the status, the error code of a refusal (its
/// span status an error for a 5xx, as the HTTP conventions say of a server), the caller.
pub(super) fn ended(span: &Span, status: u16, code: Option<&str>, caller: Option<&str>) {
    telemetry::annotate(span, |span| {
        span.set("http.response.status_code", i64::from(status));
        if let Some(code) = code.filter(|c| !c.is_empty()) {
            span.set("error.type", code.to_owned());
            if status >= 500 {
                span.error(code);
            }
        }
        if let Some(caller) = caller {
            span.set("systemone.caller", caller.to_owned());
        }
    });
}

/// Reading, parsing and validating the body against the serving model (a fallback's, while
/// the requested model's circuit is open: then a `fallback` event says which).
pub(super) fn validation() -> StepSpan {
    step("validation", 0, |_| {})
}

/// Asking `questions` unsure answers of model `from` again of model `to` (configured names).
pub(super) fn escalation(from: &str, to: &str, questions: usize) -> StepSpan {
    step("escalation", 3, |span| {
        span.add("systemone.model", from.to_owned());
        span.add("systemone.escalation.model", to.to_owned());
        span.add("systemone.escalation.questions", telemetry::int(questions));
    })
}

/// Writing the ledger's record (and waiting for its commit, under `fail_closed`).
pub(super) fn ledger_commit() -> StepSpan {
    step("ledger commit", 0, |_| {})
}
