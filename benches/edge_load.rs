//! What idle and slow connections do to ordinary callers: the real `systemone` binary (the
//! edge's default settings) in front of the fake vLLM, under a normal load of 16 callers
//! (1 question × 4 options, keep-alive), measured in alternating rounds without and with
//! an attack of 2,000 idle keep-alive connections (each sent one `GET /healthz`, then
//! nothing) plus 200 slow ones: 100 sending a request head at 1 byte a second (slowloris)
//! and 100 sending a body at 1 byte a second. Attack connections that the edge closes are
//! reopened at once, so the pressure holds for the whole round.
//!
//! The table gives, per condition, the callers' requests/s, p50/p99/max latency and errors;
//! after it, what the edge did to the attack (`systemone_connections_closed_total` by rule,
//! 408s to slow bodies) and the service's open connections during the last attack round.
//!
//! `cargo bench --bench edge_load`
//! Knobs (environment): `EDGE_LOAD_SECS` (measured seconds per condition, default 30, split
//! over 3 rounds), `EDGE_LOAD_HEADER_TIMEOUT_SECS` / `EDGE_LOAD_BODY_TIMEOUT_SECS` (the
//! service's `--header-read-timeout-secs` / `--body-read-timeout-secs`, default 10 / 30:
//! the shipped defaults).

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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use fake_vllm::FakeVllm;
use support::{drive, env_secs, Phase};

const ROUNDS: u32 = 3;
const CALLERS: usize = 16;
const IDLE: usize = 2_000;
const SLOW_HEADS: usize = 100;
const SLOW_BODIES: usize = 100;

/// What the attack did, counted by its own connections.
#[derive(Default)]
struct Attack {
    stop: AtomicBool,
    /// Idle connections that failed to open or were closed by the service.
    idle_lost: AtomicUsize,
}

/// One idle keep-alive connection: a `GET /healthz`, its answer, then silence until the
/// attack stops (or the service closes it).
async fn idle(addr: SocketAddr, attack: Arc<Attack>) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        attack.idle_lost.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let _ = stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    let mut buf = [0u8; 1024];
    let _ = stream.read(&mut buf).await;
    while !attack.stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                attack.idle_lost.fetch_add(1, Ordering::Relaxed);
                return;
            }
            _ => {}
        }
    }
}

/// A slow connection, reopened whenever the service cuts it: a head (or, with `body`, a
/// head and then a body) at one byte a second.
async fn slow(addr: SocketAddr, body: bool, attack: Arc<Attack>) {
    let head = if body {
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    } else {
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    };
    while !attack.stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut sent_head = !body;
        if body {
            sent_head = stream.write_all(head.as_bytes()).await.is_ok();
        }
        let bytes: &[u8] = if body { b"{" } else { head.as_bytes() };
        let mut i = 0;
        while sent_head && !attack.stop.load(Ordering::Relaxed) {
            if stream
                .write_all(&bytes[i % bytes.len()..][..1])
                .await
                .is_err()
            {
                break;
            }
            i += 1;
            // A closed connection shows as a readable end (or the service's 408).
            let mut buf = [0u8; 512];
            match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
                Ok(_) => break,
                Err(_) => continue,
            }
        }
    }
}

/// Starts the attack's connections; returns their tasks.
async fn launch(addr: SocketAddr, attack: &Arc<Attack>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::with_capacity(IDLE + SLOW_HEADS + SLOW_BODIES);
    for _ in 0..IDLE {
        tasks.push(tokio::spawn(idle(addr, attack.clone())));
    }
    for i in 0..SLOW_HEADS + SLOW_BODIES {
        tasks.push(tokio::spawn(slow(addr, i >= SLOW_HEADS, attack.clone())));
    }
    tasks
}

fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn row(name: &str, phase: &Phase) -> String {
    format!(
        "| {name} | {:.0} | {:.3} | {:.3} | {:.3} | {} |",
        phase.rate(),
        phase.percentile_ms(50.0),
        phase.percentile_ms(99.0),
        phase.percentile_ms(100.0),
        phase.errors
    )
}

fn main() {
    let round = env_secs("EDGE_LOAD_SECS", 30.0) / ROUNDS;
    let header = env_secs("EDGE_LOAD_HEADER_TIMEOUT_SECS", 10.0)
        .as_secs_f64()
        .to_string();
    let body_timeout = env_secs("EDGE_LOAD_BODY_TIMEOUT_SECS", 30.0)
        .as_secs_f64()
        .to_string();

    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);
    let (_service, addr) = support::start_on_fake(
        support::built_binary(),
        &fake.base_url(),
        &[
            "--header-read-timeout-secs",
            &header,
            "--body-read-timeout-secs",
            &body_timeout,
        ],
    );

    let client_rt = support::runtime("load-client");
    let client = support::load_client(CALLERS, Duration::from_secs(30));
    let url = format!("http://{addr}/v1/systemone");
    let request = client
        .post(&url)
        .header("content-type", "application/json")
        .body(support::route_body());

    let mut without = Phase::default();
    let mut with = Phase::default();
    let mut open_during_attack = 0.0;
    let attack_totals = Arc::new(Attack::default());
    client_rt.block_on(async {
        for r in 0..ROUNDS {
            for attacked in [r % 2 == 1, r % 2 == 0] {
                let measure = || {
                    let request = request.try_clone().expect("plain");
                    drive(request, CALLERS, Duration::from_millis(250), round)
                };
                if !attacked {
                    without.merge(measure().await);
                    continue;
                }
                let attack = Arc::new(Attack::default());
                let tasks = launch(addr, &attack).await;
                // Let the idle connections be made before measuring.
                tokio::time::sleep(Duration::from_secs(2)).await;
                with.merge(measure().await);
                let text = reqwest::get(format!("http://{addr}/metrics"))
                    .await
                    .expect("metrics")
                    .text()
                    .await
                    .expect("text");
                open_during_attack = metric(&text, "systemone_open_connections");
                attack.stop.store(true, Ordering::Relaxed);
                for task in tasks {
                    let _ = task.await;
                }
                attack_totals
                    .idle_lost
                    .fetch_add(attack.idle_lost.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
    });
    let text = client_rt.block_on(async {
        reqwest::get(format!("http://{addr}/metrics"))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    });
    println!(
        "\n{CALLERS} callers, 1 question x 4 options, {ROUNDS} alternating rounds of {:.1} s; attack: {IDLE} idle keep-alive + {SLOW_HEADS} slowloris heads + {SLOW_BODIES} slow bodies (1 byte/s); --header-read-timeout-secs {header}, --body-read-timeout-secs {body_timeout}, other edge settings default\n",
        round.as_secs_f64()
    );
    println!("| condition | req/s | p50 ms | p99 ms | max ms | errors |");
    println!("|---|---|---|---|---|---|");
    println!("{}", row("no attack", &without));
    println!("{}", row("under attack", &with));
    println!(
        "\nopen connections at the end of the last attack round: {open_during_attack}; idle attack connections closed by the service or refused: {}",
        attack_totals.idle_lost.load(Ordering::Relaxed)
    );
    for rule in ["header_timeout", "idle_timeout", "connection_cap"] {
        println!(
            "systemone_connections_closed_total{{rule=\"{rule}\"}} {}",
            metric(
                &text,
                &format!("systemone_connections_closed_total{{rule=\"{rule}\"}}")
            )
        );
    }
    println!(
        "408 system_one_request_timeout answers (slow bodies): {}",
        metric(
            &text,
            "systemone_requests_total{code=\"system_one_request_timeout\",route=\"/v1/systemone\",status=\"408\"}"
        )
    );
    without.report_errors("no attack");
    with.report_errors("under attack");
}
