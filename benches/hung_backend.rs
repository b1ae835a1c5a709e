//! A hung backend and a load with a few hung reads, old binary against new side by side
//! (issue 29, item 1: a timed-out read now frees its in-flight slot once its connection is
//! closed, not when the backend would have answered).
//!
//! * **timeline**: the fake vLLM accepts reads and never answers; 16 requests arrive (the
//!   default 16 slots); 0.5 s later the backend is healthy again and a prober sends one
//!   request after another: the table gives when the first normal answer came (from the
//!   start), with `--read-timeout-secs 2` and with the defaults.
//! * **faulty load**: `HUNG_LOAD_REQUESTS` (default 10,000) one-question requests at
//!   concurrency 64, every 222nd read (0.45%) hanging, the others answered after 5 ms,
//!   `--read-timeout-secs 2`: answered, 504, 503 `circuit_open`, other statuses, client
//!   timeouts, stalls (gaps of over 0.3 s in which no request completed) and the longest,
//!   and the wall time, stopped after `HUNG_LOAD_MAX_SECS` (default 300).
//!
//! `HUNG_BASE_BIN=/path/to/old/systemone cargo bench --bench hung_backend` (without it only
//! the new binary runs). Each binary runs in turn, old first, against a fresh fake.

// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_server.rs"]
mod fake_server;
// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_vllm.rs"]
mod fake_vllm;
#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use fake_vllm::{FakeVllm, Fault};
use support::start_on_fake;

const HANG: Duration = Duration::from_secs(3600);
const STALL: Duration = Duration::from_millis(300);

fn question(i: usize) -> Value {
    json!({
        "state": format!("Ticket {i}: my card was charged twice."),
        "questions": {"q": {"type": "choice", "instructions": "Refund?",
            "criteria": {"yes": "Refund it.", "no": "Do not.", "ask": "Ask for details."}}},
    })
}

/// One request's status, `None` when the client gave up after `give_up`.
async fn ask(
    client: &reqwest::Client,
    addr: SocketAddr,
    i: usize,
    give_up: Duration,
) -> Option<u16> {
    let reply = client
        .post(format!("http://{addr}/v1/systemone"))
        .timeout(give_up)
        .json(&question(i))
        .send()
        .await;
    reply.ok().map(|r| r.status().as_u16())
}

/// Seconds from the start until the first normal answer after the backend recovered.
async fn timeline(binary: &Path, extra: &[&str]) -> f64 {
    let fake = FakeVllm::start().await;
    let (_service, addr) = start_on_fake(binary, &fake.base_url(), extra);
    let client = reqwest::Client::new();
    assert_eq!(
        ask(&client, addr, 0, Duration::from_secs(30)).await,
        Some(200)
    );
    fake.set_fault(Fault::Slow(HANG));
    let start = Instant::now();
    let hung: Vec<_> = (1..=16)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { ask(&client, addr, i, Duration::from_secs(600)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    fake.set_fault(Fault::None);
    let mut i = 100;
    let first = loop {
        i += 1;
        if ask(&client, addr, i, Duration::from_secs(600)).await == Some(200) {
            break start.elapsed().as_secs_f64();
        }
    };
    hung.iter().for_each(|h| h.abort());
    first
}

#[derive(Default)]
struct LoadCounts {
    ok: usize,
    timeout_504: usize,
    circuit_open: usize,
    other: usize,
    gave_up: usize,
    stalls: usize,
    longest_gap: Duration,
    wall: Duration,
}

async fn faulty_load(binary: &Path, requests: usize, max_wall: Duration) -> LoadCounts {
    let fake = FakeVllm::start().await;
    fake.set_keep_bodies(false);
    let (_service, addr) = start_on_fake(binary, &fake.base_url(), &["--read-timeout-secs", "2"]);
    let client = support::load_client(64, Duration::from_secs(120));
    assert_eq!(
        ask(&client, addr, 0, Duration::from_secs(30)).await,
        Some(200)
    );
    fake.set_delay(Duration::from_millis(5));
    fake.set_fault(Fault::SlowEvery {
        every: 222,
        delay: HANG,
    });
    let start = Instant::now();
    let mut counts = LoadCounts::default();
    let mut last = start;
    let mut done = futures::stream::iter(1..=requests)
        .map(|i| {
            let client = client.clone();
            async move {
                let body = ask(&client, addr, i, Duration::from_secs(120)).await;
                (body, Instant::now())
            }
        })
        .buffer_unordered(64);
    while let Ok(Some((status, at))) = tokio::time::timeout_at(
        tokio::time::Instant::from_std(start + max_wall),
        done.next(),
    )
    .await
    {
        let gap = at.saturating_duration_since(last);
        if gap > STALL {
            counts.stalls += 1;
        }
        counts.longest_gap = counts.longest_gap.max(gap);
        last = last.max(at);
        match status {
            Some(200) => counts.ok += 1,
            Some(504) => counts.timeout_504 += 1,
            Some(503) => counts.circuit_open += 1,
            Some(_) => counts.other += 1,
            None => counts.gave_up += 1,
        }
    }
    counts.wall = start.elapsed();
    counts
}

fn main() {
    let new = PathBuf::from(env!("CARGO_BIN_EXE_systemone"));
    let mut binaries = Vec::new();
    if let Some(base) = std::env::var_os("HUNG_BASE_BIN") {
        binaries.push(("old", PathBuf::from(base)));
    }
    binaries.push(("new", new));
    let requests: usize = std::env::var("HUNG_LOAD_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let max_wall = support::env_secs("HUNG_LOAD_MAX_SECS", 300.0);
    let runtime = support::runtime("hung-bench");

    println!("timeline: 16 requests on a hung backend, healthy again at 0.5 s");
    println!("| binary | --read-timeout-secs | first normal answer (s from start) |");
    println!("|---|---:|---:|");
    for (name, binary) in &binaries {
        for (label, extra) in [
            ("2", &["--read-timeout-secs", "2"][..]),
            ("default (30)", &[][..]),
        ] {
            let first = runtime.block_on(timeline(binary, extra));
            println!("| {name} | {label} | {first:.1} |");
        }
    }

    println!();
    println!("faulty load: {requests} requests at concurrency 64, 0.45% of reads hang, --read-timeout-secs 2");
    println!("| binary | answered | 504 | 503 | other | gave up | stalls > 0.3 s | longest gap s | wall s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, binary) in &binaries {
        let c = runtime.block_on(faulty_load(binary, requests, max_wall));
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {:.2} | {:.1} |",
            c.ok,
            c.timeout_504,
            c.circuit_open,
            c.other,
            c.gave_up,
            c.stalls,
            c.longest_gap.as_secs_f64(),
            c.wall.as_secs_f64()
        );
    }
}
