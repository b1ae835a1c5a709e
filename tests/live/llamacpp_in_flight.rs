//! End to end against a real llama.cpp `llama-server` serving Gemma 3 270M (`docs/backends.md`):
//! the in-flight cap holds under concurrent callers, as a recording proxy
//! (`tests/live/setup/proxy.rs`) between the service and llama-server sees.
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: base URL of a llama-server with Gemma 3 270M, ending in `/v1`
//!   (`scripts/start-llama.sh` starts one and prints it).
//!
//! Without it the test fails with a message that says so; it never skips. The service
//! listens on 127.0.0.1:0; `tests/live/setup/llama.rs` has the setup and the shape checks.

use crate::support;
use std::time::Instant;

use serde_json::{json, Value};

use crate::setup::llama::{
    answer, answer_ids, ask, backend_turn, check_answer, check_usage, llama_config, llama_root,
    NO_YES,
};
use crate::setup::proxy::Proxy;

/// Proves that concurrent callers are all answered and the process-wide cap holds against a
/// real backend: 6 requests × 2 questions at `--max-in-flight 2` all get 200 with both
/// answers, while a proxy between the service and llama-server never sees more than 2
/// requests at once (and does see 2, so the cap was exercised). Every chat completion the
/// proxy saw is accounted for (one per read, plus one per post-sampling fallback), and the
/// `systemone_upstream_in_flight` gauge is back to 0 afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_all_answered_without_exceeding_the_in_flight_cap() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let proxy = Proxy::start(llama_root(&url)).await;
    let service = support::start(llama_config(
        &format!("{}/v1", proxy.url()),
        &["--max-in-flight", "2"],
    ))
    .await;
    let bodies: Vec<Value> = (0..6)
        .map(|i| {
            json!({
                "state": format!("Ticket {i}: invoice 10{i} was charged twice."),
                "questions": {
                    "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
                    "team": {"type": "choice", "criteria": {"billing": null, "bug": null, "sales": null}}
                }
            })
        })
        .collect();
    let replies = futures::future::join_all(bodies.iter().map(|b| ask(&service, b))).await;
    let elapsed = started.elapsed();

    let mut fallbacks: u64 = 0;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(answer_ids(&reply.body), ["refund", "team"]);
        check_answer(answer(&reply.body, "refund"), "noul", &NO_YES);
        check_answer(
            answer(&reply.body, "team"),
            "choice",
            &["billing", "bug", "sales"],
        );
        let usage = check_usage(&reply.body, 2);
        fallbacks += usage["upstream_requests"].as_u64().expect("a count") - 2;
    }
    let max = proxy.max_in_flight();
    assert!(
        max <= 2,
        "{max} upstream requests were in flight at once; the cap is 2"
    );
    assert_eq!(
        max, 2,
        "12 reads under a cap of 2 should have run 2 at a time"
    );
    let chat = proxy
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/chat/completions"))
        .count();
    assert_eq!(
        chat,
        12 + fallbacks as usize,
        "one chat completion per read plus one per recovery read"
    );
    let metrics = support::metrics(&service).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.trim() == "systemone_upstream_in_flight 0"),
        "no upstream request is left in flight:\n{metrics}"
    );
    eprintln!(
        "concurrency: 6 requests x 2 questions at cap 2 in {elapsed:.2?}, max in flight {max}, {chat} chat completions"
    );
}
