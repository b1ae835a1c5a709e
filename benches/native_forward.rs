//! What the `systemone` dialect adds in front of a native System One upstream (issue 27):
//! the same request sent straight to the upstream, and through the service with
//! `--backend systemone`, side by side.
//!
//! * The upstream is the fake native server of the tests (`tests/hermetic/setup/fake_native.rs`,
//!   TypeSafe flavor, no added latency), in this process on its own runtime, so the
//!   difference is the service's own work: parsing and validating the caller's body,
//!   rebuilding it for the upstream, one more HTTP hop on loopback, checking the answer
//!   against the contract's types, writing it back.
//! * **direct** sends the exact body the service forwards (captured from the fake after a
//!   warm-up call) to the upstream; **front** sends the caller's body to the service (the
//!   binary Cargo built, a child on `127.0.0.1:0`, with its default runtime).
//! * At 1 and 16 callers, in alternating rounds: p50 and p90 latency, requests per second,
//!   and the added p50/p90 (front − direct); for the front, its **CPU per request** (utime +
//!   stime of the child over its phases, warm-ups included, divided by the requests it
//!   answered; each request is 3 answers).
//!
//! The request: 3 questions (a 4-option choice, a noul, a 3-level score) about a short
//! ticket. Prints a markdown table; nothing is asserted.
//!
//! `cargo bench --bench native_forward`. Knobs: `NATIVE_SECS` (measured seconds per path,
//! level and round, default 2), `NATIVE_ROUNDS` (default 3), `NATIVE_WARMUP_SECS` (default
//! 0.3).

// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_server.rs"]
mod fake_server;
// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/hermetic/setup/fake_native.rs"]
mod fake_native;
#[path = "support/mod.rs"]
mod support;

use std::time::Duration;

use serde_json::{json, Value};

use fake_native::{FakeNative, Flavor};
use support::{
    alternating_rounds, cpu_time, drive, env_secs, load_client, runtime, serve_command,
    start_service, Phase,
};

/// Caller levels measured.
const LEVELS: [usize; 2] = [1, 16];

fn body() -> Value {
    json!({
        "state": "Invoice 1042 was charged twice to my card; I want the second charge back.",
        "questions": {
            "team": {"type": "choice", "instructions": "Which team handles it?", "criteria": {"billing": "payments", "bug": null, "sales": null, "other": null}},
            "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
            "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["Routine", "Soon", "Now"]}
        }
    })
}

fn main() {
    let secs = env_secs("NATIVE_SECS", 2.0);
    let warmup = env_secs("NATIVE_WARMUP_SECS", 0.3);
    let rounds: u32 = std::env::var("NATIVE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let upstream_runtime = runtime("native-upstream");
    let fake = upstream_runtime.block_on(FakeNative::start(Flavor::TypeSafe));
    let url = fake.base_url();
    let (service, addr) = start_service(
        serve_command(&[
            "--backend",
            "systemone",
            "--backend-url",
            &url,
            "--model",
            "native",
        ]),
        |_, _| {},
    );
    let client_runtime = runtime("native-client");
    let client = load_client(64, Duration::from_secs(30));
    let caller_body = body().to_string();
    let front = client
        .post(format!("http://{addr}/v1/systemone"))
        .header("content-type", "application/json")
        .body(caller_body);
    let warm_up = front.try_clone().expect("plain");
    let warm = client_runtime.block_on(async move { warm_up.send().await });
    assert!(
        warm.is_ok_and(|r| r.status().is_success()),
        "the front answers"
    );
    let forwarded = fake.bodies().pop().expect("the front forwarded a body");
    let direct = client
        .post(format!("{url}/systemone"))
        .header("content-type", "application/json")
        .body(forwarded.to_string());
    let mut front_cpu = [Duration::ZERO; LEVELS.len()];
    let mut front_sent = [0usize; LEVELS.len()];
    let phases = alternating_rounds(2, &LEVELS, rounds, |path, callers| {
        let level = LEVELS.iter().position(|l| *l == callers).unwrap_or(0);
        let request = if path == 0 { &direct } else { &front };
        let before = cpu_time(service.pid());
        let request = request.try_clone().expect("plain");
        let phase = client_runtime.block_on(drive(request, callers, warmup, secs));
        if path == 1 {
            front_cpu[level] += cpu_time(service.pid()).saturating_sub(before);
            front_sent[level] += phase.all_requests;
        }
        phase.report_errors(if path == 0 { "direct" } else { "front" });
        phase
    });
    print_table(&phases, &front_cpu, &front_sent);
    drop(service);
}

/// One row per path and level, the front's added latency and CPU beside it.
fn print_table(phases: &[Vec<Phase>], cpu: &[Duration], sent: &[usize]) {
    println!(
        "## `--backend systemone` over a direct call to the same native upstream ({} CPUs; zero-latency fake upstream)\n",
        support::cpus()
    );
    println!("| path | callers | p50 ms | p90 ms | requests/s | added p50 ms | added p90 ms | service CPU ms / request (3 answers) |");
    println!("|---|---|---|---|---|---|---|---|");
    for (l, callers) in LEVELS.iter().enumerate() {
        let (direct, front) = (&phases[0][l], &phases[1][l]);
        println!(
            "| direct | {callers} | {:.3} | {:.3} | {:.0} | – | – | – |",
            direct.percentile_ms(50.0),
            direct.percentile_ms(90.0),
            direct.rate()
        );
        let cpu_ms = cpu[l].as_secs_f64() * 1e3 / sent[l].max(1) as f64;
        println!(
            "| front | {callers} | {:.3} | {:.3} | {:.0} | {} | {} | {cpu_ms:.3} |",
            front.percentile_ms(50.0),
            front.percentile_ms(90.0),
            front.rate(),
            front.added_ms(direct, 50.0),
            front.added_ms(direct, 90.0),
        );
    }
}
