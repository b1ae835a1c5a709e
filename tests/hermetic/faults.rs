//! Over HTTP against the fake vLLM server: every backend fault maps to the contract's
//! status, code, type and `Retry-After`; the backend's text, URL and key never leak;
//! timeouts (paused tokio clock), the in-flight cap, slicing, cancel-on-first-failure,
//! the answer shapes, request ids, `/healthz`, `/v1/models` and the `jev-latest` alias.

use crate::support;
use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::setup::ids_of;
use crate::support::bodies::one_choice;
use crate::support::fake_vllm::{render_toy_prompt, toy_logprobs, FakeVllm, Fault};
use crate::support::{ask, assert_error, criteria, get, Reply, Service};
use systemone::calibration::DEFAULT_FORMULA;

/// The key this service sends to its backend; it must never reach a caller.
const CANARY_KEY: &str = "sk-canary-key";
/// The public model name the test configuration serves.
const MODEL: &str = "glm-5.3-flash";

/// A fake plus a service in front of it, configured with the canary key and `extra` flags.
async fn setup(extra: &[&str]) -> (FakeVllm, Service) {
    let mut flags = vec!["--backend-api-key", CANARY_KEY];
    flags.extend_from_slice(extra);
    support::setup(&flags).await
}

/// A request with `k` choice questions of 3 options each (each a different question).
fn several_choices(k: usize) -> Value {
    let questions: Map<String, Value> = (0..k)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "choice", "instructions": format!("Question {i}?"), "criteria": criteria(3)}),
            )
        })
        .collect();
    json!({"state": {"ticket": 42, "text": "refund please"}, "questions": questions})
}

/// Asserts that nothing of the backend (its error text, URL, port) and not the key this
/// service sends it appears anywhere in the response.
fn assert_no_leak(reply: &Reply, backend_url: &str) {
    let port = backend_url
        .trim_end_matches("/v1")
        .rsplit(':')
        .next()
        .expect("port")
        .to_string();
    let mut haystacks = vec![("body".to_string(), reply.text.to_ascii_lowercase())];
    for (name, value) in &reply.headers {
        haystacks.push((
            format!("header {name}"),
            format!(
                "{name}: {}",
                String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase()
            ),
        ));
    }
    let needles = [
        "secret-backend.internal".to_string(),
        "sk-backend".to_string(),
        CANARY_KEY.to_string(),
        "127.0.0.1".to_string(),
        backend_url.to_ascii_lowercase(),
        format!(":{port}"),
    ];
    for (place, text) in &haystacks {
        for needle in &needles {
            assert!(
                !text.contains(needle.as_str()),
                "{place} leaks {needle:?}: {text}"
            );
        }
    }
    // The port alone must not be in the body either (headers hold a random request id).
    assert!(
        !reply.text.contains(&port),
        "body leaks the backend port {port}: {}",
        reply.text
    );
}

/// Asserts `x-typesafe-request-id: req_<32 hex>` and an identical `x-request-id`; returns it.
fn assert_request_id(reply: &Reply) -> String {
    let id = reply
        .header("x-typesafe-request-id")
        .expect("x-typesafe-request-id present")
        .to_string();
    let hex = id.strip_prefix("req_").expect("req_ prefix");
    assert_eq!(hex.len(), 32, "{id}");
    assert!(
        hex.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "{id}"
    );
    assert_eq!(reply.header("x-request-id"), Some(id.as_str()));
    id
}

/// Sends a 30-option question to a fake in `fault` mode, with the canary key configured;
/// checks nothing leaks and returns the reply. (30 options: more than the 20 a server that
/// ignores `logprob_token_ids` returns, so that fault can never pass by luck.)
async fn under_fault(fault: Fault) -> Reply {
    let (fake, service) = setup(&[]).await;
    fake.set_fault(fault);
    let reply = ask(&service, &one_choice(30)).await;
    assert_no_leak(&reply, &fake.base_url());
    assert_request_id(&reply);
    assert!(fake.chat_requests() >= 1, "the backend was asked");
    reply
}

fn softmax(lps: &[f64]) -> Vec<f64> {
    let max = lps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = lps.iter().map(|l| (l - max).exp()).collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

fn probs(v: &Value) -> Vec<(String, f64)> {
    v.as_object()
        .expect("probabilities object")
        .iter()
        .map(|(k, p)| (k.clone(), p.as_f64().expect("f64")))
        .collect()
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .expect("object")
        .keys()
        .cloned()
        .collect::<Vec<_>>()
}

/// Whether two JSON values are equal, key order included, comparing numbers as `f64`
/// (`1`, `1.0` and `1e0` are the same number).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && same(va, vb))
        }
        _ => a == b,
    }
}

fn assert_same(got: &Value, want: &Value) {
    assert!(same(got, want), "got {got}, want {want}");
}

fn confidence_of(p: &[f64]) -> f64 {
    if p.len() < 2 {
        return 1.0;
    }
    let h: f64 = p.iter().filter(|x| **x > 0.0).map(|x| -x * x.ln()).sum();
    1.0 - h / (p.len() as f64).ln()
}

// ---------------------------------------------------------------------------------------
// 1 + 2. Fault mapping, with no leak of backend text, URL or key.
// ---------------------------------------------------------------------------------------

/// A backend 429 with `retry_after` as its `Retry-After`: the contract's 429
/// `system_one_upstream_rate_limited`, and nothing of the backend leaks.
async fn backend_429(retry_after: Option<&str>) -> Reply {
    let reply = under_fault(Fault::RateLimited(retry_after.map(str::to_string))).await;
    assert_error(
        &reply,
        429,
        "system_one_upstream_rate_limited",
        "rate_limited",
    );
    reply
}

/// Asserts a `Retry-After` of 1..=60 seconds (what the caller gets when the backend gave
/// none).
fn assert_retry_after_1_to_60(reply: &Reply) {
    let secs = reply.retry_after().expect("Retry-After present");
    assert!((1..=60).contains(&secs), "Retry-After {secs}");
}

/// A backend 429 with `Retry-After: 7` is a 429 `system_one_upstream_rate_limited` with
/// `Retry-After: 7`, and nothing of the backend leaks.
#[tokio::test]
async fn backend_429_passes_its_retry_after() {
    let reply = backend_429(Some("7")).await;
    assert_eq!(reply.retry_after(), Some(7));
}

/// A backend 429 with `Retry-After: 3600` is passed on capped at 60 seconds.
#[tokio::test]
async fn backend_429_retry_after_is_capped_at_60() {
    let reply = backend_429(Some("3600")).await;
    assert_eq!(reply.retry_after(), Some(60));
}

/// A backend 429 without `Retry-After` still gives the caller a `Retry-After` of 1..=60.
#[tokio::test]
async fn backend_429_without_retry_after_still_sets_one() {
    let reply = backend_429(None).await;
    assert_retry_after_1_to_60(&reply);
}

/// A backend 503 is a 503 `system_one_upstream_overloaded` with the backend's
/// `Retry-After` (7 → 7, none → 1..=60).
#[tokio::test]
async fn backend_503_is_overloaded_with_retry_after() {
    let reply = under_fault(Fault::Unavailable(Some("7".into()))).await;
    assert_error(&reply, 503, "system_one_upstream_overloaded", "unavailable");
    assert_eq!(reply.retry_after(), Some(7));

    let reply = under_fault(Fault::Unavailable(None)).await;
    assert_error(&reply, 503, "system_one_upstream_overloaded", "unavailable");
    assert_retry_after_1_to_60(&reply);
}

/// A backend 500 (whose text names the backend host and a key) is a 502
/// `system_one_upstream_error` with this service's own message.
#[tokio::test]
async fn backend_500_is_502_upstream_error() {
    let reply = under_fault(Fault::ServerError).await;
    assert_error(&reply, 502, "system_one_upstream_error", "protocol");
}

/// Each way a 200 can break the protocol (malformed JSON, no logprobs, a requested id
/// missing, a non-finite logprob, a server that ignores `logprob_token_ids`) is a 502
/// `system_one_upstream_protocol`.
#[tokio::test]
async fn protocol_breaks_are_502_upstream_protocol() {
    for fault in [
        Fault::MalformedJson,
        Fault::NoLogprobs,
        Fault::MissingId,
        Fault::NonFiniteLogprob,
        Fault::IgnoreLogprobTokenIds,
    ] {
        let reply = under_fault(fault.clone()).await;
        assert_eq!(reply.status, 502, "{fault:?}: {}", reply.text);
        assert_error(&reply, 502, "system_one_upstream_protocol", "protocol");
    }
}

/// The same 30-option question answers 200 against a well-behaved fake, so the 502s above
/// are caused by the faults and not by the question.
#[tokio::test]
async fn the_fault_question_answers_without_a_fault() {
    let (fake, service) = setup(&[]).await;
    let reply = ask(&service, &one_choice(30)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        probs(&reply.body["answers"]["q"]["probabilities"]).len(),
        30
    );
    assert_eq!(fake.chat_requests(), 1);
}

/// A backend nothing listens on is a 503 `system_one_upstream_unavailable` with a
/// `Retry-After`, and its URL does not leak.
#[tokio::test]
async fn unreachable_backend_is_503_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let url = format!("http://127.0.0.1:{port}/v1");
    let service = support::start(support::config(&url, &["--backend-api-key", CANARY_KEY])).await;
    let reply = ask(&service, &one_choice(3)).await;
    assert_error(
        &reply,
        503,
        "system_one_upstream_unavailable",
        "unavailable",
    );
    assert_retry_after_1_to_60(&reply);
    assert_no_leak(&reply, &url);
    assert_request_id(&reply);
}

/// With `--max-ids-per-read 200` a 150-option question goes out as one read of 150 ids; the
/// fake refuses it with 400, which becomes a 4xx `system_one_upstream_rejected` with this
/// service's own message.
#[tokio::test]
async fn backend_400_is_upstream_rejected() {
    let (fake, service) = setup(&["--max-ids-per-read", "200"]).await;
    let reply = ask(&service, &one_choice(150)).await;
    assert!(
        (400..500).contains(&reply.status) && reply.status != 429,
        "status {}: {}",
        reply.status,
        reply.text
    );
    assert_error(
        &reply,
        reply.status,
        "system_one_upstream_rejected",
        "invalid",
    );
    assert_no_leak(&reply, &fake.base_url());
    assert!(
        !reply.text.contains("128 logprob_token_ids"),
        "backend text leaked: {}",
        reply.text
    );
    let bodies = fake.chat_bodies();
    assert_eq!(bodies.len(), 1);
    assert_eq!(ids_of(&bodies[0]["logprob_token_ids"]).len(), 150);
}

// ---------------------------------------------------------------------------------------
// 3. Timeouts on the paused clock.
// ---------------------------------------------------------------------------------------

/// A backend that takes an hour hits the default 30 s per-read timeout: 504
/// `system_one_upstream_timeout` (paused clock, no real waiting). The timed-out read's
/// connection is closed, and its slot freed with it, before the clock moves on.
#[tokio::test(start_paused = true)]
async fn slow_backend_is_504_upstream_timeout() {
    let (fake, service) = setup(&[]).await;
    fake.set_fault(Fault::Slow(Duration::from_secs(3600)));
    let reply = ask(&service, &one_choice(3)).await;
    assert_error(&reply, 504, "system_one_upstream_timeout", "timeout");
    assert_no_leak(&reply, &fake.base_url());
    assert_request_id(&reply);
    assert_eq!(fake.chat_requests(), 1);
    assert_slots_freed_as_connections_close(&service).await;
}

/// Reads abandoned mid-exchange give their slots back as their connections close: without
/// the paused clock moving (before, each was held until the backend answered or 60 s
/// passed). Yields instead of sleeping, so the clock cannot advance meanwhile.
async fn assert_slots_freed_as_connections_close(service: &Service) {
    let start = tokio::time::Instant::now();
    for _ in 0..100_000 {
        if service.state.pipeline.in_flight().in_use() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(service.state.pipeline.in_flight().in_use(), 0);
    assert_eq!(tokio::time::Instant::now(), start, "the clock stood still");
}

/// With a 100 s read timeout and a 50 s request deadline, the deadline fires first: 504
/// `system_one_deadline_exceeded`.
#[tokio::test(start_paused = true)]
async fn request_deadline_is_504_deadline_exceeded() {
    let (fake, service) =
        setup(&["--read-timeout-secs", "100", "--request-timeout-secs", "50"]).await;
    fake.set_fault(Fault::Slow(Duration::from_secs(3600)));
    let reply = ask(&service, &several_choices(3)).await;
    assert_error(&reply, 504, "system_one_deadline_exceeded", "timeout");
    assert_no_leak(&reply, &fake.base_url());
    // Three reads were abandoned mid-exchange: their connections close, freeing the slots.
    assert_slots_freed_as_connections_close(&service).await;
}

/// The deadline counts time spent waiting for an in-flight slot: with `--max-in-flight 1`,
/// a 50 s deadline and 5 reads of 20 s each (every read within the 30 s read timeout, 100 s
/// in all), the request is a 504 `system_one_deadline_exceeded`, and the slot is freed as
/// the connection of the read it was on closes.
#[tokio::test(start_paused = true)]
async fn the_deadline_includes_slot_waits() {
    let (fake, service) = setup(&["--max-in-flight", "1", "--request-timeout-secs", "50"]).await;
    fake.set_delay(Duration::from_secs(20));
    let reply = ask(&service, &several_choices(5)).await;
    assert_error(&reply, 504, "system_one_deadline_exceeded", "timeout");
    assert!(fake.chat_requests() < 5, "{} reads", fake.chat_requests());
    assert_slots_freed_as_connections_close(&service).await;
}

/// A backend that takes 20 s (within the 30 s read timeout and the 120 s deadline) answers
/// 200: the timeouts do not fire early.
#[tokio::test(start_paused = true)]
async fn a_slow_but_timely_backend_answers() {
    let (fake, service) = setup(&[]).await;
    fake.set_fault(Fault::Slow(Duration::from_secs(20)));
    let reply = ask(&service, &one_choice(3)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

// ---------------------------------------------------------------------------------------
// 4. The in-flight cap and slicing.
// ---------------------------------------------------------------------------------------

/// With `--max-in-flight 4`, 8 concurrent requests of 5 questions each (40 reads, each
/// delayed 1 s on the paused clock) all answer 200, and the backend never sees more than 4
/// reads at once, yet does see 4 (the cap is reached, not just respected).
#[tokio::test(start_paused = true)]
async fn the_in_flight_cap_is_reached_and_never_exceeded() {
    let (fake, service) = setup(&["--max-in-flight", "4"]).await;
    fake.set_delay(Duration::from_secs(1));
    let body = several_choices(5);
    let replies = futures::future::join_all((0..8).map(|_| ask(&service, &body))).await;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.body["usage"]["upstream_requests"], json!(5));
    }
    assert_eq!(fake.chat_requests(), 40);
    assert!(fake.max_in_flight() <= 4, "max {}", fake.max_in_flight());
    assert_eq!(fake.max_in_flight(), 4);
    assert_eq!(service.state.pipeline.in_flight().in_use(), 0);
}

/// A 150-option question is read in 2 slices (128 + 22 ids), each carrying all 150 ids in
/// `allowed_token_ids`, and the slices are merged into one 150-option answer.
#[tokio::test]
async fn a_150_option_question_is_read_in_two_slices() {
    let (fake, service) = setup(&[]).await;
    let reply = ask(&service, &one_choice(150)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["usage"]["upstream_requests"], json!(2));
    let p = probs(&reply.body["answers"]["q"]["probabilities"]);
    let labels: Vec<String> = (0..150).map(|i| format!("opt_{i}")).collect();
    assert_eq!(p.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), labels);
    assert!(close(p.iter().map(|(_, x)| x).sum::<f64>(), 1.0));

    let bodies = fake.chat_bodies();
    assert_eq!(bodies.len(), 2);
    let allowed = ids_of(&bodies[0]["allowed_token_ids"]);
    assert_eq!(allowed.len(), 150);
    assert_eq!(allowed.iter().collect::<HashSet<_>>().len(), 150);
    assert_eq!(ids_of(&bodies[1]["allowed_token_ids"]), allowed);
    let mut slices: Vec<Vec<u64>> = bodies
        .iter()
        .map(|b| ids_of(&b["logprob_token_ids"]))
        .collect();
    slices.sort_by_key(|s| std::cmp::Reverse(s.len()));
    assert_eq!(slices[0].len(), 128);
    assert_eq!(slices[1].len(), 22);
    let mut read: Vec<u64> = slices.concat();
    read.sort_unstable();
    let mut all = allowed.clone();
    all.sort_unstable();
    assert_eq!(
        read, all,
        "the two slices cover every option id exactly once"
    );
}

// ---------------------------------------------------------------------------------------
// 5. All answers or one error.
// ---------------------------------------------------------------------------------------

/// With `--max-in-flight 1` and a failing backend, a 5-question request gets one error body
/// (only the `error` key, no `answers`) after exactly one upstream request: the first
/// failure cancels the questions still waiting, which are never sent.
#[tokio::test]
async fn the_first_failure_cancels_the_rest() {
    let (fake, service) = setup(&["--max-in-flight", "1"]).await;
    fake.set_fault(Fault::ServerError);
    let reply = ask(&service, &several_choices(5)).await;
    assert_error(&reply, 502, "system_one_upstream_error", "protocol");
    assert_eq!(keys(&reply.body), vec!["error".to_string()]);
    assert_eq!(fake.chat_requests(), 1, "queued questions were still sent");
    assert_eq!(service.state.pipeline.in_flight().in_use(), 0);
}

/// When four of five questions are answered and one gets a broken backend answer, the
/// caller gets one 502 `system_one_upstream_protocol` and none of the four answers.
#[tokio::test]
async fn no_partial_answers_when_one_question_fails() {
    let (fake, service) = setup(&[]).await;
    let body = several_choices(5);
    let ok = ask(&service, &body).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(keys(&ok.body["answers"]).len(), 5);
    // Break the answer to one question only (same prompt, same ids next time).
    let bodies = fake.chat_bodies();
    assert_eq!(bodies.len(), 5);
    let broken = &bodies[2];
    fake.record(
        &broken["messages"][0]["content"],
        ids_of(&broken["logprob_token_ids"]),
        json!({"id": "x", "model": MODEL, "choices": [{"index": 0, "logprobs": null}]}),
    );
    let reply = ask(&service, &body).await;
    assert_error(&reply, 502, "system_one_upstream_protocol", "protocol");
    assert_eq!(keys(&reply.body), vec!["error".to_string()]);
    assert_no_leak(&reply, &fake.base_url());
}

// ---------------------------------------------------------------------------------------
// 6. Answer shapes.
// ---------------------------------------------------------------------------------------

/// A request mixing noul, choice, score and single-option questions (keys deliberately not
/// in alphabetical order).
fn mixed_request(temperature: Option<Value>) -> Value {
    let mut body = json!({
        "state": "A customer writes: I was charged twice, please fix it today.",
        "questions": {
            "zeta_refund": {"type": "noul", "instructions": "Does the customer want money back?"},
            "alpha_team": {"type": "choice", "instructions": "Which team should handle it?",
                           "criteria": {"zebra": "billing team", "apple": "bug triage", "mango": "anything else"}},
            "mid_urgency": {"type": "score", "instructions": "How urgent is it?",
                            "criteria": ["Routine", "Soon", "Immediate", "Right now"]},
            "beta_single": {"type": "choice", "instructions": "Only one answer.",
                            "criteria": {"only": "the only option"}},
            "gamma_level": {"type": "score", "instructions": "One level.", "criteria": ["Flat"]},
        },
    });
    if let Some(t) = temperature {
        body["temperature"] = t;
    }
    body
}

/// The masked distribution the fake gave for the recorded body whose mask has `n` ids, and
/// the option mass (Σ exp(lp), capped at 1).
fn expected_from_fake(bodies: &[Value], n: usize) -> (Vec<f64>, f64) {
    let matching: Vec<&Value> = bodies
        .iter()
        .filter(|b| ids_of(&b["allowed_token_ids"]).len() == n)
        .collect();
    assert_eq!(matching.len(), 1, "one read with {n} ids");
    let body = matching[0];
    let lps = toy_logprobs(
        &render_toy_prompt(body),
        &ids_of(&body["allowed_token_ids"]),
        &ids_of(&body["logprob_token_ids"]),
    );
    let mass = lps.iter().map(|l| l.exp()).sum::<f64>().min(1.0);
    (softmax(&lps), mass)
}

fn temper(p: &[f64], t: f64) -> Vec<f64> {
    let w: Vec<f64> = p.iter().map(|x| x.powf(1.0 / t)).collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// Checks one asked answer against the expected distribution, temperature and mass.
fn assert_asked(answer: &Value, want: &[f64], t: f64, mass: f64, keys_want: &[&str]) {
    let got = probs(&answer["probabilities"]);
    assert_eq!(
        got.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        keys_want,
        "{answer}"
    );
    for ((_, g), w) in got.iter().zip(want) {
        assert!(close(*g, *w), "p {g} want {w}: {answer}");
    }
    let values: Vec<f64> = got.iter().map(|(_, x)| *x).collect();
    assert!(close(
        answer["confidence"].as_f64().expect("c"),
        confidence_of(&values)
    ));
    assert!(
        close(answer["temperature"].as_f64().expect("t"), t),
        "{answer}"
    );
    assert!(
        close(answer["option_mass"].as_f64().expect("mass"), mass),
        "{answer}"
    );
}

/// With `temperature: 1`: answers come back in question order; noul has `noul` = P(yes) and
/// no probabilities; choice probabilities are the raw softmax of the fake's logprobs in
/// option order with `choice` = the argmax; score has `score` = Σ i·p_i, a `legend` and
/// `probabilities` keyed "0".. ; single-option questions are certain and not sent; usage
/// counts the reads and the backend's prompt tokens.
#[tokio::test]
async fn answers_have_the_contract_shapes() {
    let (fake, service) = setup(&[]).await;
    let reply = ask(&service, &mixed_request(Some(json!(1)))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_request_id(&reply);
    let body = &reply.body;
    assert_eq!(keys(body), ["model", "answers", "usage"]);
    assert_eq!(body["model"], json!(MODEL));
    let answers = &body["answers"];
    assert_eq!(
        keys(answers),
        [
            "zeta_refund",
            "alpha_team",
            "mid_urgency",
            "beta_single",
            "gamma_level"
        ]
    );

    // Three reads: noul (2 ids), choice (3), score (4); none for the single-option ones.
    let bodies = fake.chat_bodies();
    assert_eq!(bodies.len(), 3);
    let mut sizes: Vec<usize> = bodies
        .iter()
        .map(|b| ids_of(&b["allowed_token_ids"]).len())
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [2, 3, 4]);

    let usage = &body["usage"];
    assert_eq!(usage["upstream_requests"], json!(3));
    assert_eq!(usage["output_tokens"], json!(3));
    assert_eq!(usage["cached_tokens"], json!(0));
    let prompt_tokens: usize = bodies.iter().map(|b| render_toy_prompt(b).len() / 4).sum();
    assert_eq!(usage["input_tokens"], json!(prompt_tokens));
    assert!(usage.get("estimated").is_none(), "{usage}");

    // noul: options are [no, yes]; `noul` = P(yes); no probabilities, no choice.
    let (p, mass) = expected_from_fake(&bodies, 2);
    let noul = &answers["zeta_refund"];
    assert_eq!(noul["type"], json!("noul"));
    assert!(noul.get("probabilities").is_none(), "{noul}");
    assert!(noul.get("choice").is_none(), "{noul}");
    assert!(
        close(noul["noul"].as_f64().expect("noul"), p[1]),
        "{noul} vs {p:?}"
    );
    assert!(close(
        noul["confidence"].as_f64().expect("c"),
        confidence_of(&p)
    ));
    assert_eq!(noul["temperature"].as_f64(), Some(1.0));
    assert!(close(noul["option_mass"].as_f64().expect("mass"), mass));

    // choice: raw probabilities, option order, choice = argmax.
    let (p, mass) = expected_from_fake(&bodies, 3);
    let team = &answers["alpha_team"];
    assert_eq!(team["type"], json!("choice"));
    assert_asked(team, &p, 1.0, mass, &["zebra", "apple", "mango"]);
    let best = (0..3).fold(0, |b, i| if p[i] > p[b] { i } else { b });
    assert_eq!(team["choice"], json!(["zebra", "apple", "mango"][best]));

    // score: Σ i·p_i, legend and probabilities keyed "0".."3".
    let (p, mass) = expected_from_fake(&bodies, 4);
    let urgency = &answers["mid_urgency"];
    assert_eq!(urgency["type"], json!("score"));
    assert_asked(urgency, &p, 1.0, mass, &["0", "1", "2", "3"]);
    let score: f64 = p.iter().enumerate().map(|(i, x)| i as f64 * x).sum();
    assert!(close(urgency["score"].as_f64().expect("score"), score));
    assert_eq!(
        urgency["legend"],
        json!({"0": "Routine", "1": "Soon", "2": "Immediate", "3": "Right now"})
    );
    assert_eq!(keys(&urgency["legend"]), ["0", "1", "2", "3"]);
    assert!(urgency.get("choice").is_none());

    // Single option: certain, not asked, no option_mass.
    let single = &answers["beta_single"];
    assert_same(
        single,
        &json!({"type": "choice", "choice": "only", "probabilities": {"only": 1},
                "confidence": 1, "temperature": 1}),
    );
    let level = &answers["gamma_level"];
    assert_same(
        level,
        &json!({"type": "score", "score": 0, "legend": {"0": "Flat"}, "probabilities": {"0": 1},
                "confidence": 1, "temperature": 1}),
    );
}

/// Without `temperature`, each asked answer applies the calibration formula's temperature
/// for its option count (p_i^(1/T) / Σ p_j^(1/T) of the fake's distribution).
#[tokio::test]
async fn the_default_temperature_is_the_calibration_formula() {
    let (fake, service) = setup(&[]).await;
    let reply = ask(&service, &mixed_request(None)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let answers = &reply.body["answers"];
    let bodies = fake.chat_bodies();

    let (p, mass) = expected_from_fake(&bodies, 3);
    let t = DEFAULT_FORMULA.temperature(3);
    assert!(
        t != 1.0,
        "the formula must differ from 1 for this test to mean anything"
    );
    assert_asked(
        &answers["alpha_team"],
        &temper(&p, t),
        t,
        mass,
        &["zebra", "apple", "mango"],
    );

    let (p, mass) = expected_from_fake(&bodies, 4);
    let t = DEFAULT_FORMULA.temperature(4);
    assert_asked(
        &answers["mid_urgency"],
        &temper(&p, t),
        t,
        mass,
        &["0", "1", "2", "3"],
    );

    let (p, _) = expected_from_fake(&bodies, 2);
    let t = DEFAULT_FORMULA.temperature(2);
    let noul = &answers["zeta_refund"];
    assert!(close(
        noul["noul"].as_f64().expect("noul"),
        temper(&p, t)[1]
    ));
    assert!(close(noul["temperature"].as_f64().expect("t"), t));

    // The single-option answers stay at temperature 1 whatever the formula says.
    assert_eq!(answers["beta_single"]["temperature"].as_f64(), Some(1.0));
}

/// A request made only of single-option questions sends nothing upstream and reports 0
/// upstream requests.
#[tokio::test]
async fn single_option_questions_are_never_sent() {
    let (fake, service) = setup(&[]).await;
    let body = json!({
        "state": "x",
        "questions": {"only": {"type": "choice", "criteria": {"yes": "the only one"}},
                      "flat": {"type": "score", "criteria": ["Flat"]}},
    });
    let reply = ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(fake.chat_requests(), 0);
    assert_eq!(reply.body["usage"]["upstream_requests"], json!(0));
    assert_same(
        &reply.body["answers"]["only"]["probabilities"],
        &json!({"yes": 1}),
    );
    assert!(reply.body["answers"]["only"].get("option_mass").is_none());
}

// ---------------------------------------------------------------------------------------
// 7. Request ids and the small routes.
// ---------------------------------------------------------------------------------------

/// Every response (200, 422, 502, 404, and the GET routes) carries
/// `x-typesafe-request-id: req_<32 hex>` and the same `x-request-id`; each is distinct, and
/// each sorts after the ones made before it (UUIDv7: the ledger's key grows in time order).
#[tokio::test]
async fn every_response_carries_a_request_id() {
    let (fake, service) = setup(&[]).await;
    let mut seen = Vec::new();

    let ok = ask(&service, &one_choice(3)).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    seen.push(assert_request_id(&ok));

    let invalid = ask(&service, &json!({"state": "x", "questions": {}})).await;
    assert_eq!(invalid.status, 422, "{}", invalid.text);
    seen.push(assert_request_id(&invalid));

    let not_found = get(&service, "/no/such/route").await;
    assert_eq!(not_found.status, 404);
    assert_eq!(
        not_found.header("x-systemone-error-code"),
        Some("system_one_not_found")
    );
    seen.push(assert_request_id(&not_found));

    let health = get(&service, "/healthz").await;
    assert_eq!(health.status, 200);
    seen.push(assert_request_id(&health));

    let models = get(&service, "/v1/models").await;
    assert_eq!(models.status, 200);
    seen.push(assert_request_id(&models));

    fake.set_fault(Fault::ServerError);
    let failed = ask(&service, &one_choice(3)).await;
    assert_eq!(failed.status, 502, "{}", failed.text);
    seen.push(assert_request_id(&failed));

    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "request ids are not made in increasing order: {seen:?}"
    );
}

/// `/healthz` is 200 and `/v1/models` holds both TypeSafe's and OpenAI's shapes naming the
/// configured model.
#[tokio::test]
async fn healthz_and_models() {
    let (_fake, service) = setup(&[]).await;
    assert_eq!(get(&service, "/healthz").await.status, 200);

    let models = get(&service, "/v1/models").await;
    assert_eq!(models.status, 200);
    let body = &models.body;
    let typesafe = body["models"].as_array().expect("models list");
    let names: Vec<&Value> = typesafe.iter().map(|m| &m["name"]).collect();
    assert_eq!(
        names,
        [&json!(MODEL), &json!("jev-latest")],
        "name, then the alias"
    );
    for entry in typesafe {
        assert!(entry["description"].is_string(), "{body}");
        // The SDKs type it as a string: never null.
        assert_eq!(entry["release_date"], json!("unknown"), "{body}");
    }
    assert_eq!(body["object"], json!("list"));
    let data = body["data"].as_array().expect("data list");
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["id"], json!(MODEL));
    assert_eq!(data[0]["object"], json!("model"));
    assert!(data[0]["owned_by"].is_string(), "{body}");
}

/// `jev-latest` resolves to the default model (the backend is asked for its upstream id),
/// as does the model's own name; an unknown name is 422 `system_one_unsupported_model` and
/// sends nothing upstream.
#[tokio::test]
async fn jev_latest_resolves_to_the_default_model() {
    let (fake, service) = setup(&["--upstream-model", "org/upstream-id"]).await;
    for name in ["jev-latest", MODEL] {
        let mut body = one_choice(3);
        body["model"] = json!(name);
        let before = fake.chat_requests();
        let reply = ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{name}: {}", reply.text);
        assert_eq!(fake.chat_requests(), before + 1);
        let sent = fake.chat_bodies().last().cloned().expect("a body");
        assert_eq!(sent["model"], json!("org/upstream-id"), "{name}");
        assert_eq!(reply.body["model"], json!("org/upstream-id"), "{name}");
    }

    let before = fake.chat_requests();
    let mut body = one_choice(3);
    body["model"] = json!("no-such-model");
    let reply = ask(&service, &body).await;
    assert_error(
        &reply,
        422,
        "system_one_unsupported_model",
        "not_configured",
    );
    assert_eq!(fake.chat_requests(), before);
}

// ---------------------------------------------------------------------------------------
// The `openai` dialect: the same faults of an OpenAI-compatible host map the same
// way, after its probe; the anchor merge's reads hold the in-flight cap.
// ---------------------------------------------------------------------------------------

mod openai {
    use super::*;
    use crate::setup::fake_openai::{FakeOpenAi, Family, Fault};

    /// A post-bias host (cap 20) for the golden-fake table, probed, with the canary key.
    async fn probed(extra: &[&str]) -> (FakeOpenAi, Service) {
        let labels: Vec<(u32, String)> = (0..191).map(|i| (1000 + i, i.to_string())).collect();
        let fake = FakeOpenAi::start(Family::post_bias_cap_20(), &labels).await;
        let mut flags = vec!["--model", MODEL, "--backend-api-key", CANARY_KEY];
        flags.extend_from_slice(extra);
        let service = support::start(support::openai_config(
            &fake.base_url(),
            "golden-fake",
            &flags,
        ))
        .await;
        let reply = ask(&service, &one_choice(4)).await;
        assert_eq!(
            reply.status, 200,
            "the probe and a first read: {}",
            reply.text
        );
        (fake, service)
    }

    #[tokio::test]
    async fn every_host_fault_maps_to_the_contract_and_leaks_nothing() {
        let cases = [
            (
                Fault::Status(429),
                429,
                "system_one_upstream_rate_limited",
                "rate_limited",
            ),
            (
                Fault::Status(503),
                503,
                "system_one_upstream_overloaded",
                "unavailable",
            ),
            (
                Fault::Status(500),
                502,
                "system_one_upstream_error",
                "protocol",
            ),
            (
                Fault::Status(400),
                400,
                "system_one_upstream_rejected",
                "invalid",
            ),
            (
                Fault::MalformedJson,
                502,
                "system_one_upstream_protocol",
                "protocol",
            ),
            (
                Fault::NonFinite,
                502,
                "system_one_upstream_protocol",
                "protocol",
            ),
            (
                Fault::DropLast,
                502,
                "system_one_upstream_protocol",
                "protocol",
            ),
        ];
        for (fault, status, code, kind) in cases {
            let (fake, service) = probed(&[]).await;
            fake.set_fault(fault.clone());
            let reply = ask(&service, &one_choice(4)).await;
            assert_error(&reply, status, code, kind);
            assert_no_leak(&reply, &fake.base_url());
            assert_request_id(&reply);
            if matches!(status, 429 | 503) {
                assert_retry_after_1_to_60(&reply);
            }
            if fault == Fault::DropLast {
                assert!(
                    reply.message().contains("1 of the 4 options"),
                    "{fault:?}: {}",
                    reply.message()
                );
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_host_is_504_upstream_timeout() {
        let (fake, service) = probed(&[]).await;
        fake.set_fault(Fault::Slow(Duration::from_secs(3600)));
        let reply = ask(&service, &one_choice(3)).await;
        assert_error(&reply, 504, "system_one_upstream_timeout", "timeout");
        assert_no_leak(&reply, &fake.base_url());
        super::assert_slots_freed_as_connections_close(&service).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_anchor_merge_reads_hold_the_in_flight_cap() {
        let (fake, service) = probed(&["--max-in-flight", "2"]).await;
        fake.set_fault(Fault::Slow(Duration::from_secs(1)));
        let body = json!({
            "state": "A customer writes: my invoice is wrong.",
            "questions": {
                "a": {"type": "choice", "instructions": "One?", "criteria": criteria(50)},
                "b": {"type": "choice", "instructions": "Two?", "criteria": criteria(50)},
            },
        });
        let reply = ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.body["usage"]["upstream_requests"], json!(6));
        assert_eq!(
            fake.max_in_flight(),
            2,
            "the cap is reached and never exceeded"
        );
        assert_eq!(service.state.pipeline.in_flight().in_use(), 0);
    }

    #[tokio::test]
    async fn an_unreachable_host_is_503_unavailable_and_leaks_nothing() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr");
        let url = format!("http://{closed}/v1");
        let service = support::start(support::openai_config(
            &url,
            "golden-fake",
            &["--model", MODEL, "--backend-api-key", CANARY_KEY],
        ))
        .await;
        let reply = ask(&service, &one_choice(3)).await;
        assert_error(
            &reply,
            503,
            "system_one_upstream_unavailable",
            "unavailable",
        );
        assert_no_leak(&reply, &url);
    }
}
