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

#[path = "../tests/common/fake_vllm.rs"]
mod fake_vllm;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

use fake_vllm::FakeVllm;

const MODEL: &str = "glm-5.3-flash";
const ROUNDS: u32 = 6;
const LEVELS: [usize; 2] = [1, 64];
/// No single request may take longer than this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The bearer the caller sends in every configuration.
fn bearer(n_keys: usize) -> String {
    format!("Bearer sk-gateway-bench-{:04}", n_keys.max(1))
}

fn env_secs(name: &str, default: f64) -> Duration {
    let secs = std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(default);
    Duration::from_secs_f64(secs)
}

/// The child service; killed and reaped when dropped (also while unwinding a panic).
struct ServiceGuard {
    child: Child,
}

impl Drop for ServiceGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bound address in a `listening` line (`… listening address=127.0.0.1:PORT`, or JSON).
fn parse_listening(line: &str) -> Option<SocketAddr> {
    if !line.contains("listening") {
        return None;
    }
    line.split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '=' || c == '}')
        .find_map(|word| word.parse::<SocketAddr>().ok())
}

/// Starts the service against `backend_url` with `extra` flags; returns it and its address.
fn start_service(backend_url: &str, extra: &[&str]) -> (ServiceGuard, SocketAddr) {
    let child = Command::new(env!("CARGO_BIN_EXE_systemone"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--backend",
            "vllm",
            "--backend-url",
            backend_url,
            "--token-table",
            "golden-fake",
            "--model",
            MODEL,
        ])
        .args(extra)
        .env_remove("SYSTEMONE_API_KEYS")
        .env_remove("SYSTEMONE_KEYS_FILE")
        // `listening` is an info line of the binary; the per-request lines stay off.
        .env(
            "RUST_LOG",
            "warn,systemone=info,systemone::api=warn,systemone::pipeline=warn",
        )
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the systemone binary starts");
    let mut guard = ServiceGuard { child };
    let stderr = guard.child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    // Reads the address, then keeps draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut early = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(sender) = &tx {
                if let Some(addr) = parse_listening(&line) {
                    let _ = sender.send(Ok(addr));
                    tx = None;
                } else {
                    early.push(line);
                }
            }
        }
        if let Some(sender) = tx {
            let _ = sender.send(Err(early.join("\n")));
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(addr)) => (guard, addr),
        Ok(Err(log)) => panic!("the service exited before listening; its stderr:\n{log}"),
        Err(_) => panic!("the service did not log `listening` within 30 s"),
    }
}

/// Writes a keys file with `n` keys (`k0001` …), each with generous limits.
fn keys_file(dir: &Path, n: usize) -> PathBuf {
    let mut text = String::with_capacity(n * 200);
    for i in 1..=n {
        let key = format!("sk-gateway-bench-{i:04}");
        let hex: String = systemone::auth::digest(&key)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        text.push_str(&format!(
            "[[key]]\nname = \"k{i:04}\"\nsha256 = \"{hex}\"\nrequests_per_minute = 1000000000\n\
             questions_per_minute = 1000000000\ndaily_questions = 9000000000000000000\n\n"
        ));
    }
    let path = dir.join(format!("keys-{n}.toml"));
    std::fs::write(&path, text).expect("write the keys file");
    path
}

/// The caller's body: one choice question with four options.
fn body() -> bytes::Bytes {
    let body = json!({
        "state": {"ticket": 118734, "text": "Our card was charged twice after the upgrade; please refund one charge."},
        "questions": {"route": {"type": "choice", "instructions": "Which queue should this ticket go to?",
            "criteria": {"billing": "Charges, invoices, refunds", "access": "Logins, permissions",
                         "bug": "Something does not work as documented", "other": null}}}
    });
    bytes::Bytes::from(serde_json::to_vec(&body).expect("serialises"))
}

/// What one configuration measured at one concurrency.
#[derive(Default)]
struct Phase {
    errors: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    first_error: Option<String>,
}

impl Phase {
    fn merge(&mut self, other: Phase) {
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        self.latencies.sort_unstable();
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }
    fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1].as_secs_f64() * 1e3
    }
}

/// Sends `body` with `bearer` from `concurrency` loops for `duration` after `warmup`.
async fn drive(
    client: &reqwest::Client,
    url: &str,
    bearer: &str,
    body: &bytes::Bytes,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> Phase {
    let measure_from = Instant::now() + warmup;
    let stop_at = measure_from + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url, bearer, body) = (
                client.clone(),
                url.to_string(),
                bearer.to_string(),
                body.clone(),
            );
            tokio::spawn(async move {
                let mut phase = Phase::default();
                while Instant::now() < stop_at {
                    let sent = Instant::now();
                    let result = async {
                        let response = client
                            .post(&url)
                            .header("content-type", "application/json")
                            .header("authorization", &bearer)
                            .body(body.clone())
                            .send()
                            .await?;
                        let status = response.status();
                        let text = response.bytes().await?;
                        Ok::<_, reqwest::Error>((status, text))
                    }
                    .await;
                    let took = sent.elapsed();
                    if sent < measure_from {
                        continue;
                    }
                    match result {
                        Ok((status, _)) if status.is_success() => phase.latencies.push(took),
                        Ok((status, text)) => {
                            phase.errors += 1;
                            phase.first_error.get_or_insert_with(|| {
                                format!("{status}: {}", String::from_utf8_lossy(&text))
                            });
                        }
                        Err(e) => {
                            phase.errors += 1;
                            phase.first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                phase
            })
        })
        .collect();
    let mut phase = Phase::default();
    for task in tasks {
        phase.merge(task.await.expect("load task"));
    }
    // Requests in flight at the stop time finish late; count the real span.
    phase.elapsed = measure_from.elapsed();
    phase
}

fn main() {
    // `cargo bench` passes `--bench` (and maybe a filter); nothing here takes arguments.
    let warmup = env_secs("GATEWAY_LOAD_WARMUP_SECS", 0.25);
    let round = env_secs("GATEWAY_LOAD_SECS", 6.0) / ROUNDS;

    let fake_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fake-vllm")
        .enable_all()
        .build()
        .expect("fake runtime");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);

    let dir = std::env::temp_dir().join(format!(
        "systemone-gateway-load-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let one = keys_file(&dir, 1);
    let thousand = keys_file(&dir, 1000);
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
        .map(|(_, _, flags)| start_service(&fake.base_url(), flags))
        .collect();

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("load-client")
        .enable_all()
        .build()
        .expect("client runtime");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .tcp_nodelay(true)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("client");
    let body = body();

    // Sanity: each configuration answers 200, and the keyed ones refuse a wrong key.
    client_rt.block_on(async {
        for ((name, n, _), (_, addr)) in configs.iter().zip(&services) {
            let url = format!("http://{addr}/v1/systemone");
            let send = |bearer: String| {
                client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("authorization", bearer)
                    .body(body.clone())
                    .send()
            };
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
    let mut phases: Vec<Vec<Phase>> = configs
        .iter()
        .map(|_| LEVELS.iter().map(|_| Phase::default()).collect())
        .collect();
    let started = Instant::now();
    for r in 0..ROUNDS as usize {
        for (l, &concurrency) in LEVELS.iter().enumerate() {
            // Each round starts with the next configuration, so no configuration always
            // runs first (right after the change of concurrency).
            for k in 0..configs.len() {
                let c = (k + r) % configs.len();
                let n = configs[c].1;
                let url = format!("http://{}/v1/systemone", services[c].1);
                let phase = client_rt.block_on(drive(
                    &client,
                    &url,
                    &bearer(n),
                    &body,
                    concurrency,
                    warmup,
                    round,
                ));
                phases[c][l].merge(phase);
            }
        }
    }
    let took = started.elapsed();
    drop(services);
    let _ = std::fs::remove_dir_all(&dir);

    for ((name, _, _), levels) in configs.iter().zip(&phases) {
        for (phase, concurrency) in levels.iter().zip(LEVELS) {
            if let Some(e) = &phase.first_error {
                eprintln!(
                    "{name} c={concurrency}: {} errors; first: {e}",
                    phase.errors
                );
            }
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
        let added = |mine: &Phase, base: &Phase, p: f64| {
            if std::ptr::eq(mine, base) {
                "–".to_string()
            } else {
                format!("{:+.3}", mine.percentile(p) - base.percentile(p))
            }
        };
        println!(
            "| {name} | {:.0} | {:.1}% | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {} | {} | {} |",
            c64.rate(),
            (c64.rate() / open[1].rate() - 1.0) * 100.0,
            c1.percentile(50.0),
            c1.percentile(99.0),
            c64.percentile(50.0),
            c64.percentile(99.0),
            added(c1, &open[0], 50.0),
            added(c1, &open[0], 99.0),
            added(c64, &open[1], 50.0),
            added(c64, &open[1], 99.0),
            c1.latencies.len() + c64.latencies.len(),
            c1.errors + c64.errors,
        );
    }
    println!();
    println!(
        "Added = (keyed percentile) − (open percentile) at the same concurrency: API-key hashing \
         and constant-time scan, the per-key request/question rate limits and daily cap. The \
         request metrics run in every configuration. The fake, the client and the four \
         services share this machine's {} CPUs; the whole run took {:.0} s.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        took.as_secs_f64()
    );

    drop(client_rt);
    drop(fake_rt);
}
