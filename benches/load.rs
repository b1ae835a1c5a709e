//! End-to-end load: the real `systemone` binary in front of the fake vLLM server.
//!
//! * The fake runs in this process on its own multi-thread runtime, with no added latency.
//! * The service is the binary Cargo built (`CARGO_BIN_EXE_systemone`), started as a child
//!   on `127.0.0.1:0`; the bound address is read from its `listening` log line.
//! * A keep-alive reqwest client sends 1-question, 4-option requests at each concurrency
//!   level for a fixed time, in alternating rounds (each after a short warm-up) straight to
//!   the fake (the exact body the service sends upstream for that request) and through the
//!   service. The *added* latency is the service percentile minus the direct percentile at
//!   the same concurrency.
//! * Memory is the child's `VmRSS` before/after each level and `VmHWM` (peak) from
//!   `/proc/<pid>/status`.
//!
//! Targets are printed next to the numbers, never asserted.
//!
//! `cargo bench --bench load`
//! Knobs (environment): `LOAD_SECS` (measured seconds per path and level, default 3, split
//! over 3 rounds), `LOAD_WARMUP_SECS` (per round, default 0.3), `LOAD_LEVELS` (default
//! `1,64`),
//! `LOAD_SERVICE_RUST_LOG` (the child's `RUST_LOG`; default keeps only warnings plus the
//! startup lines), `LOAD_SERVICE_ARGS` (extra `serve` flags, split on whitespace, e.g.
//! `--max-in-flight 64`).

#[path = "../tests/common/fake_vllm.rs"]
mod fake_vllm;
#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use fake_vllm::FakeVllm;
use support::{
    drive, env_secs, fake_backend_flags, label_ids, mark, ms, one_question, route_criteria,
    route_question, serve_command, ticket_state, Phase, ServiceGuard, ROUTE_INSTRUCTIONS,
};
use systemone::backend::vllm::VllmBackend;
use systemone::backend::ReadRequest;
use systemone::models::tokens::TokenTable;
use systemone::models::Model;
use systemone::request::prompt::plan;

const MODEL: &str = "glm-5.3-flash";
const LEVELS: [usize; 2] = [1, 64];
/// Each level alternates direct and service rounds, so drift in the machine's state (other
/// work, frequency) hits both paths alike.
const ROUNDS: u32 = 3;
/// No single request may take longer than this; keeps every phase bounded.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

// Targets (printed, not asserted).
const TARGET_QPS: f64 = 5_000.0;
const TARGET_ADDED_P50_C1_MS: f64 = 1.0;
const TARGET_RSS_MB: f64 = 100.0;

/// Starts the service against `backend_url`; returns the guard and its address.
fn start_service(backend_url: &str) -> (ServiceGuard, SocketAddr) {
    let extra_args = std::env::var("LOAD_SERVICE_ARGS").unwrap_or_default();
    if !extra_args.is_empty() {
        eprintln!("extra service flags: {extra_args}");
    }
    let mut command = serve_command(&fake_backend_flags(backend_url));
    command.args(extra_args.split_whitespace());
    if let Ok(rust_log) = std::env::var("LOAD_SERVICE_RUST_LOG") {
        command.env("RUST_LOG", rust_log);
    }
    support::start_service(command, |_, _| {})
}

/// `(VmRSS, VmHWM)` of `pid` in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time (user + system) the process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15 (clock ticks).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis((ticks(14) + ticks(15)) * 10)
}

/// The caller's body: one choice question with four options.
fn service_body() -> Vec<u8> {
    let criteria: serde_json::Map<String, Value> = route_criteria().into_iter().collect();
    let body = json!({
        "state": ticket_state(),
        "questions": {
            "route": {"type": "choice", "instructions": ROUTE_INSTRUCTIONS, "criteria": criteria}
        }
    });
    serde_json::to_vec(&body).expect("serialises")
}

/// The vLLM body the service sends upstream for [`service_body`], rendered by the library.
fn direct_body(base_url: &str) -> Vec<u8> {
    let backend = VllmBackend::new(reqwest::Client::new(), base_url, MODEL.into(), None, 128);
    let model = Arc::new(Model::new(
        MODEL,
        Arc::new(VllmBackend::new(
            reqwest::Client::new(),
            base_url,
            MODEL.into(),
            None,
            128,
        )),
        TokenTable::load("golden-fake").expect("golden-fake table"),
    ));
    let req = one_question(&model, &ticket_state(), route_question(route_criteria()));
    let asks = plan(&req);
    let ids = label_ids(&model, 4);
    let read = ReadRequest {
        content: &asks[0][0].content,
        prefix: &model.table.prefix,
        allowed_ids: &ids,
        read_ids: &ids,
        chained: false,
    };
    serde_json::to_vec(&backend.body(&read)).expect("serialises")
}

fn main() {
    // `cargo bench` passes `--bench` (and maybe a filter); nothing here takes arguments.
    let warmup = env_secs("LOAD_WARMUP_SECS", 0.3);
    let duration = env_secs("LOAD_SECS", 3.0);
    let round = duration / ROUNDS;
    let levels: Vec<usize> = std::env::var("LOAD_LEVELS")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|c| c.trim().parse().ok())
                .filter(|c| (1..=4096).contains(c))
                .collect()
        })
        .filter(|l: &Vec<usize>| !l.is_empty())
        .unwrap_or_else(|| LEVELS.to_vec());

    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    // The fake keeps every body it receives; empty the log so it does not grow unbounded.
    {
        let fake = fake.clone();
        fake_rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                // Swap under the lock, drop outside it: the handlers share this mutex.
                let old = std::mem::take(&mut *fake.state.chat_bodies.lock().expect("lock"));
                drop(old);
            }
        });
    }

    let (service, addr) = start_service(&fake.base_url());
    let pid = service.pid();
    eprintln!(
        "fake vLLM at {}, service (pid {pid}) at {addr}",
        fake.base_url()
    );

    let client_rt = support::runtime("load-client");
    let client = support::load_client(256, REQUEST_TIMEOUT);
    let post = |url: &str, body: &[u8]| {
        client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_vec())
    };

    let service_url = format!("http://{addr}/v1/systemone");
    let direct_url = format!("{}/chat/completions", fake.base_url());
    let service_body = service_body();
    let direct_body = direct_body(&fake.base_url());

    // Sanity: the service answers, and sends upstream exactly the body the direct path uses.
    let (rss_idle, _) = memory(pid);
    client_rt.block_on(async {
        fake.state.chat_bodies.lock().expect("lock").clear();
        let response = post(&service_url, &service_body)
            .send()
            .await
            .expect("the service answers");
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            eprintln!("WARNING: the service answered {status}: {text}");
        }
        let sent = fake.chat_bodies();
        let want: Value = serde_json::from_slice(&direct_body).expect("json");
        if sent.len() != 1 || sent[0] != want {
            eprintln!(
                "WARNING: the service sent {} upstream bodies, not exactly the direct body; \
                 added latency compares different requests",
                sent.len()
            );
        }
    });
    eprintln!(
        "service body {} bytes, upstream body {} bytes; per level and path {ROUNDS} rounds of \
         {:.1} s warm-up + {:.1} s measured",
        service_body.len(),
        direct_body.len(),
        warmup.as_secs_f64(),
        round.as_secs_f64()
    );

    struct Row {
        concurrency: usize,
        direct: Phase,
        through: Phase,
        cpu_per_q: Duration,
        rss_before: f64,
        rss_after: f64,
        hwm: f64,
    }
    let mut rows = Vec::new();
    for &concurrency in &levels {
        let (rss_before, _) = memory(pid);
        let mut direct = Phase::default();
        let mut through = Phase::default();
        let mut cpu_used = Duration::ZERO;
        for _ in 0..ROUNDS {
            let request = post(&direct_url, &direct_body);
            direct.merge(client_rt.block_on(drive(request, concurrency, warmup, round)));
            let cpu_before = cpu_time(pid);
            let request = post(&service_url, &service_body);
            through.merge(client_rt.block_on(drive(request, concurrency, warmup, round)));
            cpu_used += cpu_time(pid).saturating_sub(cpu_before);
        }
        let (rss_after, hwm) = memory(pid);
        // The CPU time covers the warm-up too; so does `all_requests`.
        let cpu_per_q = cpu_used / u32::try_from(through.all_requests.max(1)).unwrap_or(u32::MAX);
        for (name, phase) in [("direct", &direct), ("service", &through)] {
            phase.report_errors(&format!("c={concurrency} {name}"));
        }
        eprintln!(
            "c={concurrency}: direct {:.0}/s, service {:.0}/s",
            direct.rate(),
            through.rate()
        );
        rows.push(Row {
            concurrency,
            direct,
            through,
            cpu_per_q,
            rss_before,
            rss_after,
            hwm,
        });
    }
    let (rss_end, hwm_end) = memory(pid);
    drop(service);

    println!();
    println!(
        "### systemone load: 1 question × 4 options, fake vLLM with 0 latency, {} s measured per path and level",
        duration.as_secs_f64()
    );
    println!();
    println!(
        "| concurrency | requests | errors svc/direct | questions/s (≥ {TARGET_QPS:.0}) | p50 ms | p99 ms \
         | direct p50 ms | direct p99 ms | direct req/s | added p50 ms (< {TARGET_ADDED_P50_C1_MS} at c=1) \
         | added p99 ms | service CPU µs/q | RSS before MB | RSS after MB | peak RSS MB (< {TARGET_RSS_MB:.0}) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        // An empty phase shows 0.
        let at = |phase: &Phase, p: f64| phase.percentile(p).unwrap_or_default();
        let (p50, p99) = (at(&r.through, 50.0), at(&r.through, 99.0));
        let (d50, d99) = (at(&r.direct, 50.0), at(&r.direct, 99.0));
        let added50 = ms(p50) - ms(d50);
        let added99 = ms(p99) - ms(d99);
        let qps = r.through.rate();
        let added_note = if r.concurrency == 1 {
            format!(" {}", mark(added50 < TARGET_ADDED_P50_C1_MS))
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {}/{} | {:.0} {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:.3}{} | {:.3} | {:.0} | {:.1} | {:.1} | {:.1} {} |",
            r.concurrency,
            r.through.requests(),
            r.through.errors,
            r.direct.errors,
            qps,
            mark(qps >= TARGET_QPS),
            ms(p50),
            ms(p99),
            ms(d50),
            ms(d99),
            r.direct.rate(),
            added50,
            added_note,
            added99,
            r.cpu_per_q.as_secs_f64() * 1e6,
            r.rss_before,
            r.rss_after,
            r.hwm,
            mark(r.hwm < TARGET_RSS_MB),
        );
    }
    println!();
    println!(
        "Service RSS: {rss_idle:.1} MB idle after start, {rss_end:.1} MB at the end, peak (VmHWM) {hwm_end:.1} MB. \
         Added latency = service percentile − direct percentile at the same concurrency. \
         The fake, the client and the service share this machine's {} CPUs.",
        support::cpus()
    );

    drop(client_rt);
    drop(fake_rt);
}
