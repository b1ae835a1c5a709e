//! User-space instructions per answer: `systemone` binaries one after another under
//! callgrind, in front of one fake vLLM, each answering the same fixed number of requests
//! from one caller.
//!
//! Callgrind counts the instructions the service runs in user space, whatever else the
//! machine is doing, so a change of a few percent shows in one run where the CPU time of
//! `benches/load.rs` needs many alternating rounds. What it does not count: the kernel's
//! time (a ledger's fsync, the sockets' system calls), and what a cache miss or a lock
//! costs. So this bench says *what work grew*; the load bench says what it costs.
//!
//! Per binary, ledger and scenario, two children run under `valgrind --tool=callgrind`:
//! one answers `INSTR_WARMUP` requests, the other `INSTR_WARMUP + INSTR_REQUESTS`, one
//! after another; each waits until it is idle (a ledger writes after the answer) and is
//! stopped with SIGTERM, callgrind writing its counts as it exits. The difference of the
//! two totals is the measured requests' own instructions (start-up, warm-up and shutdown
//! cancel out); the row's figure is that ÷ questions answered. The dumps stay in
//! `INSTR_OUT` (default: a fresh temp dir, printed) for `callgrind_annotate`.
//!
//! `INSTR_BINS=base=PATH,new=PATH cargo bench --bench instructions`
//! Knobs (environment): `INSTR_BINS` (`name=path,…`; default `new`, the binary Cargo
//! built, after `base=$LOAD_BASE_BIN` when that is set), `INSTR_LEDGERS` (`off`, `sqlite`:
//! a fresh file per child; default `off`), `INSTR_SCENARIOS` (default `1x4,5x4`),
//! `INSTR_REQUESTS` (default 300), `INSTR_WARMUP` (default 30), `INSTR_OUT`,
//! `INSTR_VARIANTS` (as the load bench's `LOAD_VARIANTS`: `name=WORDS;…`, each binary run
//! once per variant with its `serve` flags or `NAME=value` environment variables; `{otlp}`
//! is the URL of an OTLP/HTTP sink that answers 200 and keeps nothing), e.g.
//! `INSTR_VARIANTS='off=;traced=--otlp-traces-endpoint {otlp} OTEL_TRACES_SAMPLER=always_on'`.

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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fake_vllm::FakeVllm;
use support::scenario::{Scenario, SCENARIOS};
use support::{cpu_time, fake_backend_flags, start_service, ServiceGuard, SERVICE_RUST_LOG};

/// Under callgrind a request takes ~50× longer: a generous bound on one.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What the environment asks for.
struct Knobs {
    /// Each binary once per variant: the row's name, the binary, the variant's words.
    bins: Vec<(String, PathBuf, String)>,
    ledgers: Vec<String>,
    scenarios: Vec<Scenario>,
    requests: usize,
    warmup: usize,
    out: PathBuf,
}

fn list(name: &str) -> Option<Vec<String>> {
    let v = std::env::var(name).ok()?;
    let items: Vec<String> = v
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    (!items.is_empty()).then_some(items)
}

fn count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn knobs() -> Knobs {
    let bins: Vec<(String, PathBuf)> = list("INSTR_BINS")
        .map(|l| {
            l.iter()
                .map(|b| {
                    let (name, path) = b.split_once('=').expect("INSTR_BINS: name=path,…");
                    (name.to_string(), PathBuf::from(path))
                })
                .collect()
        })
        .unwrap_or_else(|| {
            let base = std::env::var_os("LOAD_BASE_BIN").map(|p| ("base".into(), p.into()));
            let new = ("new".to_string(), support::built_binary().to_path_buf());
            base.into_iter().chain([new]).collect()
        });
    let bins = variants()
        .iter()
        .flat_map(|variant| {
            bins.iter().map(move |(name, path)| match variant {
                Some((v, words)) => (format!("{name}/{v}"), path.clone(), words.clone()),
                None => (name.clone(), path.clone(), String::new()),
            })
        })
        .collect();
    let scenarios = list("INSTR_SCENARIOS")
        .unwrap_or_else(|| vec!["1x4".into(), "5x4".into()])
        .iter()
        .filter_map(|n| SCENARIOS.into_iter().find(|s| s.name == n))
        .collect();
    let out = std::env::var_os("INSTR_OUT").map_or_else(
        || std::env::temp_dir().join(format!("systemone-instructions-{}", std::process::id())),
        PathBuf::from,
    );
    Knobs {
        bins,
        ledgers: list("INSTR_LEDGERS").unwrap_or_else(|| vec!["off".into()]),
        scenarios,
        requests: count("INSTR_REQUESTS", 300),
        warmup: count("INSTR_WARMUP", 30),
        out,
    }
}

/// `INSTR_VARIANTS`' `(name, words)` pairs; `[None]` when unset.
fn variants() -> Vec<Option<(String, String)>> {
    let text = std::env::var("INSTR_VARIANTS").unwrap_or_default();
    let variants: Vec<_> = text
        .split(';')
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            let (name, words) = v.split_once('=').unwrap_or((v, ""));
            Some((name.trim().to_string(), words.trim().to_string()))
        })
        .collect();
    if variants.is_empty() {
        vec![None]
    } else {
        variants
    }
}

/// Adds a variant's `words` to `command`: `NAME=value` ones as environment variables, the
/// rest as arguments, `{otlp}` replaced by the sink's URL.
fn add_words(command: &mut Command, words: &str, otlp: &str) {
    for word in words.split_whitespace().map(|w| w.replace("{otlp}", otlp)) {
        match word.split_once('=') {
            Some((name, value))
                if !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') =>
            {
                command.env(name, value)
            }
            _ => command.arg(word),
        };
    }
}

/// An OTLP/HTTP sink for `{otlp}`: answers 200 to every `POST /v1/traces`, keeps nothing.
async fn otlp_sink() -> String {
    let export = |_: axum::body::Bytes| std::future::ready(axum::http::StatusCode::OK);
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(export));
    format!("http://{}/v1/traces", fake_server::serve(app).await)
}

/// Where a child serves and what it runs with.
struct Child<'a> {
    binary: &'a Path,
    /// The variant's words ([`add_words`]).
    words: &'a str,
    backend_url: &'a str,
    otlp: &'a str,
}

/// `child` serving under callgrind, its counts written to `out_file` (and `out_file.N` for
/// each dump), with `ledger`.
fn start_under_callgrind(
    child: &Child<'_>,
    ledger: &str,
    out_file: &Path,
) -> (ServiceGuard, std::net::SocketAddr) {
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(format!("--log-file={}.log", out_file.display()))
        .arg(child.binary)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(fake_backend_flags(child.backend_url))
        .env("RUST_LOG", SERVICE_RUST_LOG)
        .env("NO_COLOR", "1");
    support::without_operator_env(&mut command);
    add_words(&mut command, child.words, child.otlp);
    let target = match ledger {
        "off" => "off".to_string(),
        "sqlite" => format!("sqlite:{}.sqlite", out_file.display()),
        other => panic!("INSTR_LEDGERS: `off` or `sqlite`, not `{other}`"),
    };
    command.env("SYSTEMONE_LEDGER", target);
    start_service(command, |_, _| {})
}

/// Sends `body` to `url` `n` times, one after another; every answer must be a success.
async fn send(client: &reqwest::Client, url: &str, body: &[u8], n: usize) {
    for _ in 0..n {
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await
            .expect("the service answers");
        let status = response.status();
        let text = response.bytes().await.expect("a whole body");
        assert!(
            status.is_success(),
            "{status}: {}",
            String::from_utf8_lossy(&text)
        );
    }
}

/// Waits until the child has used no CPU for 0.5 s (its ledger written, its tasks idle).
fn settle(pid: u32) {
    let mut last = cpu_time(pid);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(100));
        let now = cpu_time(pid);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
}

/// Stops the child with SIGTERM (callgrind writes its counts as it exits) and waits.
fn terminate(guard: &mut ServiceGuard) {
    let status = Command::new("kill")
        .args(["-TERM", &guard.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -TERM {}", guard.pid());
    let _ = guard.child.wait();
}

/// The instructions (`Ir`) in a callgrind dump: its `summary:` (or `totals:`) line.
fn instructions(dump: &Path) -> u64 {
    let text = std::fs::read_to_string(dump).expect("the dump is readable");
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("a summary line")
}

fn main() {
    let knobs = knobs();
    std::fs::create_dir_all(&knobs.out).expect("the out dir");
    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);
    let otlp = fake_rt.block_on(otlp_sink());
    let client_rt = support::runtime("instr-client");
    let client = support::load_client(4, REQUEST_TIMEOUT);
    eprintln!(
        "callgrind dumps in {}; per row {} warm-up + {} measured requests, one caller",
        knobs.out.display(),
        knobs.warmup,
        knobs.requests
    );
    // rows[ledger][scenario][binary]: instructions per answer.
    let mut rows = vec![vec![Vec::new(); knobs.scenarios.len()]; knobs.ledgers.len()];
    for (l, ledger) in knobs.ledgers.iter().enumerate() {
        for (name, binary, words) in &knobs.bins {
            let child = Child {
                binary,
                words,
                backend_url: &fake.base_url(),
                otlp: &otlp,
            };
            for (s, scenario) in knobs.scenarios.iter().enumerate() {
                let body = scenario.body();
                // Two children: warm-up only, and warm-up plus the measured requests; the
                // difference is the measured requests' own instructions.
                let mut totals = [0u64; 2];
                for (i, n) in [knobs.warmup, knobs.warmup + knobs.requests]
                    .into_iter()
                    .enumerate()
                {
                    let out_file = knobs.out.join(format!(
                        "{}-{ledger}-{}-{n}.out",
                        name.replace('/', "-"),
                        scenario.name
                    ));
                    let (mut guard, addr) = start_under_callgrind(&child, ledger, &out_file);
                    let url = format!("http://{addr}/v1/systemone");
                    client_rt.block_on(send(&client, &url, &body, n));
                    settle(guard.pid());
                    terminate(&mut guard);
                    totals[i] = instructions(&out_file);
                }
                let answers = (knobs.requests * scenario.questions) as f64;
                let per_answer = totals[1].saturating_sub(totals[0]) as f64 / answers;
                eprintln!(
                    "{name}/{ledger} {}: {per_answer:.0} instructions per answer",
                    scenario.name
                );
                rows[l][s].push(per_answer);
            }
        }
    }
    print_table(&knobs, &rows);
}

/// One row per ledger and scenario: each binary's instructions per answer, and each
/// binary's ratio to the first.
fn print_table(knobs: &Knobs, rows: &[Vec<Vec<f64>>]) {
    let names: Vec<&str> = knobs.bins.iter().map(|(n, ..)| n.as_str()).collect();
    let mut header = "| ledger | scenario |".to_string();
    for n in &names {
        header += &format!(" {n} instr/answer |");
    }
    for n in &names[1..] {
        header += &format!(" {n} ÷ {} |", names[0]);
    }
    println!(
        "\n{header}\n|---|---|{}",
        "---:|".repeat(2 * names.len() - 1)
    );
    for (l, ledger) in knobs.ledgers.iter().enumerate() {
        for (s, scenario) in knobs.scenarios.iter().enumerate() {
            let row = &rows[l][s];
            let mut line = format!("| {ledger} | {} |", scenario.label());
            for v in row {
                line += &format!(" {v:.0} |");
            }
            for v in &row[1..] {
                line += &format!(" {:.3} |", v / row[0]);
            }
            println!("{line}");
        }
    }
}
