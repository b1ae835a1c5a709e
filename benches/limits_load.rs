//! What counting per-key limits outside the process costs (issue 13): the real `systemone`
//! binary in front of the zero-latency fake vLLM server, one key with requests per minute,
//! questions per minute and a daily cap far above what the run sends (so every check is
//! made and none refuses), counted
//!
//! * **memory**: in the process (the default);
//! * **redis**: in a `redis-server` on this machine (`--redis-url`; one `EVALSHA` for the
//!   request, one for the questions and daily cap, one pipeline for the usage record);
//! * **embedded**: in a `redb` file (`--state-dir`; a durable commit per admission and
//!   per usage record);
//!
//! each at concurrency 1 and 64 with 1-question, 4-option requests, in alternating rounds
//! after a short warm-up. "Added" is (store percentile) − (memory percentile) at the same
//! concurrency. Store calls per request are the calls the service itself counted
//! (`systemone_limit_store_latency_seconds_count`) over the requests it answered: for
//! Redis each is one round trip; for redb, two of the three are durable commits (the
//! request rate is checked in memory). Then
//! throughput at concurrency 64 of one Redis replica against three sharing the Redis
//! (the load split evenly over them).
//!
//! `cargo bench --bench limits_load` (needs `redis-server` on PATH, or
//! `SYSTEMONE_REDIS_URL_FOR_TESTS`). Knobs: `LIMITS_LOAD_SECS` (measured seconds per store
//! and level, default 4, split over 4 rounds), `LIMITS_LOAD_WARMUP_SECS` (per round,
//! default 0.25).

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
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_vllm::FakeVllm;
use support::{built_binary, drive, env_secs, start_on_fake, Phase, ServiceGuard};

const ROUNDS: u32 = 4;
const LEVELS: [usize; 2] = [1, 64];
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const BEARER: &str = "Bearer sk-limits-bench-1";

/// A `redis-server` child with no persistence, killed when dropped.
struct Redis {
    url: String,
    child: Option<Child>,
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `SYSTEMONE_REDIS_URL_FOR_TESTS`, else a `redis-server` of the bench's own.
fn redis() -> Redis {
    if let Ok(url) = std::env::var("SYSTEMONE_REDIS_URL_FOR_TESTS") {
        return Redis { url, child: None };
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on PATH (apt-get install redis-server)");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Redis {
        url: format!("redis://127.0.0.1:{port}"),
        child: Some(child),
    }
}

/// Sum of the values of every `/metrics` line starting with `prefix`.
fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn main() {
    let warmup = env_secs("LIMITS_LOAD_WARMUP_SECS", 0.25);
    let round = env_secs("LIMITS_LOAD_SECS", 4.0) / ROUNDS;
    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);
    let redis = redis();
    let dir = std::env::temp_dir().join(format!(
        "systemone-limits-load-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let keys = support::keys_file(
        &dir.join("keys.toml"),
        &[("bench".to_string(), "sk-limits-bench-1".to_string())],
    );
    let keys = keys.to_str().expect("utf-8");
    let state_dir = dir.join("state");
    let prefix = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let configs: Vec<(&str, Vec<&str>)> = vec![
        ("memory", vec!["--keys-file", keys]),
        (
            "redis",
            vec![
                "--keys-file",
                keys,
                "--redis-url",
                &redis.url,
                "--redis-prefix",
                &prefix,
            ],
        ),
        (
            "embedded (redb)",
            vec![
                "--keys-file",
                keys,
                "--state-dir",
                state_dir.to_str().expect("utf-8"),
            ],
        ),
    ];
    let services: Vec<(ServiceGuard, SocketAddr)> = configs
        .iter()
        .map(|(_, flags)| start_on_fake(built_binary(), &fake.base_url(), flags))
        .collect();
    let client_rt = support::runtime("load-client");
    let client = support::load_client(128, REQUEST_TIMEOUT);
    let body = support::route_body();
    let post = |addr: &SocketAddr| {
        client
            .post(format!("http://{addr}/v1/systemone"))
            .header("content-type", "application/json")
            .header("authorization", BEARER)
            .body(body.clone())
    };
    client_rt.block_on(async {
        for ((name, _), (_, addr)) in configs.iter().zip(&services) {
            let status = post(addr).send().await.expect("answers").status();
            assert_eq!(status.as_u16(), 200, "{name}: the key is answered");
        }
    });

    let started = Instant::now();
    let phases = support::alternating_rounds(configs.len(), &LEVELS, ROUNDS, |c, concurrency| {
        client_rt.block_on(drive(post(&services[c].1), concurrency, warmup, round))
    });

    // Round trips per request, as the service counted them.
    let trips: Vec<Option<f64>> = client_rt.block_on(async {
        let mut out = Vec::new();
        for (_, addr) in &services {
            let text = client
                .get(format!("http://{addr}/metrics"))
                .send()
                .await
                .expect("metrics")
                .text()
                .await
                .expect("text");
            let calls = metric_sum(&text, "systemone_limit_store_latency_seconds_count");
            let requests = metric_sum(&text, "systemone_key_requests_total{key=\"bench\"}");
            out.push((calls > 0.0).then(|| calls / requests));
        }
        out
    });

    // One Redis replica against three sharing the Redis, concurrency 64 in all.
    let replicas: Vec<(ServiceGuard, SocketAddr)> = (0..2)
        .map(|_| start_on_fake(built_binary(), &fake.base_url(), &configs[1].1))
        .collect();
    let three: Vec<SocketAddr> = std::iter::once(services[1].1)
        .chain(replicas.iter().map(|(_, a)| *a))
        .collect();
    let mut one_phase = Phase::default();
    let mut three_phase = Phase::default();
    for _ in 0..ROUNDS {
        one_phase.merge(client_rt.block_on(drive(post(&three[0]), 64, warmup, round)));
        let parts = client_rt.block_on(async {
            let runs = three
                .iter()
                .enumerate()
                .map(|(i, a)| drive(post(a), if i == 0 { 22 } else { 21 }, warmup, round));
            futures::future::join_all(runs).await
        });
        let mut merged = Phase::default();
        let mut elapsed = Duration::ZERO;
        for p in parts {
            elapsed = elapsed.max(p.elapsed);
            merged.all_requests += p.all_requests;
            merged.errors += p.errors;
            merged.latencies.extend(p.latencies);
            if merged.first_error.is_none() {
                merged.first_error = p.first_error;
            }
        }
        merged.latencies.sort_unstable();
        merged.elapsed = elapsed;
        three_phase.merge(merged);
    }
    let took = started.elapsed();
    drop(replicas);
    drop(services);
    let _ = std::fs::remove_dir_all(&dir);

    for ((name, _), levels) in configs.iter().zip(&phases) {
        for (phase, concurrency) in levels.iter().zip(LEVELS) {
            phase.report_errors(&format!("{name} c={concurrency}"));
        }
    }
    one_phase.report_errors("redis, 1 replica");
    three_phase.report_errors("redis, 3 replicas");

    let memory = &phases[0];
    println!();
    println!(
        "### per-key limits: where they are counted, 1 question × 4 options, fake vLLM with 0 latency, {:.1} s measured per store and level",
        round.as_secs_f64() * f64::from(ROUNDS)
    );
    println!();
    println!(
        "| store | req/s c=64 | p50 c=1 ms | p99 c=1 ms | p50 c=64 ms | p99 c=64 ms | added p50 c=1 ms \
         | added p99 c=1 ms | added p50 c=64 ms | added p99 c=64 ms | store calls / request | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (((name, _), levels), trips) in configs.iter().zip(&phases).zip(&trips) {
        let (c1, c64) = (&levels[0], &levels[1]);
        println!(
            "| {name} | {:.0} | {} | {} | {} |",
            c64.rate(),
            support::latency_cells(c1, c64, memory),
            trips.map_or("0 (in process)".to_string(), |t| format!("{t:.2}")),
            c1.errors + c64.errors,
        );
    }
    println!();
    println!("| Redis replicas, c=64 in all | req/s | p50 ms | p99 ms | errors |");
    println!("|---|---:|---:|---:|---:|");
    for (name, phase) in [("1", &one_phase), ("3", &three_phase)] {
        println!(
            "| {name} | {:.0} | {:.3} | {:.3} | {} |",
            phase.rate(),
            phase.percentile_ms(50.0),
            phase.percentile_ms(99.0),
            phase.errors
        );
    }
    println!();
    println!(
        "The fake, the load client, Redis and every replica share this machine's {} CPUs: the \
         three-replica row shows one Redis serving three replicas' checks, not a fleet's \
         capacity (more replicas only split the same cores). The whole run took {:.0} s.",
        support::cpus(),
        took.as_secs_f64()
    );
    drop(client_rt);
    drop(fake_rt);
}
