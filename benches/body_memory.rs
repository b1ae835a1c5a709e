//! What small compressed bodies that expand to nearly the body limit cost the service in
//! memory (issue 29, item 5): the real `systemone` binary in front of the fake vLLM gets
//! bursts of N concurrent ~23 KB gzip bodies, each a JSON request whose state holds a
//! ~23 MB string (just under the 24 MiB limit). Each burst runs in a fresh process.
//!
//! The table gives, per burst, the answers by status, the process's resident memory idle
//! before the burst, its peak (`VmHWM`) and what it still holds 3 s after the burst
//! (`VmRSS`, "settled").
//!
//! `cargo bench --bench body_memory`
//! Knobs (environment): `BODY_MEMORY_BIN` (the binary to measure, e.g. an older build;
//! default this build's), `BODY_MEMORY_BURSTS` (comma-separated concurrencies, default
//! `64,128`), `BODY_MEMORY_FLAGS` (extra `serve` flags, space-separated, e.g.
//! `--max-body-memory-mb 512`).

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

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use fake_vllm::FakeVllm;
use std::path::Path;

/// Bytes of the state string: with the JSON around it, just under the 24 MiB limit.
const STATE_BYTES: usize = 23 * 1024 * 1024;

/// One gzip body: a one-question request whose state is a long run of one letter (gzip's
/// best ratio, ~1000:1, so ~23 KB on the wire).
fn gzip_body() -> Vec<u8> {
    let text = "x".repeat(STATE_BYTES);
    let json = serde_json::json!({
        "state": {"log": text},
        "questions": {"route": {"type": "choice", "criteria": {"a": "billing", "b": "tech"}}}
    });
    let raw = serde_json::to_vec(&json).expect("serializes");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&raw).expect("compresses");
    gz.finish().expect("compresses")
}

/// `field` of `/proc/<pid>/status` in MiB (`VmRSS`, `VmHWM`).
fn proc_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// What one burst measured.
struct Burst {
    /// Answers by status (0: no answer).
    statuses: BTreeMap<u16, usize>,
    /// Resident MiB idle before, at the peak, and 3 s after.
    idle: f64,
    peak: f64,
    settled: f64,
    /// Seconds from the first send to the last answer.
    secs: f64,
    /// `/tokenize` and chat requests the fake backend received during the burst.
    backend_calls: usize,
}

/// One burst against a fresh service.
fn burst(fake: &FakeVllm, n: usize, body: &[u8]) -> Burst {
    let fake_url = &fake.base_url();
    let bin = std::env::var("BODY_MEMORY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_systemone").to_string());
    let flags = std::env::var("BODY_MEMORY_FLAGS").unwrap_or_default();
    let mut extra = vec!["--max-concurrent-requests", "1024"];
    extra.extend(flags.split_whitespace());
    let (service, addr) = support::start_on_fake(Path::new(&bin), fake_url, &extra);
    let pid = service.pid();
    let url = format!("http://{addr}/v1/systemone");
    let client = support::load_client(n, Duration::from_secs(120));
    let rt = support::runtime("burst");
    std::thread::sleep(Duration::from_secs(1));
    let idle = proc_mib(pid, "VmRSS");
    let calls = || fake.tokenize_requests() + fake.chat_requests();
    let calls_before = calls();
    let started = std::time::Instant::now();
    let statuses = rt.block_on(async {
        let sends = (0..n).map(|_| {
            client
                .post(&url)
                .header("content-type", "application/json")
                .header("content-encoding", "gzip")
                .body(body.to_vec())
                .send()
        });
        let mut counts = BTreeMap::new();
        for answer in futures::future::join_all(sends).await {
            let status = answer.map_or(0, |r| r.status().as_u16());
            *counts.entry(status).or_insert(0) += 1;
        }
        counts
    });
    let secs = started.elapsed().as_secs_f64();
    let backend_calls = calls() - calls_before;
    let peak = proc_mib(pid, "VmHWM");
    std::thread::sleep(Duration::from_secs(3));
    let settled = proc_mib(pid, "VmRSS");
    Burst {
        statuses,
        idle,
        peak,
        settled,
        secs,
        backend_calls,
    }
}

fn main() {
    let body = gzip_body();
    let bursts: Vec<usize> = std::env::var("BODY_MEMORY_BURSTS")
        .unwrap_or_else(|_| "64,128".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);
    println!(
        "body: {} bytes gzip, {} MiB state; flags: {:?}",
        body.len(),
        STATE_BYTES / (1024 * 1024),
        std::env::var("BODY_MEMORY_FLAGS").unwrap_or_default()
    );
    println!(
        "| concurrent | answers (status × n) | seconds to the last answer | backend calls \
         (tokenize + chat) | idle RSS MiB | peak RSS MiB | settled RSS MiB |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for n in bursts {
        let b = burst(&fake, n, &body);
        let answers: Vec<String> = b
            .statuses
            .iter()
            .map(|(s, c)| format!("{s} × {c}"))
            .collect();
        println!(
            "| {n} | {} | {:.2} | {} | {:.0} | {:.0} | {:.0} |",
            answers.join(", "),
            b.secs,
            b.backend_calls,
            b.idle,
            b.peak,
            b.settled
        );
    }
}
