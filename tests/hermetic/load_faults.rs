//! Load with injected faults: 10,000 one-question requests at concurrency 128 through the
//! real service (in process, on port 0) in front of the fake vLLM, whose every 20th chat
//! request (5%) fails with a rotating fault: 429 with `Retry-After: 3`, 503 with
//! `Retry-After: 2`, 500, a malformed JSON body, a requested id missing.
//!
//! * Every response is a 200 with the question's answer, or exactly the contract's error
//!   for the fault that hit that request: 429 `system_one_upstream_rate_limited` (with the
//!   backend's `Retry-After`), 503 `system_one_upstream_overloaded` (likewise), 502
//!   `system_one_upstream_error`, 502 `system_one_upstream_protocol`. Each request carries
//!   a unique marker in its state; the fake logs the messages of every request it failed,
//!   so each error is matched to the very request the fault hit (a one-question request is
//!   exactly one upstream read).
//! * The circuit breaker stays on with its defaults (50% of at least 20 requests in 10 s),
//!   as deployed. Its failures are only the 429/503/500s, 3 in every 100 reads, far under
//!   its rate, so it is not expected to open; a 503 `system_one_circuit_open` is
//!   nevertheless accepted, and then only for a request that never reached the backend
//!   (the counts below must add up exactly).
//! * The fake never has more chat requests in flight than the service's `--max-in-flight`
//!   (the default, 16), and does reach it; the service's in-flight gauge is back to 0
//!   afterwards.
//! * Memory: the process's resident memory (`VmRSS` of `/proc/self/status`, which holds
//!   the service, the fake and the client alike) after the 10,000 requests is within 20%
//!   of before them. "Before" is taken after a warm-up of 512 requests of the same mix, so
//!   the allocator's pools, the connection pools and the lazily built parts of the service
//!   already exist; the fake keeps no request bodies during the run.
//!
//! The fake answers correctly after 20 ms (its simulated latency; the test itself never
//! sleeps), so the 128 callers always want more than 16 reads at once and the cap binds
//! for the whole run. Bounded by count; each request has a 30 s client timeout and the
//! whole run a 120 s bound. It takes about 15 s in a debug build on 2 cores (the service,
//! the fake and the client share them).

use crate::support;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::fake_vllm::{
    FakeVllm, Fault, MixedFault, MIXED_RETRY_AFTER_429, MIXED_RETRY_AFTER_503,
};

/// Measured requests.
const REQUESTS: usize = 10_000;
/// Requests before the "before" memory reading.
const WARMUP: usize = 512;
/// Requests in flight from the client at once.
const CONCURRENCY: usize = 128;
/// One chat request in this many fails (5%).
const EVERY: usize = 20;
/// The service's default `--max-in-flight`.
const MAX_IN_FLIGHT: usize = 16;
/// The fake's latency for each correct answer: long enough that 128 requests keep more
/// than 16 reads wanted at once, so the in-flight cap binds throughout the run.
const BACKEND_LATENCY: Duration = Duration::from_millis(20);
/// Allowed growth of resident memory over the measured run.
const RSS_GROWTH: f64 = 0.20;

/// What one response was, as a small code (the outcomes of all requests are kept in a
/// table allocated before the warm-up, so recording them does not move the memory reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Outcome {
    Pending = 0,
    Answered = 1,
    UpstreamRateLimited = 2,
    UpstreamOverloaded = 3,
    UpstreamError = 4,
    UpstreamProtocol = 5,
    CircuitOpen = 6,
    Unexpected = 255,
}

impl Outcome {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Outcome::Pending,
            1 => Outcome::Answered,
            2 => Outcome::UpstreamRateLimited,
            3 => Outcome::UpstreamOverloaded,
            4 => Outcome::UpstreamError,
            5 => Outcome::UpstreamProtocol,
            6 => Outcome::CircuitOpen,
            _ => Outcome::Unexpected,
        }
    }

    /// The contract's answer to each injected fault.
    fn of_fault(fault: MixedFault) -> Self {
        match fault {
            MixedFault::RateLimited => Outcome::UpstreamRateLimited,
            MixedFault::Unavailable => Outcome::UpstreamOverloaded,
            MixedFault::ServerError => Outcome::UpstreamError,
            MixedFault::MalformedJson | MixedFault::MissingId => Outcome::UpstreamProtocol,
        }
    }
}

/// The marker that makes request `i`'s prompt unique and findable in the fake's log.
fn marker(i: usize) -> String {
    format!("load-{i:06}")
}

/// The request index in a logged `messages` text.
fn index_of(messages: &str) -> usize {
    let at = messages
        .find("load-")
        .expect("every request carries its marker")
        + 5;
    messages[at..at + 6].parse().expect("six digits")
}

fn body(i: usize) -> String {
    json!({
        "state": format!("{}: a customer writes that the invoice is wrong.", marker(i)),
        "questions": {"team": {"type": "choice", "instructions": "Which team?",
                                "criteria": {"billing": null, "tech": null, "other": null}}},
    })
    .to_string()
}

/// Classifies one response: its status, the error code in its body, and for the
/// backend's 429 and 503 the `Retry-After` it passed on.
fn classify(status: u16, retry_after: Option<&str>, text: &[u8]) -> Outcome {
    let Ok(body) = serde_json::from_slice::<Value>(text) else {
        return Outcome::Unexpected;
    };
    let code = body["error"]["code"].as_str();
    match (status, code, retry_after) {
        (200, None, _) if body["answers"]["team"]["probabilities"].is_object() => Outcome::Answered,
        (429, Some("system_one_upstream_rate_limited"), Some(r)) if r == MIXED_RETRY_AFTER_429 => {
            Outcome::UpstreamRateLimited
        }
        (503, Some("system_one_upstream_overloaded"), Some(r)) if r == MIXED_RETRY_AFTER_503 => {
            Outcome::UpstreamOverloaded
        }
        (502, Some("system_one_upstream_error"), _) => Outcome::UpstreamError,
        (502, Some("system_one_upstream_protocol"), _) => Outcome::UpstreamProtocol,
        (503, Some("system_one_circuit_open"), Some(_)) => Outcome::CircuitOpen,
        _ => Outcome::Unexpected,
    }
}

/// Sends requests `range` from `CONCURRENCY` loops; records each outcome in `outcomes`
/// and the first unexpected response in `first_unexpected`.
async fn drive(
    client: &reqwest::Client,
    url: &str,
    range: std::ops::Range<usize>,
    outcomes: &Arc<Vec<AtomicU8>>,
    first_unexpected: &Arc<Mutex<Option<String>>>,
) {
    let next = Arc::new(AtomicUsize::new(range.start));
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (client, url, next) = (client.clone(), url.to_string(), next.clone());
            let (outcomes, first_unexpected) = (outcomes.clone(), first_unexpected.clone());
            let end = range.end;
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        break;
                    }
                    let reply = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body(i))
                        .send()
                        .await;
                    let (outcome, detail) = match reply {
                        Ok(response) => {
                            let status = response.status().as_u16();
                            let retry_after = response
                                .headers()
                                .get("retry-after")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned);
                            match response.bytes().await {
                                Ok(text) => (
                                    classify(status, retry_after.as_deref(), &text),
                                    format!(
                                        "{status} (Retry-After {retry_after:?}): {}",
                                        String::from_utf8_lossy(&text)
                                    ),
                                ),
                                Err(e) => (Outcome::Unexpected, format!("{status}: body: {e}")),
                            }
                        }
                        Err(e) => (Outcome::Unexpected, format!("no response: {e}")),
                    };
                    if outcome == Outcome::Unexpected {
                        first_unexpected
                            .lock()
                            .expect("lock")
                            .get_or_insert_with(|| format!("request {i}: {detail}"));
                    }
                    outcomes[i].store(outcome as u8, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("load task");
    }
}

/// This process's resident memory in KiB.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .expect("VmRSS")
}

/// 10,000 requests at concurrency 128, 5% of them hit by a backend fault: each answer is a
/// 200 or the contract's error for its fault, the in-flight cap holds, memory stays flat.
/// In a process of its own (`setup::alone`): it measures the process's memory.
#[test]
fn ten_thousand_requests_with_five_percent_faults() {
    if crate::setup::alone("load_faults::ten_thousand_requests_with_five_percent_faults") {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(120), run())
                .await
                .expect("the load run finishes within 120 s");
        });
}

async fn run() {
    let fake = FakeVllm::start().await;
    fake.set_keep_bodies(false);
    fake.set_delay(BACKEND_LATENCY);
    fake.set_fault(Fault::Mixed { every: EVERY });
    let config = support::config(&fake.base_url(), &[]);
    assert_eq!(
        config.upstream.max_in_flight, MAX_IN_FLIGHT,
        "the default cap"
    );
    let service = support::start(config).await;
    let url = service.url("/v1/systemone");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");

    let total = WARMUP + REQUESTS;
    let outcomes: Arc<Vec<AtomicU8>> = Arc::new((0..total).map(|_| AtomicU8::new(0)).collect());
    let first_unexpected = Arc::new(Mutex::new(None));

    drive(&client, &url, 0..WARMUP, &outcomes, &first_unexpected).await;
    let rss_before = vm_rss_kib();
    let started = Instant::now();
    drive(&client, &url, WARMUP..total, &outcomes, &first_unexpected).await;
    let took = started.elapsed();
    let rss_after = vm_rss_kib();

    if let Some(first) = first_unexpected.lock().expect("lock").take() {
        panic!("a response that is neither a 200 nor the contract's error for a fault: {first}");
    }
    let outcomes: Vec<Outcome> = outcomes
        .iter()
        .map(|o| Outcome::from_u8(o.load(Ordering::Relaxed)))
        .collect();
    assert!(
        !outcomes.contains(&Outcome::Pending),
        "every request was answered"
    );

    // Every injected fault hit exactly one request, which got the contract's error for it.
    let hits = fake.take_mixed_hits();
    let mut faulted = vec![None; total];
    for (messages, fault) in &hits {
        let i = index_of(messages);
        assert!(faulted[i].is_none(), "request {i} hit twice");
        faulted[i] = Some(*fault);
        assert_eq!(
            outcomes[i],
            Outcome::of_fault(*fault),
            "request {i} hit by {fault:?}"
        );
    }
    // And every other request was answered or refused by the breaker before any read.
    let count = |want: Outcome| outcomes.iter().filter(|o| **o == want).count();
    let (answered, circuit_open) = (count(Outcome::Answered), count(Outcome::CircuitOpen));
    for (i, outcome) in outcomes.iter().enumerate() {
        if faulted[i].is_none() {
            assert!(
                matches!(outcome, Outcome::Answered | Outcome::CircuitOpen),
                "request {i} was not hit by a fault but got {outcome:?}"
            );
        }
    }
    let reads = fake.chat_requests();
    assert_eq!(
        reads,
        total - circuit_open,
        "one read per request the breaker let through"
    );
    assert_eq!(hits.len(), reads / EVERY, "5% of the reads failed");
    assert_eq!(answered + hits.len() + circuit_open, total);
    for fault in MixedFault::ROTATION {
        let n = hits.iter().filter(|(_, f)| *f == fault).count();
        assert!(n >= hits.len() / 5, "{fault:?} injected {n} times");
    }

    let max = fake.max_in_flight();
    assert!(
        max <= MAX_IN_FLIGHT,
        "the backend saw {max} reads at once; the cap is {MAX_IN_FLIGHT}"
    );
    assert_eq!(max, MAX_IN_FLIGHT, "the cap binds under this load");
    assert_eq!(service.state.pipeline.in_flight().in_use(), 0);

    let growth = rss_after as f64 / rss_before as f64 - 1.0;
    eprintln!(
        "{REQUESTS} requests at concurrency {CONCURRENCY} in {:.2} s ({:.0}/s); of all {total} \
         (with the {WARMUP} warm-up): {answered} answered, {} hit by a fault and answered with \
         its error, {circuit_open} circuit_open; backend max in flight {max}; VmRSS {:.1} MiB \
         before, {:.1} MiB after ({:+.1}%)",
        took.as_secs_f64(),
        REQUESTS as f64 / took.as_secs_f64(),
        hits.len(),
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        growth * 100.0
    );
    assert!(
        growth.abs() <= RSS_GROWTH,
        "VmRSS grew {:.1}% ({rss_before} KiB → {rss_after} KiB)",
        growth * 100.0
    );
}
