//! Traces across the service and a real vLLM (docs/operations/tracing.md, "The model server's
//! spans"): vLLM 0.32 started with `--otlp-traces-endpoint` over OTLP/HTTP
//! (`scripts/start-vllm.sh` with `SYSTEMONE_VLLM_OTLP_TRACES_ENDPOINT`) reads the
//! `traceparent` the service puts on each read, so its `llm_request` span is a child of the
//! service's read (CLIENT) span, in the caller's trace.
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_VLLM_URL`: base URL of that vLLM, ending in `/v1`;
//! * `SYSTEMONE_VLLM_OTLP_PORT`: the port on 127.0.0.1 vLLM exports its spans to; this test
//!   binds its OTLP receiver (`support::collector`) there, and the service exports to the
//!   same receiver, as an operator points both at one collector.
//!
//! Without them the test fails with a message that says so; it never skips. The service is
//! the binary (its exporter hangs off the process's one tracing subscriber); the test takes
//! its turn at the backend (`setup::vllm::backend_turn`) and waits for the spans with a
//! bound, never a fixed sleep.

use serde_json::json;

use crate::setup::llama::MODEL;
use crate::setup::vllm::backend_turn;
use crate::support;
use crate::support::collector::{Collector, Span};

/// OTLP's span kinds.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

/// The name vLLM 0.32 gives its span of one request (a SERVER span).
const VLLM_REQUEST_SPAN: &str = "llm_request";

/// The port vLLM exports to, from `SYSTEMONE_VLLM_OTLP_PORT`.
fn otlp_port() -> u16 {
    let port = support::require("SYSTEMONE_VLLM_OTLP_PORT", "scripts/test.sh");
    port.parse()
        .unwrap_or_else(|e| panic!("SYSTEMONE_VLLM_OTLP_PORT={port:?} is not a port: {e}"))
}

#[tokio::test]
async fn vllms_request_span_is_a_child_of_the_services_read_span() {
    let port = otlp_port();
    let (url, _turn) = backend_turn().await;
    let collector = Collector::start_on(port).await;
    let endpoint = collector.endpoint();
    let args = [
        "--backend",
        "vllm",
        "--backend-url",
        url.as_str(),
        "--model",
        MODEL,
        "--token-table",
        "gemma-3",
        "--token-check-interval-secs",
        "0",
        "--read-timeout-secs",
        "300",
        "--request-timeout-secs",
        "900",
        "--prior-sample-share",
        "0",
        "--ledger",
        "off",
        "--otlp-traces-endpoint",
        endpoint.as_str(),
    ]
    .map(String::from);
    let (child, addr) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        support::spawn_serve_with(&args, &[("OTEL_BSP_SCHEDULE_DELAY", "50")])
    })
    .await
    .expect("the binary starts");
    let _service = support::Spawned(child);

    // A trace of this run's own, so spans of earlier runs or other requests never match.
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let caller_span = &uuid::Uuid::new_v4().simple().to_string()[..16];
    let body = json!({
        "state": "The invoice was paid twice.",
        "questions": {"urgent": {"type": "noul", "instructions": "Is it urgent?"}},
    });
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/v1/systemone"))
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(&body)
        .send()
        .await
        .expect("the service answers");
    let reply = support::Reply::read(response).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    let in_trace = |spans: &[Span]| -> Vec<Span> {
        spans
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    };
    let spans = collector
        .wait_for(
            "the service's SERVER and read spans and vLLM's request span",
            |spans| {
                let spans = in_trace(spans);
                [SERVER, CLIENT].iter().all(|kind| {
                    spans
                        .iter()
                        .any(|s| s.kind == *kind && s.name != VLLM_REQUEST_SPAN)
                }) && spans.iter().any(|s| s.name == VLLM_REQUEST_SPAN)
            },
        )
        .await;
    let spans = in_trace(&spans);
    let reads: Vec<&Span> = spans.iter().filter(|s| s.kind == CLIENT).collect();
    assert_eq!(
        reads.len(),
        1,
        "one read for one yes/no question: {spans:#?}"
    );
    let read = reads[0];
    assert_eq!(read.name, format!("chat {MODEL}"));
    assert_eq!(read.attr("gen_ai.provider.name"), Some("vllm"));
    let engine: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == VLLM_REQUEST_SPAN)
        .collect();
    assert_eq!(engine.len(), 1, "one vLLM request per read: {spans:#?}");
    let engine = engine[0];
    assert_eq!(
        engine.parent_span_id, read.span_id,
        "vLLM's request span hangs under the service's read span: {spans:#?}"
    );
    assert_eq!(engine.kind, SERVER, "{engine:#?}");
    // The same request seen from both sides: vLLM's prompt is the read's input.
    assert_eq!(
        engine.attr("gen_ai.usage.prompt_tokens"),
        read.attr("gen_ai.usage.input_tokens"),
        "{engine:#?} {read:#?}"
    );
    let server = spans
        .iter()
        .find(|s| s.kind == SERVER && s.name == "POST /v1/systemone")
        .expect("the service's SERVER span");
    assert_eq!(server.parent_span_id, caller_span);
    assert_eq!(read.parent_span_id, server.span_id);
}
