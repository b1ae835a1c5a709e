//! What the gateway costs end to end: the real `systemone` binary in front of the fake
//! vLLM server, run three ways side by side:
//!
//! * **open**: no keys configured (any bearer is accepted);
//! * **1 key**: a keys file with one key;
//! * **1,000 keys**: a keys file with 1,000 keys (`k0001` … `k1000`), the caller using the
//!   last one (the constant-time scan compares the bearer with every digest anyway);
//! * and a second open service, measured like the others: its difference from the first is
//!   the noise floor of the "added" columns (an A/A comparison).
//!
//! Every configured key carries requests and questions per minute and a daily question cap
//! far above what the run sends, so every limit is checked on every request and none ever
//! refuses. The caller always sends a bearer (the SDKs do), so the requests are identical.
//!
//! Each configuration is measured at concurrency 1 and 64 with 1-question, 4-option
//! requests, in alternating rounds (open, open, 1 key, 1,000 keys, then again, each round
//! starting one configuration later), each after a short warm-up, so drift in the
//! machine's state and the position in a round hit all of them alike. The fake answers at
//! once from its own runtime in this process; the service is a child process (the binary
//! Cargo built for this bench). The table gives requests/s at concurrency 64, p50/p99
//! latency at concurrency 1 and 64, and the latency auth + rate limiting add per request:
//! (keyed percentile) − (open percentile) at the same concurrency. The request metrics
//! (`systemone_requests_total`, the per-key counter under the `anonymous` name) are
//! recorded in all three configurations alike, so they cancel out of that difference;
//! `cargo bench --bench gateway` has their cost in isolation.
//!
//! `cargo bench --bench gateway_load`
//! Knobs (environment): `GATEWAY_LOAD_SECS` (measured seconds per configuration and level,
//! default 6, split over 6 rounds), `GATEWAY_LOAD_WARMUP_SECS` (per round, default 0.25).
//! The default run measures for about 60 s.

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

use fake_vllm::FakeVllm;
use support::{built_binary, drive, env_secs, start_on_fake, ServiceGuard};

const ROUNDS: u32 = 6;
const LEVELS: [usize; 2] = [1, 64];
/// No single request may take longer than this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The bearer the caller sends in every configuration.
fn bearer(n_keys: usize) -> String {
    format!("Bearer sk-gateway-bench-{:04}", n_keys.max(1))
}

/// A keys file with `n` keys (`k0001` …, `sk-gateway-bench-0001` …).
fn gateway_keys(dir: &Path, n: usize) -> PathBuf {
    let keys: Vec<(String, String)> = (1..=n)
        .map(|i| (format!("k{i:04}"), format!("sk-gateway-bench-{i:04}")))
        .collect();
    support::keys_file(&dir.join(format!("keys-{n}.toml")), &keys)
}

fn main() {
    // `cargo bench` passes `--bench` (and maybe a filter); nothing here takes arguments.
    let warmup = env_secs("GATEWAY_LOAD_WARMUP_SECS", 0.25);
    let round = env_secs("GATEWAY_LOAD_SECS", 6.0) / ROUNDS;

    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);

    let dir = std::env::temp_dir().join(format!(
        "systemone-gateway-load-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let one = gateway_keys(&dir, 1);
    let thousand = gateway_keys(&dir, 1000);
    let configs: Vec<(&str, usize, Vec<&str>)> = vec![
        ("open (no keys)", 0, vec![]),
        ("open again (A/A noise floor)", 0, vec![]),
        (
            "1 key",
            1,
            vec!["--keys-file", one.to_str().expect("utf-8")],
        ),
        (
            "1,000 keys",
            1000,
            vec!["--keys-file", thousand.to_str().expect("utf-8")],
        ),
    ];
    let services: Vec<(ServiceGuard, SocketAddr)> = configs
        .iter()
        .map(|(_, _, flags)| start_on_fake(built_binary(), &fake.base_url(), flags))
        .collect();

    let client_rt = support::runtime("load-client");
    let client = support::load_client(128, REQUEST_TIMEOUT);
    let body = support::route_body();
    let post = |url: &str, bearer: String| {
        client
            .post(url)
            .header("content-type", "application/json")
            .header("authorization", bearer)
            .body(body.clone())
    };

    // Sanity: each configuration answers 200, and the keyed ones refuse a wrong key.
    client_rt.block_on(async {
        for ((name, n, _), (_, addr)) in configs.iter().zip(&services) {
            let url = format!("http://{addr}/v1/systemone");
            let send = |bearer: String| post(&url, bearer).send();
            let ok = send(bearer(*n)).await.expect("answers").status();
            assert_eq!(ok.as_u16(), 200, "{name}: the caller's key is answered");
            let wrong = send("Bearer sk-wrong".into())
                .await
                .expect("answers")
                .status();
            let want = if *n == 0 { 200 } else { 401 };
            assert_eq!(wrong.as_u16(), want, "{name}: a wrong key");
        }
    });
    eprintln!(
        "{} configurations × {LEVELS:?} concurrency × {ROUNDS} rounds of {:.2} s warm-up + {:.2} s measured",
        configs.len(),
        warmup.as_secs_f64(),
        round.as_secs_f64()
    );

    // phases[config][level]
    let started = Instant::now();
    let phases = support::alternating_rounds(configs.len(), &LEVELS, ROUNDS, |c, concurrency| {
        let url = format!("http://{}/v1/systemone", services[c].1);
        client_rt.block_on(drive(
            post(&url, bearer(configs[c].1)),
            concurrency,
            warmup,
            round,
        ))
    });
    let took = started.elapsed();
    drop(services);
    let _ = std::fs::remove_dir_all(&dir);

    for ((name, _, _), levels) in configs.iter().zip(&phases) {
        for (phase, concurrency) in levels.iter().zip(LEVELS) {
            phase.report_errors(&format!("{name} c={concurrency}"));
        }
    }

    let open = &phases[0];
    println!();
    println!(
        "### systemone gateway cost: 1 question × 4 options, fake vLLM with 0 latency, {:.1} s measured per configuration and level",
        round.as_secs_f64() * f64::from(ROUNDS)
    );
    println!();
    println!(
        "| configuration | req/s c=64 | vs open | p50 c=1 ms | p99 c=1 ms | p50 c=64 ms | p99 c=64 ms \
         | added p50 c=1 ms | added p99 c=1 ms | added p50 c=64 ms | added p99 c=64 ms | requests | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for ((name, _, _), levels) in configs.iter().zip(&phases) {
        let (c1, c64) = (&levels[0], &levels[1]);
        println!(
            "| {name} | {:.0} | {:.1}% | {} | {} | {} |",
            c64.rate(),
            (c64.rate() / open[1].rate() - 1.0) * 100.0,
            support::latency_cells(c1, c64, open),
            c1.requests() + c64.requests(),
            c1.errors + c64.errors,
        );
    }
    println!();
    println!(
        "Added = (keyed percentile) − (open percentile) at the same concurrency: API-key hashing \
         and constant-time scan, the per-key request/question rate limits and daily cap. The \
         request metrics run in every configuration. The fake, the client and the four \
         services share this machine's {} CPUs; the whole run took {:.0} s.",
        support::cpus(),
        took.as_secs_f64()
    );

    drop(client_rt);
    drop(fake_rt);
}
