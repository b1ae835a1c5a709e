//! The circuit breaker, the fallback model, the gateway's metrics and graceful shutdown,
//! over HTTP against fake vLLM servers, on a paused tokio clock (cool-downs and slow
//! backends are crossed without real waiting).
//!
//! * Once the share of failed requests (backend 500s, read timeouts) over the window
//!   reaches the failure rate, with at least the minimum of calls in it, a model's circuit
//!   opens: requests are refused up front with 503 `system_one_circuit_open` and
//!   `Retry-After`, and the backend is not contacted. Faults that land together at 5% of a
//!   concurrent load never open it; a backend failing every request does. After the cool-down one probe goes
//!   through (others are still refused while it runs); its success closes the circuit,
//!   its failure opens it again.
//! * A model with `fallback = "<other>"` is served by the other model while its circuit is
//!   open; the answer's `model` names the backend model that served it.
//! * `/metrics` shows questions per request, options per question, option mass, upstream
//!   latency and status by dialect, circuit state by model and requests by key name, and
//!   no label carries caller content.
//! * Graceful shutdown: after the signal no new connection is accepted, an in-flight
//!   request to a slow backend still gets its answer, and the server future completes
//!   after it; a request slower than the grace period does not hold the exit.

use crate::support;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use systemone::config::CircuitSettings;

use crate::support::fake_vllm::{FakeVllm, Fault};
use crate::support::replicas::Stoppable;
use crate::support::{ask, get, metrics, post, setup, Reply, Service};

/// The public model name of the single-model configuration.
const MODEL: &str = "glm-5.3-flash";
/// Caller content that must never become a metrics label.
const CANARY: &str = "CANARY-metrics-9d2e";

fn one_question() -> Value {
    json!({
        "state": "A customer writes: my invoice is wrong.",
        "questions": {"team": {"type": "choice", "instructions": "Which team?",
                                "criteria": {"billing": null, "tech": null, "other": null}}},
    })
}

/// Polls (in paused time) until `done` holds; panics after a minute of paused time.
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..60_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("timed out waiting for {what}");
}

/// After one answer, two 500s and a read timeout (3 failures of 4 requests) open a circuit
/// set to 75% of at least 4 calls in a minute (the window outlasts the 30 s timeout); the
/// next request is a 503 `system_one_circuit_open` with `Retry-After` ≤ the 10 s cool-down
/// and never reaches the backend. After the cool-down a slow probe goes through while a concurrent request is
/// still refused (`Retry-After: 1`); the probe's 200 closes the circuit and requests flow
/// again. `/metrics` shows the state at each step.
#[tokio::test(start_paused = true)]
async fn the_breaker_opens_refuses_up_front_half_opens_and_closes() {
    let (fake, service) = setup(&[
        "--circuit-failure-rate",
        "75",
        "--circuit-min-calls",
        "4",
        "--circuit-window-secs",
        "60",
        "--circuit-cooldown-secs",
        "10",
    ])
    .await;
    assert_eq!(ask(&service, &one_question()).await.status, 200);
    let state = |m: &str| format!("systemone_circuit_state{{model=\"{MODEL}\"}} {m}");
    assert!(metrics(&service).await.contains(&state("0")));

    fake.set_fault(Fault::ServerError);
    for _ in 0..2 {
        ask(&service, &one_question()).await.assert_code(
            502,
            "system_one_upstream_error",
            "protocol",
        );
    }
    fake.set_fault(Fault::Slow(Duration::from_secs(3600)));
    ask(&service, &one_question())
        .await
        .assert_code(504, "system_one_upstream_timeout", "timeout");
    let sent = fake.chat_requests();

    let refused = ask(&service, &one_question()).await;
    refused.assert_code(503, "system_one_circuit_open", "unavailable");
    assert!(
        (1..=10).contains(&refused.retry_secs()),
        "{}",
        refused.retry_secs()
    );
    assert_eq!(fake.chat_requests(), sent, "refused up front");
    assert!(metrics(&service).await.contains(&state("1")));

    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(metrics(&service).await.contains(&state("2")));
    fake.set_fault(Fault::Slow(Duration::from_secs(5)));
    let probe = tokio::spawn({
        let client = service.client.clone();
        let url = service.url("/v1/systemone");
        async move { post(&client, &url, &one_question()).await }
    });
    wait_until("the probe at the backend", || fake.chat_requests() > sent).await;
    let during = ask(&service, &one_question()).await;
    during.assert_code(503, "system_one_circuit_open", "unavailable");
    assert_eq!(during.retry_secs(), 1);
    let probe = probe.await.expect("probe task");
    assert_eq!(probe.status, 200, "{}", probe.text);
    assert_eq!(
        fake.chat_requests(),
        sent + 1,
        "only the probe went through"
    );

    fake.set_fault(Fault::None);
    for _ in 0..3 {
        assert_eq!(ask(&service, &one_question()).await.status, 200);
    }
    assert!(metrics(&service).await.contains(&state("0")));
}

/// A probe that fails opens the circuit for another cool-down.
#[tokio::test(start_paused = true)]
async fn a_failed_probe_opens_the_circuit_again() {
    let (fake, service) = setup(&["--circuit-min-calls", "2"]).await;
    fake.set_fault(Fault::ServerError);
    for _ in 0..2 {
        assert_eq!(ask(&service, &one_question()).await.status, 502);
    }
    ask(&service, &one_question())
        .await
        .assert_code(503, "system_one_circuit_open", "unavailable");
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(
        ask(&service, &one_question()).await.status,
        502,
        "the probe"
    );
    let sent = fake.chat_requests();
    let refused = ask(&service, &one_question()).await;
    refused.assert_code(503, "system_one_circuit_open", "unavailable");
    assert!((1..=10).contains(&refused.retry_secs()));
    assert_eq!(fake.chat_requests(), sent);
}

/// Backend answers that say nothing about its health (a 200 without logprobs, a protocol
/// break) and the breaker turned off (`--circuit-failure-rate 0`) never open the circuit.
#[tokio::test(start_paused = true)]
async fn protocol_breaks_and_a_disabled_breaker_keep_it_closed() {
    let (fake, service) = setup(&["--circuit-min-calls", "2"]).await;
    fake.set_fault(Fault::NoLogprobs);
    for _ in 0..4 {
        ask(&service, &one_question()).await.assert_code(
            502,
            "system_one_upstream_protocol",
            "protocol",
        );
    }
    let (fake_off, service_off) = setup(&["--circuit-failure-rate", "0"]).await;
    fake_off.set_fault(Fault::ServerError);
    for _ in 0..8 {
        assert_eq!(ask(&service_off, &one_question()).await.status, 502);
    }
    assert_eq!(fake_off.chat_requests(), 8);
    fake.set_fault(Fault::None);
    assert_eq!(ask(&service, &one_question()).await.status, 200);
}

/// Sends `total` requests from `callers` concurrent loops; the responses counted by status
/// and error code (`""` for an answer).
async fn load(service: &Service, total: usize, callers: usize) -> BTreeMap<(u16, String), usize> {
    let next = Arc::new(AtomicUsize::new(0));
    let url = service.url("/v1/systemone");
    let loops: Vec<_> = (0..callers)
        .map(|_| {
            let (client, url, next) = (service.client.clone(), url.clone(), next.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while next.fetch_add(1, Ordering::SeqCst) < total {
                    let reply = post(&client, &url, &one_question()).await;
                    let code = reply.body["error"]["code"].as_str().unwrap_or("");
                    seen.push((reply.status, code.to_string()));
                }
                seen
            })
        })
        .collect();
    let mut counts = BTreeMap::new();
    for caller in loops {
        for outcome in caller.await.expect("caller task") {
            *counts.entry(outcome).or_insert(0) += 1;
        }
    }
    counts
}

/// How many responses of `counts` had this status and code.
fn seen(counts: &BTreeMap<(u16, String), usize>, status: u16, code: &str) -> usize {
    counts
        .get(&(status, code.to_string()))
        .copied()
        .unwrap_or(0)
}

/// The breaker judges a failure rate, not a run of failures. At the default
/// settings, 400 requests from 32 concurrent callers while the backend fails 5 in a row of
/// every 100 (5%; each such run alone would open a five-in-a-row breaker): the circuit
/// never opens, every request reaches the backend and 95% are answered. Then a backend
/// failing every request, the same load: the circuit opens after the minimum of calls
/// (plus those already admitted), and the rest are refused up front. The cool-down is an
/// hour there, so a slow run cannot reach a probe.
#[tokio::test]
async fn five_percent_faults_at_concurrency_never_open_it_a_dead_backend_does() {
    const TOTAL: usize = 400;
    const CALLERS: usize = 32;
    let (fake, service) = setup(&[]).await;
    fake.set_fault(Fault::Bursts {
        period: 100,
        run: 5,
    });
    let counts = load(&service, TOTAL, CALLERS).await;
    let answered = seen(&counts, 200, "");
    assert_eq!(answered, TOTAL * 95 / 100, "{counts:?}");
    assert!(answered * 10 >= TOTAL * 9);
    assert_eq!(seen(&counts, 502, "system_one_upstream_error"), TOTAL / 20);
    assert_eq!(seen(&counts, 503, "system_one_circuit_open"), 0);
    assert_eq!(fake.chat_requests(), TOTAL, "none refused up front");
    let open = format!("systemone_circuit_state{{model=\"{MODEL}\"}} 0");
    assert!(metrics(&service).await.contains(&open));

    let (dead, service) = setup(&["--circuit-cooldown-secs", "3600"]).await;
    dead.set_fault(Fault::ServerError);
    let counts = load(&service, TOTAL, CALLERS).await;
    let failed = seen(&counts, 502, "system_one_upstream_error");
    let min_calls = CircuitSettings::default().min_calls as usize;
    assert!(
        (min_calls..min_calls + CALLERS).contains(&failed),
        "{counts:?}"
    );
    assert_eq!(
        failed + seen(&counts, 503, "system_one_circuit_open"),
        TOTAL,
        "{counts:?}"
    );
    assert_eq!(dead.chat_requests(), failed, "the refused never reached it");
}

/// Writes a registry with a primary (backend `a`, fallback `backup`) and a backup model
/// (backend `b`).
fn fallback_registry(a: &FakeVllm, b: &FakeVllm) -> std::path::PathBuf {
    support::temp_file(
        "models.toml",
        &format!(
            r#"
[[model]]
name = "primary"
aliases = ["main"]
backend = "vllm"
backend_url = "{}"
upstream_model = "org/primary"
token_table = "golden-fake"
fallback = "backup"

[[model]]
name = "backup"
backend = "vllm"
backend_url = "{}"
upstream_model = "org/backup"
token_table = "golden-fake"
"#,
            a.base_url(),
            b.base_url()
        ),
    )
}

/// Two fakes and a service whose primary model (on `a`) falls back to the backup (on `b`),
/// each circuit opening once 60% of at least `min_calls` requests in its window failed (so
/// with 2, an answer and two failures open it, an answer and one failure do not).
async fn fallback_setup(min_calls: &str) -> (FakeVllm, FakeVllm, Service) {
    let a = FakeVllm::start().await;
    let b = FakeVllm::start().await;
    let path = fallback_registry(&a, &b);
    let service = support::start(support::config(
        &a.base_url(),
        &[
            "--config",
            path.to_str().expect("utf-8"),
            "--circuit-min-calls",
            min_calls,
            "--circuit-failure-rate",
            "60",
        ],
    ))
    .await;
    (a, b, service)
}

/// While the primary's circuit is open its fallback serves (by default model, name and
/// alias alike) and the answer's `model` (the backend's id) and `x-systemone-model` (the
/// configured name, which a request may use) say so; the primary's backend is not
/// contacted. After the cool-down the primary serves again.
#[tokio::test(start_paused = true)]
async fn the_fallback_model_serves_while_the_primary_circuit_is_open() {
    let (a, b, service) = fallback_setup("2").await;
    let served = ask(&service, &one_question()).await;
    assert_eq!(served.status, 200, "{}", served.text);
    assert_eq!(served.body["model"], json!("org/primary"));
    assert_eq!(served.header("x-systemone-model"), Some("primary"));

    a.set_fault(Fault::ServerError);
    for _ in 0..2 {
        assert_eq!(ask(&service, &one_question()).await.status, 502);
    }
    let a_sent = a.chat_requests();
    let b_sent = b.chat_requests();
    let mut by_name = one_question();
    by_name["model"] = json!("primary");
    let mut by_alias = one_question();
    by_alias["model"] = json!("main");
    for body in [one_question(), by_name, by_alias] {
        let reply = ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.body["model"], json!("org/backup"), "{}", reply.text);
        assert_eq!(reply.header("x-systemone-model"), Some("backup"));
    }
    assert_eq!(a.chat_requests(), a_sent, "the primary is not contacted");
    assert_eq!(b.chat_requests(), b_sent + 3);
    let text = metrics(&service).await;
    assert!(
        text.contains("systemone_circuit_state{model=\"primary\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("systemone_circuit_state{model=\"backup\"} 0"),
        "{text}"
    );

    a.set_fault(Fault::None);
    tokio::time::advance(Duration::from_secs(10)).await;
    let probe = ask(&service, &one_question()).await;
    assert_eq!(probe.status, 200, "{}", probe.text);
    assert_eq!(probe.body["model"], json!("org/primary"));
    assert_eq!(a.chat_requests(), a_sent + 1);
}

/// `/readyz` and the model named `name` in it.
async fn readyz(service: &Service, name: &str) -> (Reply, Value) {
    let reply = get(service, "/readyz").await;
    let model = reply.body["models"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == json!(name)))
        .cloned()
        .unwrap_or_else(|| panic!("no model {name} in {}", reply.text));
    (reply, model)
}

/// Asserts one model's `/readyz` entry: ready, circuit word, token table and whether its
/// backend answered its last health probe.
fn assert_model(model: &Value, ready: bool, circuit: &str, answered: bool) {
    assert_eq!(model["ready"], json!(ready), "{model}");
    assert_eq!(model["circuit"], json!(circuit), "{model}");
    assert_eq!(model["token_table"], json!("verified"), "{model}");
    assert_eq!(model["backend_answered"], json!(answered), "{model}");
}

/// `/readyz` carries each model's circuit state and whether its backend answered its last
/// health probe (the token-table check), and is 200 only when every model is ready:
/// * both backends verified and answering, both circuits closed: 200;
/// * the primary's circuit open (two 500s): 503, the primary `"circuit": "open"` and not
///   ready, the backup still ready;
/// * after the cool-down the primary is `half_open` (a probe may go through): 200 again;
/// * the backup's next health probe (due after the 600 s interval) answered 429: the check
///   cannot conclude, the verdict stays `verified` but `"backend_answered": false` and
///   `/readyz` is 503; once a later probe concludes it is 200 again.
#[tokio::test(start_paused = true)]
async fn readyz_reports_each_backend_probe_and_circuit() {
    let (a, b, service) = fallback_setup("2").await;
    // Each model's first check runs in its upkeep task, on its own.
    let models = &service.state.models;
    wait_until("both models' first checks conclude", || {
        models
            .iter()
            .all(|m| m.verifier.status().last_check_concluded == Some(true))
    })
    .await;
    let (reply, primary) = readyz(&service, "primary").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["ready"], json!(true));
    assert_model(&primary, true, "closed", true);
    assert_model(&readyz(&service, "backup").await.1, true, "closed", true);

    a.set_fault(Fault::ServerError);
    for _ in 0..2 {
        assert_eq!(ask(&service, &one_question()).await.status, 502);
    }
    let (reply, primary) = readyz(&service, "primary").await;
    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.body["ready"], json!(false));
    assert_model(&primary, false, "open", true);
    assert_model(&readyz(&service, "backup").await.1, true, "closed", true);

    tokio::time::advance(Duration::from_secs(10)).await;
    let (reply, primary) = readyz(&service, "primary").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_model(&primary, true, "half_open", true);

    // The next probe of the backup's tokenizer is answered 429: inconclusive.
    b.set_tokenizer_fault(Fault::RateLimited(Some("5".into())));
    let probes = b.tokenizer_checks();
    tokio::time::advance(Duration::from_secs(600)).await;
    let backup = service
        .state
        .models
        .resolve("backup")
        .expect("backup")
        .clone();
    wait_until("the backup's probe finishes", || {
        b.tokenizer_checks() > probes
            && backup.verifier.status().last_check_concluded == Some(false)
    })
    .await;
    let (reply, backup_entry) = readyz(&service, "backup").await;
    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_model(&backup_entry, false, "closed", false);
    assert_model(
        &readyz(&service, "primary").await.1,
        true,
        "half_open",
        true,
    );

    b.set_tokenizer_fault(Fault::None);
    tokio::time::advance(Duration::from_secs(600)).await;
    wait_until("the backup's probe concludes", || {
        backup.verifier.status().last_check_concluded == Some(true)
    })
    .await;
    let (reply, backup_entry) = readyz(&service, "backup").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_model(&backup_entry, true, "closed", true);
}

/// With both circuits open there is nothing to fall back on: 503 `system_one_circuit_open`.
#[tokio::test(start_paused = true)]
async fn with_the_fallback_open_too_the_request_is_refused() {
    let (a, b, service) = fallback_setup("1").await;
    a.set_fault(Fault::ServerError);
    b.set_fault(Fault::ServerError);
    let mut to_backup = one_question();
    to_backup["model"] = json!("backup");
    assert_eq!(ask(&service, &one_question()).await.status, 502);
    assert_eq!(ask(&service, &to_backup).await.status, 502);
    let (a_sent, b_sent) = (a.chat_requests(), b.chat_requests());
    ask(&service, &one_question())
        .await
        .assert_code(503, "system_one_circuit_open", "unavailable");
    assert_eq!((a.chat_requests(), b.chat_requests()), (a_sent, b_sent));
}

/// A fallback that names no configured model, or the model itself, stops the service at
/// startup.
#[test]
fn a_fallback_must_name_another_configured_model() {
    for (fallback, why) in [("nobody", "not a configured model"), ("solo", "itself")] {
        let path = support::temp_file(
            &format!("{fallback}.toml"),
            &format!(
                "[[model]]\nname = \"solo\"\nbackend = \"vllm\"\nbackend_url = \"http://127.0.0.1:9/v1\"\ntoken_table = \"golden-fake\"\nfallback = \"{fallback}\"\n"
            ),
        );
        let config = support::config(
            "http://127.0.0.1:9/v1",
            &["--config", path.to_str().expect("utf-8")],
        );
        let error = systemone::build_state(&config)
            .expect_err("refused")
            .to_string();
        assert!(error.contains(why), "{error}");
    }
}

/// Every label name of every series, and no label value carrying caller content.
fn labels(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((pairs, _)) = rest.rsplit_once('}') else {
            continue;
        };
        for pair in pairs.split("\",") {
            let (name, value) = pair.split_once("=\"").expect("name=\"value\"");
            assert!(!value.contains(CANARY), "caller content in a label: {line}");
            names.insert(name.to_string());
        }
    }
    names
}

/// After answered and failed requests, `/metrics` has every gateway series under the one
/// prefix, and its labels are only the bounded ones (route, status, code, model, key,
/// dialect, kind, the histogram's `le`): no question id, label or state text.
#[tokio::test]
async fn metrics_expose_the_gateway_series_with_bounded_labels() {
    let (fake, service) = setup(&[]).await;
    let body = json!({
        "state": format!("{CANARY} state"),
        "questions": {
            format!("{CANARY}-q1"): {"type": "choice", "instructions": CANARY,
                                     "criteria": {format!("{CANARY}-a"): null, format!("{CANARY}-b"): null, "c": null}},
            format!("{CANARY}-q2"): {"type": "noul", "instructions": CANARY},
        },
    });
    assert_eq!(ask(&service, &body).await.status, 200);
    fake.set_fault(Fault::ServerError);
    assert_eq!(ask(&service, &body).await.status, 502);
    crate::setup::slots_freed(&service).await;
    let text = metrics(&service).await;
    for series in [
        "systemone_questions_per_request_bucket{le=\"2\"} 2",
        "systemone_questions_per_request_count 2",
        "systemone_options_per_question_bucket{le=\"2\"} 2",
        "systemone_options_per_question_bucket{le=\"3\"} 4",
        &format!("systemone_option_mass_count{{model=\"{MODEL}\"}} 2"),
        "systemone_upstream_latency_seconds_count{dialect=\"vllm\"}",
        "systemone_request_duration_seconds_count{route=\"/v1/systemone\",status=\"2xx\"} 1",
        "systemone_request_duration_seconds_count{route=\"/v1/systemone\",status=\"5xx\"} 1",
        "systemone_request_duration_seconds_bucket{route=\"/v1/systemone\",status=\"2xx\",le=\"+Inf\"} 1",
        "systemone_upstream_responses_total{dialect=\"vllm\",status=\"2xx\"} 2",
        "systemone_upstream_responses_total{dialect=\"vllm\",status=\"5xx\"}",
        &format!("systemone_circuit_state{{model=\"{MODEL}\"}} 0"),
        "systemone_key_requests_total{key=\"anonymous\"} 2",
        "systemone_upstream_in_flight 0",
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(line.starts_with("systemone_"), "unprefixed series: {line}");
    }
    // `reason`: the trace exporter's drops (`queue_full`, `export_failed`), always exported.
    let allowed: BTreeSet<String> = [
        "route", "status", "code", "model", "key", "dialect", "kind", "le", "reason",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let seen = labels(&text);
    assert!(seen.is_subset(&allowed), "unexpected labels {seen:?}");
}

// ---- Graceful shutdown ----------------------------------------------------------------

/// A service with a shutdown trigger and `grace_secs` of grace.
async fn serve(fake: &FakeVllm, grace_secs: &str) -> Stoppable {
    let config = support::config(
        &fake.base_url(),
        &[
            "--shutdown-grace-secs",
            grace_secs,
            "--read-timeout-secs",
            "7200",
            "--request-timeout-secs",
            "7200",
        ],
    );
    let state = systemone::build_state(&config).expect("state");
    Stoppable::start_with_grace(state, config.admission.shutdown_grace()).await
}

/// After the shutdown signal the listener refuses new connections, the request already at
/// a slow backend (5 s) still gets its 200, and only then does the server future complete.
#[tokio::test(start_paused = true)]
async fn shutdown_finishes_the_request_in_flight_then_completes() {
    let fake = FakeVllm::start().await;
    fake.set_delay(Duration::from_secs(5));
    let running = serve(&fake, "30").await;
    let url = format!("http://{}/v1/systemone", running.service.addr);
    let in_flight =
        tokio::spawn(async move { post(&reqwest::Client::new(), &url, &one_question()).await });
    wait_until("the request at the backend", || fake.chat_requests() == 1).await;
    running.stop.send(()).expect("server listening");
    let addr = running.service.addr;
    wait_until("new connections refused", || {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(50)).is_err()
    })
    .await;
    assert!(
        !running.server.is_finished(),
        "the server waits for the request"
    );
    assert!(!in_flight.is_finished());
    let reply = in_flight.await.expect("request task");
    assert_eq!(reply.status, 200, "{}", reply.text);
    tokio::time::timeout(Duration::from_secs(1), running.server)
        .await
        .expect("the server completes once the request is done")
        .expect("server task")
        .expect("serve ends cleanly");
}

/// A request slower than the grace period (2 s here, the backend takes an hour) does not
/// hold the exit: the server future completes when the grace period ends.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_no_longer_than_the_grace_period() {
    let fake = FakeVllm::start().await;
    fake.set_delay(Duration::from_secs(3600));
    let running = serve(&fake, "2").await;
    let url = format!("http://{}/v1/systemone", running.service.addr);
    let in_flight = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body(one_question().to_string())
            .send()
            .await
    });
    wait_until("the request at the backend", || fake.chat_requests() == 1).await;
    let stopped_at = tokio::time::Instant::now();
    running.stop.send(()).expect("server listening");
    running
        .server
        .await
        .expect("server task")
        .expect("serve ends cleanly");
    let waited = stopped_at.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(3600),
        "waited {waited:?}"
    );
    in_flight.abort();
}
