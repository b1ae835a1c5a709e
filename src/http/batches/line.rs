//! One line of a batch through its door, in this process: the door's own handler makes its
//! answer (or refusal) as it would online, and the line's output line holds that body as
//! the door wrote it, byte for byte.

use axum::response::Response;

use crate::batch::ids::{line_output_id, line_request_id};
use crate::batch::rows::{BatchRow, LineCharge, LineDone, PendingLine};
use crate::error::ApiError;
use crate::http::auth::Caller;
use crate::http::context::RequestContext;
use crate::http::doors::decisions::Decisions;
use crate::http::doors::rerank::Rerank;
use crate::http::doors::systemone::SystemOne;
use crate::http::doors::{serve_in_process, Door};
use crate::http::AppState;

/// Runs `line` of `batch` as `caller`; its output line, for the output file (a 2xx) or the
/// error file (a refusal, with the door's error body).
pub(super) async fn run(
    state: &AppState,
    caller: &Caller,
    batch: &BatchRow,
    line: PendingLine,
) -> LineDone {
    let request_id = line_request_id(&batch.id, line.idx);
    let context = RequestContext::batch_line(&batch.endpoint, request_id.clone());
    let response = match line.refusal() {
        Some(e) => refuse(&batch.endpoint, e),
        None => through_door(state, &context, caller, &batch.endpoint, line.body).await,
    };
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    state
        .metrics
        .count_batch_line(&batch.endpoint, status.is_success());
    let used = context.batch_usage();
    LineDone {
        output: output_line(
            &line_output_id(&batch.id, line.idx),
            &line.custom_id,
            status.as_u16(),
            &request_id,
            &body,
        ),
        batch_id: batch.id.clone(),
        idx: line.idx,
        is_error: !status.is_success(),
        charge: (!used.is_empty()).then(|| LineCharge {
            id: request_id,
            name: caller.name().to_string(),
            counts: used.to_array(),
        }),
    }
}

/// The door at `endpoint` (one of [`crate::batch::lines::ENDPOINTS`]).
async fn through_door(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    endpoint: &str,
    body: String,
) -> Response {
    match endpoint {
        "/v1/decisions" => serve_in_process::<Decisions>(state, context, caller, body).await,
        "/v2/rerank" | "/v1/rerank" => {
            serve_in_process::<Rerank>(state, context, caller, body).await
        }
        _ => serve_in_process::<SystemOne>(state, context, caller, body).await,
    }
}

/// A refusal known before the line runs, in its door's shape.
fn refuse(endpoint: &str, e: ApiError) -> Response {
    match endpoint {
        "/v1/decisions" => Decisions::refuse(e),
        "/v2/rerank" | "/v1/rerank" => Rerank::refuse(e),
        _ => SystemOne::refuse(e),
    }
}

/// `{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}`,
/// the body inserted as the door wrote it.
fn output_line(id: &str, custom_id: &str, status: u16, request_id: &str, body: &[u8]) -> String {
    let quoted = |s: &str| serde_json::Value::from(s).to_string();
    let body = match std::str::from_utf8(body) {
        Ok(text) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => text.to_string(),
        Ok(text) => quoted(text),
        Err(_) => "null".to_string(),
    };
    format!(
        "{{\"id\":{},\"custom_id\":{},\"response\":{{\"status_code\":{status},\"request_id\":{},\"body\":{body}}},\"error\":null}}",
        quoted(id),
        quoted(custom_id),
        quoted(request_id),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_kept_as_written() {
        let body = br#"{"b":1.50,"a":[ ]}"#;
        let line = output_line("batch_req_1", "c\"1", 200, "req_1", body);
        assert!(line.contains(r#""body":{"b":1.50,"a":[ ]}}"#), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(v["custom_id"], "c\"1");
        assert_eq!(v["response"]["status_code"], 200);
    }
}
