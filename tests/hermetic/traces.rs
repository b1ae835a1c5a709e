//! Traces (docs/operations/tracing.md): the binary, started with `--otlp-traces-endpoint` pointing at
//! an OTLP/HTTP receiver in this test (`support::collector`), exports one trace per request
//! under the caller's `traceparent`: the SERVER span, the flow's and the pipeline's steps,
//! each upstream read a GenAI CLIENT span with the fake's token counts, and every upstream
//! request carries a `traceparent` naming its read. Nothing the caller wrote, nor its key,
//! is in anything exported. An unreachable collector changes no answer; its dropped spans
//! are counted in `/metrics`. Without the flag no upstream request carries a `traceparent`.
//!
//! The binary, not the service in this process: the exporter hangs off the process's one
//! tracing subscriber, which the in-process suites share.

use std::collections::HashSet;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Stdio};

use serde_json::{json, Value};

use crate::support;
use crate::support::collector::{Collector, Span};
use crate::support::fake_vllm::{render_toy_prompt, FakeVllm};

const KEY: &str = "sk-canary-trace-key-41d7";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const MODEL: &str = "glm-5.3-flash";

/// The binary serving one model on `fake`, killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
    client: reqwest::Client,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary on 127.0.0.1:0 in front of `fake`, with the API key [`KEY`] and a
/// ledger of its own, exporting traces to `endpoint` when given (batches sent every 10 ms).
async fn serve(fake: &FakeVllm, endpoint: Option<&str>) -> Served {
    serve_with(fake, endpoint, &[]).await
}

/// [`serve`], with the environment variables `env` set too (a sampler, say).
async fn serve_with(fake: &FakeVllm, endpoint: Option<&str>, env: &[(&str, &str)]) -> Served {
    let ledger = support::temp_file("ledger.sqlite", "");
    let mut command = support::binary();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--backend", "vllm"])
        .args(["--backend-url", &fake.base_url(), "--model", MODEL])
        .args([
            "--token-table",
            "golden-fake",
            "--token-check-interval-secs",
            "0",
        ])
        .args(["--api-keys", KEY, "--prior-sample-share", "0"])
        .arg("--ledger")
        .arg(format!("sqlite:{}", ledger.display()));
    if let Some(endpoint) = endpoint {
        command.args(["--otlp-traces-endpoint", endpoint]);
    }
    for name in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_TRACES_SAMPLER",
        "OTEL_SDK_DISABLED",
        "SYSTEMONE_OTLP_TRACES_ENDPOINT",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    let mut child = command
        .env("OTEL_BSP_SCHEDULE_DELAY", "10")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stderr = child.stderr.take().expect("stderr");
    let addr = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stderr).lines();
        let addr = lines.by_ref().map_while(Result::ok).find_map(|line| {
            let at = line.split("address=").nth(1)?;
            at.split_whitespace().next()?.parse().ok()
        });
        std::thread::spawn(move || lines.for_each(drop));
        addr
    })
    .await
    .expect("stderr reader")
    .expect("the listening line");
    Served {
        child,
        addr,
        client: reqwest::Client::new(),
    }
}

impl Served {
    /// POSTs `body` to `/v1/systemone` with the key, and `traceparent` when given.
    async fn ask(&self, body: &Value, traceparent: Option<&str>) -> support::Reply {
        let mut request = self
            .client
            .post(format!("http://{}/v1/systemone", self.addr))
            .bearer_auth(KEY)
            .json(body);
        if let Some(traceparent) = traceparent {
            request = request
                .header("traceparent", traceparent)
                .header("tracestate", "vendor=opaque");
        }
        support::Reply::read(request.send().await.expect("service answers")).await
    }

    async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.addr);
        let response = self.client.get(url).send().await.expect("metrics");
        response.text().await.expect("metrics text")
    }
}

/// Two questions (a choice of three, a yes/no): one upstream read each.
fn two_questions() -> Value {
    json!({
        "state": support::bodies::INVOICE,
        "questions": {
            "topic": {"type": "choice", "instructions": "Pick one.", "criteria": support::criteria(3)},
            "urgent": {"type": "noul", "instructions": "Is it urgent?"},
        },
    })
}

/// Once the request's SERVER span and one read span per upstream request have arrived.
async fn whole_trace(collector: &Collector, fake: &FakeVllm) -> Vec<Span> {
    collector
        .wait_for("the request's whole trace", |spans| {
            let reads = spans.iter().filter(|s| s.kind == 3).count();
            spans.iter().any(|s| s.kind == 2) && reads == fake.chat_requests()
        })
        .await
}

#[tokio::test]
async fn one_request_is_one_trace_under_the_callers_parent_with_genai_reads() {
    let fake = FakeVllm::start().await;
    let collector = Collector::start().await;
    let served = serve(&fake, Some(&collector.endpoint())).await;
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let reply = served.ask(&two_questions(), Some(&traceparent)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let spans = whole_trace(&collector, &fake).await;

    assert!(spans.iter().all(|s| s.trace_id == TRACE_ID), "{spans:#?}");
    let server = spans.iter().find(|s| s.kind == 2).expect("a SERVER span");
    assert_eq!(server.name, "POST /v1/systemone");
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    assert_eq!(server.attr("http.route"), Some("/v1/systemone"));
    assert_eq!(server.attr("http.response.status_code"), Some("200"));
    assert_eq!(
        server.attr("systemone.request_id"),
        reply.header("x-request-id")
    );
    assert_eq!(server.attr("systemone.caller"), Some("key-1"));
    assert_eq!(
        server
            .resource
            .iter()
            .find(|(k, _)| k == "service.name")
            .map(|(_, v)| v.as_str()),
        Some("systemone")
    );
    let ids: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    for span in &spans {
        assert!(
            span.kind == 2 || ids.contains(span.parent_span_id.as_str()),
            "{} hangs outside the tree: {spans:#?}",
            span.name
        );
    }
    let names: HashSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for step in ["validation", "decode and calibrate", "ledger commit"] {
        assert!(names.contains(step), "no {step:?} span in {names:?}");
    }
    // The two reads go one after the other, under a cap of 16: neither waited for a slot,
    // so there is no wait's span (`a_read_that_waits_for_a_slot_has_the_waits_span`).
    assert!(!names.contains("in-flight permit"), "{names:?}");

    let reads: Vec<&Span> = spans.iter().filter(|s| s.kind == 3).collect();
    assert_eq!(reads.len(), 2, "one read per question");
    for read in &reads {
        assert_eq!(read.name, format!("chat {MODEL}"));
        assert_eq!(read.parent_span_id, server.span_id);
        assert_eq!(read.attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(read.attr("gen_ai.request.model"), Some(MODEL));
        assert_eq!(read.attr("gen_ai.response.model"), Some(MODEL));
        assert_eq!(read.attr("gen_ai.provider.name"), Some("vllm"));
        assert_eq!(read.attr("gen_ai.usage.output_tokens"), Some("1"));
        assert_eq!(read.attr("systemone.layout"), Some("accuracy"));
        assert_eq!(read.attr("systemone.attempt"), Some("1"));
        assert!(matches!(read.attr("systemone.options"), Some("2" | "3")));
    }
    // The fake reports a prompt of `len / 4` tokens for each read.
    let mut reported: Vec<String> = fake
        .chat_bodies()
        .iter()
        .map(|body| (render_toy_prompt(body).len() / 4).to_string())
        .collect();
    let mut exported: Vec<String> = reads
        .iter()
        .map(|r| {
            r.attr("gen_ai.usage.input_tokens")
                .expect("input tokens")
                .to_owned()
        })
        .collect();
    reported.sort();
    exported.sort();
    assert_eq!(exported, reported);

    // Every upstream request names its own read span as the parent, in the same trace.
    let read_ids: HashSet<&str> = reads.iter().map(|r| r.span_id.as_str()).collect();
    let sent = fake.routing_headers();
    assert_eq!(sent.len(), 2);
    let mut parents = HashSet::new();
    for headers in &sent {
        let traceparent = headers
            .iter()
            .find(|(name, _)| name == "traceparent")
            .map(|(_, value)| value.as_str())
            .unwrap_or_else(|| panic!("an upstream request without a traceparent: {headers:?}"));
        let fields: Vec<&str> = traceparent.split('-').collect();
        assert_eq!(fields[1], TRACE_ID, "{traceparent}");
        assert!(
            read_ids.contains(fields[2]),
            "{traceparent} names no read span"
        );
        parents.insert(fields[2]);
    }
    assert_eq!(parents.len(), 2, "each read its own span");
}

/// Under a cap of one read in flight, of two requests at once one waits for the other's
/// slow read: its trace has the `in-flight permit` span, under its SERVER span.
#[tokio::test]
async fn a_read_that_waits_for_a_slot_has_the_waits_span() {
    let fake = FakeVllm::start().await;
    fake.set_delay(std::time::Duration::from_millis(300));
    let collector = Collector::start().await;
    let one = [("SYSTEMONE_MAX_IN_FLIGHT", "1")];
    let served = serve_with(&fake, Some(&collector.endpoint()), &one).await;
    let body = two_questions();
    let (a, b) = tokio::join!(served.ask(&body, None), served.ask(&body, None));
    assert_eq!((a.status, b.status), (200, 200), "{} {}", a.text, b.text);
    let spans = collector
        .wait_for("both traces and a wait", |spans| {
            spans.iter().filter(|s| s.kind == 2).count() == 2
                && spans.iter().filter(|s| s.kind == 3).count() == 4
                && spans.iter().any(|s| s.name == "in-flight permit")
        })
        .await;
    let servers: Vec<&Span> = spans.iter().filter(|s| s.kind == 2).collect();
    for wait in spans.iter().filter(|s| s.name == "in-flight permit") {
        assert!(
            servers
                .iter()
                .any(|s| s.span_id == wait.parent_span_id && s.trace_id == wait.trace_id),
            "the wait hangs outside its request: {spans:#?}"
        );
    }
}

/// Everything exported (spans, attributes, events, the resource) holds none of the caller's
/// text (state, instructions, option labels and descriptions, question ids) nor its key.
#[tokio::test]
async fn nothing_the_caller_wrote_is_exported() {
    const CANARIES: [&str; 6] = [
        "canary-trace-state-92ab",
        "canary-trace-instruction-92ab",
        "canary-trace-label-92ab",
        "canary-trace-description-92ab",
        "canary-trace-question-92ab",
        KEY,
    ];
    let fake = FakeVllm::start().await;
    let collector = Collector::start().await;
    let served = serve(&fake, Some(&collector.endpoint())).await;
    let body = json!({
        "state": format!("The customer says: {}", CANARIES[0]),
        "questions": {
            CANARIES[4]: {
                "type": "choice",
                "instructions": format!("Pick the team. {}", CANARIES[1]),
                "criteria": {CANARIES[2]: format!("billing {}", CANARIES[3]), "support": "help desk"},
            },
            "plain": {"type": "noul", "instructions": "Is it urgent?"},
        },
    });
    let reply = served.ask(&body, None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    // A refusal too: its error names the field, and the span its code.
    let mut refused = body.clone();
    refused["questions"][CANARIES[4]]["type"] = json!("canary-trace-type-92ab");
    let reply = served.ask(&refused, None).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    let spans = collector
        .wait_for("both requests' SERVER spans", |spans| {
            spans.iter().filter(|s| s.kind == 2).count() == 2
                && spans.iter().filter(|s| s.kind == 3).count() == fake.chat_requests()
        })
        .await;
    let refusal = spans
        .iter()
        .find(|s| s.kind == 2 && s.attr("http.response.status_code") == Some("422"))
        .expect("the refusal's SERVER span");
    assert_eq!(
        refusal.attr("error.type"),
        Some("system_one_unsupported_question_type")
    );
    let raw = String::from_utf8_lossy(&collector.raw()).into_owned();
    assert!(raw.contains("POST /v1/systemone"), "the exports are read");
    for canary in CANARIES.iter().chain(["canary-trace-type-92ab"].iter()) {
        assert!(!raw.contains(canary), "{canary} was exported");
    }
    let text = format!("{spans:?}");
    assert!(!text.contains("canary"), "{text}");
}

/// A collector that cannot be reached: the answer is the same as without tracing, and the
/// spans that could not be sent are counted as dropped.
#[tokio::test]
async fn an_unreachable_collector_changes_no_answer_and_drops_are_counted() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let dead = format!("http://{}/v1/traces", closed.local_addr().expect("addr"));
    drop(closed);
    let (fake, plain_fake) = (FakeVllm::start().await, FakeVllm::start().await);
    let traced = serve(&fake, Some(&dead)).await;
    let plain = serve(&plain_fake, None).await;
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let with = traced.ask(&two_questions(), Some(&traceparent)).await;
    let without = plain.ask(&two_questions(), Some(&traceparent)).await;
    assert_eq!(with.status, 200, "{}", with.text);
    assert_eq!(with.body["questions"], without.body["questions"]);

    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let dropped = loop {
        let text = traced.metrics().await;
        let dropped = text
            .lines()
            .find(|l| {
                l.starts_with("systemone_trace_spans_dropped_total{reason=\"export_failed\"}")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        if dropped > 0.0 || tokio::time::Instant::now() > deadline {
            break dropped;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(dropped > 0.0, "no dropped span counted");

    // Without tracing, no upstream request carries a traceparent, whatever the caller sent.
    let sent = plain_fake.routing_headers();
    assert!(!sent.is_empty());
    assert!(
        sent.iter().flatten().all(|(name, _)| name != "traceparent"),
        "{sent:?}"
    );
}

/// The `traceparent` of each upstream request `fake` received, split into its four fields.
fn upstream_traceparents(fake: &FakeVllm) -> Vec<Vec<String>> {
    fake.routing_headers()
        .iter()
        .map(|headers| {
            let traceparent = headers
                .iter()
                .find(|(name, _)| name == "traceparent")
                .map(|(_, value)| value.as_str())
                .unwrap_or_else(|| {
                    panic!("an upstream request without a traceparent: {headers:?}")
                });
            traceparent.split('-').map(str::to_owned).collect()
        })
        .collect()
}

/// A request the sampler leaves out is not exported, and its upstream requests still carry
/// its trace, flagged not sampled (`-00`), so a model server that traces leaves it out too:
/// a caller's unsampled `traceparent` under the default parent-based sampler, and a request
/// of a ratio-0 sampler without one.
#[tokio::test]
async fn a_sampled_out_request_is_passed_upstream_as_not_sampled() {
    let fake = FakeVllm::start().await;
    let collector = Collector::start().await;
    let served = serve(&fake, Some(&collector.endpoint())).await;
    let unsampled = format!("00-{TRACE_ID}-{CALLER_SPAN}-00");
    let reply = served.ask(&two_questions(), Some(&unsampled)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent = upstream_traceparents(&fake);
    assert_eq!(sent.len(), 2);
    for fields in &sent {
        assert_eq!(fields[1], TRACE_ID, "{fields:?}");
        assert_ne!(fields[2], CALLER_SPAN, "{fields:?}");
        assert_eq!(fields[3], "00", "sampled out, flagged so: {fields:?}");
    }
    // A sampled request afterwards: once its trace has arrived, the first one's spans,
    // ended before it started, would have too.
    let sampled_trace = "0af7651916cd43dd8448eb211c80319c";
    let sampled = format!("00-{sampled_trace}-{CALLER_SPAN}-01");
    let reply = served.ask(&two_questions(), Some(&sampled)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let spans = collector
        .wait_for("the sampled request's trace", |spans| {
            spans.iter().any(|s| s.kind == 2) && spans.iter().filter(|s| s.kind == 3).count() == 2
        })
        .await;
    assert!(
        spans.iter().all(|s| s.trace_id == sampled_trace),
        "{spans:#?}"
    );
    let sent = upstream_traceparents(&fake);
    assert!(
        sent[2..]
            .iter()
            .all(|f| f[1] == sampled_trace && f[3] == "01"),
        "{sent:?}"
    );

    let fake = FakeVllm::start().await;
    let never = [
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0"),
    ];
    let served = serve_with(&fake, Some(&collector.endpoint()), &never).await;
    let reply = served.ask(&two_questions(), None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent = upstream_traceparents(&fake);
    assert_eq!(sent.len(), 2);
    for fields in &sent {
        assert_eq!(fields[1].len(), 32, "{fields:?}");
        assert_ne!(fields[1], "0".repeat(32), "{fields:?}");
        assert_eq!(fields[3], "00", "sampled out, flagged so: {fields:?}");
    }
    assert_eq!(sent[0][1], sent[1][1], "one trace: {sent:?}");
}
