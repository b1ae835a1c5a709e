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

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use fake_vllm::FakeVllm;
use systemone::backend::vllm::VllmBackend;
use systemone::backend::ReadRequest;
use systemone::config::Layout;
use systemone::lower::lower_choice;
use systemone::models::Model;
use systemone::prompt::plan;
use systemone::tokens::TokenTable;
use systemone::validate::{History, ValidRequest};

const MODEL: &str = "glm-5.3-flash";
const LEVELS: [usize; 2] = [1, 64];
/// Each level alternates direct and service rounds, so drift in the machine's state (other
/// work, frequency) hits both paths alike.
const ROUNDS: u32 = 3;
/// No single request may take longer than this; keeps every phase bounded.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Hard cap on requests per phase (a phase normally stops on time first).
const MAX_REQUESTS_PER_PHASE: usize = 2_000_000;

// Targets (printed, not asserted).
const TARGET_QPS: f64 = 5_000.0;
const TARGET_ADDED_P50_C1_MS: f64 = 1.0;
const TARGET_RSS_MB: f64 = 100.0;

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

impl ServiceGuard {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServiceGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes ANSI escape sequences (in case the child logs in colour).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The bound address in a `listening` line (`… listening address=127.0.0.1:PORT`, or JSON).
fn parse_listening(line: &str) -> Option<SocketAddr> {
    let line = strip_ansi(line);
    if !line.contains("listening") {
        return None;
    }
    line.split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '=' || c == '}')
        .find_map(|word| word.parse::<SocketAddr>().ok())
}

/// Starts the service against `backend_url`; returns the guard and its address.
fn start_service(backend_url: &str) -> (ServiceGuard, SocketAddr) {
    let rust_log = std::env::var("LOAD_SERVICE_RUST_LOG").unwrap_or_else(|_| {
        // `listening` is an info line of the binary (target `systemone`); the per-request
        // info lines live in `systemone::api` and stay off.
        "warn,systemone=info,systemone::api=warn,systemone::pipeline=warn".to_string()
    });
    let extra_args = std::env::var("LOAD_SERVICE_ARGS").unwrap_or_default();
    if !extra_args.is_empty() {
        eprintln!("extra service flags: {extra_args}");
    }
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
        .args(extra_args.split_whitespace())
        .env("RUST_LOG", rust_log)
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

/// A state of about 1,000 characters (the same as the hot-path bench).
fn state() -> Value {
    json!({
        "ticket": {
            "id": "T-2024-118734",
            "channel": "email",
            "customer": {"name": "Dana Whitfield", "plan": "business", "tenure_months": 27},
            "subject": "Invoice charged twice after upgrading our workspace",
            "body": "Hello, last Tuesday we upgraded our workspace from the team plan to the \
                     business plan. Since then our card was charged twice for the same month: \
                     once for the old plan and once for the new one, and the invoice page shows \
                     both as paid. Our finance team needs a corrected invoice before the end of \
                     the quarter, and we would like the duplicate charge refunded to the original \
                     card. We also noticed that two of our guests lost access to shared folders \
                     right after the upgrade, which may or may not be related. Could you look \
                     into both? Thanks, Dana.",
        },
        "history": [
            {"at": "2024-05-02T09:14:00Z", "event": "plan_upgraded", "from": "team", "to": "business"},
            {"at": "2024-05-02T09:15:12Z", "event": "payment_captured", "amount": "480.00"},
            {"at": "2024-05-02T09:15:40Z", "event": "payment_captured", "amount": "720.00"}
        ],
        "locale": "en-GB"
    })
}

fn criteria() -> Vec<(String, Value)> {
    vec![
        (
            "billing".into(),
            json!("Charges, invoices, refunds, payment methods"),
        ),
        (
            "access".into(),
            json!("Logins, permissions, shared folders, guests"),
        ),
        (
            "bug".into(),
            json!("Something in the product does not work as documented"),
        ),
        ("other".into(), Value::Null),
    ]
}

const INSTRUCTIONS: &str = "Which queue should this ticket go to?";

/// The caller's body: one choice question with four options.
fn service_body() -> Vec<u8> {
    let criteria: serde_json::Map<String, Value> = criteria().into_iter().collect();
    let body = json!({
        "state": state(),
        "questions": {
            "route": {"type": "choice", "instructions": INSTRUCTIONS, "criteria": criteria}
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
    let question = lower_choice("route".into(), json!(INSTRUCTIONS), criteria());
    let req = ValidRequest::reference(
        model.clone(),
        &state(),
        vec![question],
        None,
        Layout::Accuracy,
        1,
        vec![],
        History::None,
    )
    .expect("valid");
    let asks = plan(&req).expect("renders");
    let ids: Vec<u32> = model.table.labels[..4].iter().map(|l| l.id).collect();
    let read = ReadRequest {
        content: &asks[0][0].content,
        prefix: &model.table.prefix,
        allowed_ids: &ids,
        read_ids: &ids,
    };
    serde_json::to_vec(&backend.body(&read)).expect("serialises")
}

/// What one phase measured.
struct Phase {
    requests: usize,
    /// Every request sent, warm-up included (for CPU per request).
    all_requests: usize,
    errors: usize,
    elapsed: Duration,
    /// Sorted latencies of the successful requests.
    latencies: Vec<Duration>,
    first_error: Option<String>,
}

impl Phase {
    fn empty() -> Self {
        Phase {
            requests: 0,
            all_requests: 0,
            errors: 0,
            elapsed: Duration::ZERO,
            latencies: Vec::new(),
            first_error: None,
        }
    }
    /// Adds another round of the same path.
    fn merge(&mut self, other: Phase) {
        self.requests += other.requests;
        self.all_requests += other.all_requests;
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        self.latencies.sort_unstable();
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
    fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }
}

/// Sends `body` to `url` from `concurrency` loops for `duration` (after `warmup`).
async fn drive(
    client: &reqwest::Client,
    url: &str,
    body: &[u8],
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> Phase {
    let body = bytes::Bytes::copy_from_slice(body);
    let started = Instant::now();
    let measure_from = started + warmup;
    let stop_at = measure_from + duration;
    let budget = Arc::new(AtomicUsize::new(MAX_REQUESTS_PER_PHASE));
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let client = client.clone();
        let url = url.to_string();
        let body = body.clone();
        let budget = budget.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(1 << 14);
            let mut errors = 0usize;
            let mut sent_all = 0usize;
            let mut first_error = None;
            loop {
                let now = Instant::now();
                if now >= stop_at {
                    break;
                }
                if now >= measure_from && budget.fetch_sub(1, Ordering::Relaxed) == 0 {
                    break;
                }
                let sent = Instant::now();
                let result = async {
                    let response = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await?;
                    let status = response.status();
                    let text = response.bytes().await?;
                    Ok::<_, reqwest::Error>((status, text))
                }
                .await;
                let took = sent.elapsed();
                sent_all += 1;
                if sent < measure_from {
                    continue;
                }
                match result {
                    Ok((status, _)) if status.is_success() => latencies.push(took),
                    Ok((status, text)) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| {
                            format!("{status}: {}", String::from_utf8_lossy(&text))
                        });
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (latencies, errors, sent_all, first_error)
        }));
    }
    let mut phase = Phase::empty();
    for task in tasks {
        let (latencies, errors, sent_all, first_error) = task.await.expect("load task");
        phase.latencies.extend(latencies);
        phase.errors += errors;
        phase.all_requests += sent_all;
        if phase.first_error.is_none() {
            phase.first_error = first_error;
        }
    }
    // Requests still in flight at the stop time finish late; count the real span.
    phase.elapsed = measure_from.elapsed();
    phase.latencies.sort_unstable();
    phase.requests = phase.latencies.len();
    phase
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
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

    let fake_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fake-vllm")
        .enable_all()
        .build()
        .expect("fake runtime");
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

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("load-client")
        .enable_all()
        .build()
        .expect("client runtime");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("client");

    let service_url = format!("http://{addr}/v1/systemone");
    let direct_url = format!("{}/chat/completions", fake.base_url());
    let service_body = service_body();
    let direct_body = direct_body(&fake.base_url());

    // Sanity: the service answers, and sends upstream exactly the body the direct path uses.
    let (rss_idle, _) = memory(pid);
    client_rt.block_on(async {
        fake.state.chat_bodies.lock().expect("lock").clear();
        let response = client
            .post(&service_url)
            .header("content-type", "application/json")
            .body(service_body.clone())
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
        let mut direct = Phase::empty();
        let mut through = Phase::empty();
        let mut cpu_used = Duration::ZERO;
        for _ in 0..ROUNDS {
            direct.merge(client_rt.block_on(drive(
                &client,
                &direct_url,
                &direct_body,
                concurrency,
                warmup,
                round,
            )));
            let cpu_before = cpu_time(pid);
            through.merge(client_rt.block_on(drive(
                &client,
                &service_url,
                &service_body,
                concurrency,
                warmup,
                round,
            )));
            cpu_used += cpu_time(pid).saturating_sub(cpu_before);
        }
        let (rss_after, hwm) = memory(pid);
        // The CPU time covers the warm-up too; so does `all_requests`.
        let cpu_per_q = cpu_used / u32::try_from(through.all_requests.max(1)).unwrap_or(u32::MAX);
        for (name, phase) in [("direct", &direct), ("service", &through)] {
            if let Some(e) = &phase.first_error {
                eprintln!(
                    "c={concurrency} {name}: {} errors; first: {e}",
                    phase.errors
                );
            }
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

    let mark = |ok: bool| if ok { "ok" } else { "MISS" };
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
        let (p50, p99) = (r.through.percentile(50.0), r.through.percentile(99.0));
        let (d50, d99) = (r.direct.percentile(50.0), r.direct.percentile(99.0));
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
            r.through.requests,
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
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    drop(client_rt);
    drop(fake_rt);
}
