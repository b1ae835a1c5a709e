//! The in-flight cap holds exactly as the backend sees it: through a TCP proxy that counts
//! connections with a request outstanding (`tests/hermetic/setup/tcp_counter.rs`), the most
//! at once equals `--max-in-flight` under cancellation-heavy load: failing questions cancelling
//! their siblings, read timeouts, and clients that hang up mid-request. A read whose
//! caller stopped waiting keeps its slot until its connection's socket is closed
//! (src/backend/pool.rs).

use crate::support;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::setup::tcp_counter::TcpCounter;
use crate::support::fake_vllm::{FakeVllm, Fault};
use crate::support::{criteria, Service};

const CAP: usize = 4;

/// `k` choice questions of 3 options each.
fn questions(k: usize) -> Value {
    let questions: Map<String, Value> = (0..k)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "choice", "instructions": format!("Question {i}?"), "criteria": criteria(3)}),
            )
        })
        .collect();
    json!({"state": "refund please", "questions": questions})
}

async fn setup() -> (FakeVllm, TcpCounter, Service) {
    let fake = FakeVllm::start().await;
    let counter = TcpCounter::in_front_of(&fake.base_url()).await;
    let cap = CAP.to_string();
    let config = support::config(
        &counter.url("/v1"),
        &[
            "--max-in-flight",
            &cap,
            "--read-timeout-secs",
            "0.2",
            // Failures must keep reaching the backend, not trip the breaker.
            "--circuit-failure-rate",
            "0",
        ],
    );
    (fake, counter, support::start(config).await)
}

/// `n` concurrent requests of 5 questions, each client giving up after `give_up` (if any).
async fn load(service: &Service, n: usize, give_up: Option<Duration>) -> Vec<Option<u16>> {
    let url = service.url("/v1/systemone");
    let sends = (0..n).map(|_| {
        let url = url.clone();
        async move {
            let mut client = reqwest::Client::builder();
            if let Some(after) = give_up {
                client = client.timeout(after);
            }
            let reply = client
                .build()
                .expect("client")
                .post(url)
                .json(&questions(5))
                .send()
                .await;
            reply.ok().map(|r| r.status().as_u16())
        }
    });
    futures::future::join_all(sends).await
}

/// Waits until nothing is outstanding at the backend and every slot is free.
async fn settle(counter: &TcpCounter, service: &Service) {
    while counter.busy() > 0 || service.state.pipeline.in_flight().in_use() > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_backend_never_sees_more_requests_than_the_cap_under_cancellation() {
    let (fake, counter, service) = setup().await;

    // Every 5th read fails at once (429, 503, 500, …) and cancels its request's siblings,
    // which are in the middle of a 150 ms answer.
    fake.set_delay(Duration::from_millis(150));
    fake.set_fault(Fault::Mixed { every: 5 });
    let statuses = load(&service, 48, None).await;
    assert!(statuses.iter().any(|s| *s != Some(200)), "{statuses:?}");

    // Every read outlives the 0.2 s read timeout: each request fails with 504 while the
    // backend is still answering.
    fake.set_fault(Fault::None);
    fake.set_delay(Duration::from_millis(400));
    let statuses = load(&service, 6, None).await;
    assert!(statuses.iter().all(|s| *s == Some(504)), "{statuses:?}");

    // Clients hang up 60 ms into their requests.
    fake.set_delay(Duration::from_millis(150));
    let statuses = load(&service, 48, Some(Duration::from_millis(60))).await;
    assert!(statuses.iter().all(Option::is_none), "{statuses:?}");

    settle(&counter, &service).await;
    assert_eq!(
        counter.max_busy(),
        CAP,
        "most connections with a request outstanding at once"
    );
    // The fake's own count of running handlers is not the measure: when a client's close
    // reaches it, hyper closes the fake's socket a few microseconds before it drops the
    // handler, so a handler can outlive the connection the proxy saw end (and the slot
    // that was freed after it).
}
