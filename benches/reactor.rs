//! Do large requests still hurt small ones? The old binary (CPU-heavy request steps on the
//! async workers) against the new one (those steps on tokio's blocking pool for bodies over
//! 2 KiB, `src/http/blocking.rs`), side by side under the same load.
//!
//! * Two services, both real `systemone serve` child processes on `127.0.0.1:0` with the
//!   same flags: the vLLM dialect in front of one fake vLLM server (in this process, on its
//!   own runtime, answering at once), the shipped Gemma 3 token table with the real Gemma 3
//!   `tokenizer.json` (`--tokenizer`, so every state is counted exactly), the live token
//!   check off (`--token-check-interval-secs 0`: the fake's toy tokenizer is not Gemma's),
//!   every limit at its default and the tokio runtime as in production (`Runtime::new()`: one
//!   worker per CPU). **old** is the binary at `REACTOR_OLD_BIN`; **new** is the binary Cargo
//!   built for this bench. Without `REACTOR_OLD_BIN` only new is measured, and the output
//!   says so.
//! * Two request streams. *Small*: one choice question with four options and a one-line
//!   state (~300 bytes, parsed and validated inline by both binaries). *Large*: the same
//!   question about a string state of varied English text of `REACTOR_LARGE_TOKENS` Gemma 3
//!   tokens (default 32,000, ~130 KB; the default state limit is 32,768), counted in this
//!   process with the same tokenizer before the run. Every large body is checked to answer
//!   200 on both services before anything is measured.
//! * Three phases per binary: **small alone** (the small stream at concurrency
//!   `REACTOR_SMALL_CONCURRENCY`, default 16); **small + large** (the same small stream while
//!   `REACTOR_LARGE_CONCURRENCY` clients, default 2, send large requests back to back);
//!   **large alone** (the large clients only: the large requests' own latency). The phases
//!   run in rounds that alternate the binaries (old, new, new, old, …), each phase after a
//!   short warm-up, so drift in the machine's state hits both alike.
//!
//! How to read it: the claim holds when, for **new**, the small p99 in *small + large* stays
//! close to its *small alone* p99, while for **old** it grows by about the time one large
//! request's validation holds a worker (tens of milliseconds). Some growth remains even when
//! the claim holds: the machine's CPUs are shared by the client, the fake, the service's
//! workers and its blocking threads, so the large requests' CPU time still competes for the
//! cores; what the change removes is small requests queueing behind a whole large step on a
//! stalled worker. Small req/s drops in *small + large* for the same reason. Non-2xx
//! answers and transport errors are counted in the errors column, never dropped.
//!
//! `REACTOR_OLD_BIN=/work/wt-old/target/release/systemone cargo bench --bench reactor`
//!
//! Knobs (environment): `REACTOR_OLD_BIN` (the old binary; unset: new only),
//! `REACTOR_SECS` (measured seconds per binary and phase, default 8, split over 4 rounds),
//! `REACTOR_WARMUP_SECS` (per phase and round, default 0.3), `REACTOR_SMALL_CONCURRENCY`
//! (16), `REACTOR_LARGE_CONCURRENCY` (2), `REACTOR_LARGE_TOKENS` (32000),
//! `REACTOR_WORKER_THREADS` (passed to both services as `TOKIO_WORKER_THREADS`, which
//! `Runtime::new()` honours; unset: one worker per CPU). The tokenizer comes from
//! `SYSTEMONE_TOKENIZERS`, else from the directory `scripts/fetch-tokenizers.sh` prints
//! (it fetches once into `~/.cache/systemone`). The default run takes about 70 s.

// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_server.rs"]
mod fake_server;
// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_vllm.rs"]
mod fake_vllm;
// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/live/setup/tokenizers.rs"]
mod real_tokenizers;
#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use fake_vllm::FakeVllm;
use real_tokenizers::state_tokens;
use support::{drive, env_secs, ms, Phase, ServiceGuard};
use systemone::models::tokens::build::LoadedTokenizer;

const ROUNDS: u32 = 4;
/// No single request may take longer than this (a timeout counts as an error).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The children's `RUST_LOG`: `listening` stays on; the per-request info lines stay off in
/// both layouts (the new one logs them under `systemone::http`/`engine`, the old one under
/// `systemone::api`/`pipeline`), so neither binary pays for logging the other does not.
const SERVICE_RUST_LOG: &str = "warn,systemone=info,systemone::http=warn,systemone::engine=warn,\
                                systemone::api=warn,systemone::pipeline=warn";
const MODEL: &str = "glm-5.3-flash";
const INSTRUCTIONS: &str = "Which queue should this ticket go to?";

/// A count from the environment variable `name` (≥ 1), else `default`.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(default)
}

/// The Gemma 3 `tokenizer.json`: under `SYSTEMONE_TOKENIZERS` if set, else under the
/// directory `scripts/fetch-tokenizers.sh` prints (it fetches only when the cache is empty).
fn gemma_tokenizer() -> PathBuf {
    let dir = match std::env::var("SYSTEMONE_TOKENIZERS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch-tokenizers.sh");
            let out = Command::new("bash")
                .arg(&script)
                .output()
                .expect("scripts/fetch-tokenizers.sh runs");
            assert!(
                out.status.success(),
                "scripts/fetch-tokenizers.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    let path = dir.join("gemma3").join("tokenizer.json");
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

// ---------------------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------------------

/// The routing question, asked in both streams.
fn question() -> Value {
    json!({"route": {"type": "choice", "instructions": INSTRUCTIONS,
        "criteria": {"billing": "Charges, invoices, refunds", "access": "Logins, permissions",
                     "bug": "Something does not work as documented", "other": null}}})
}

/// The small body: one question, four options, a one-line state.
fn small_body() -> bytes::Bytes {
    let body = json!({
        "state": {"ticket": 118734, "text": "Our card was charged twice after the upgrade; please refund one charge."},
        "questions": question(),
    });
    bytes::Bytes::from(serde_json::to_vec(&body).expect("serialises"))
}

/// A small deterministic generator (xorshift64*), so the text is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next() % words.len() as u64) as usize]
    }
}

/// `n` varied sentences of support-ticket English, each ending in a space.
fn sentences(n: usize) -> Vec<String> {
    const WHO: &[&str] = &[
        "The customer",
        "Our finance team",
        "A colleague in the Berlin office",
        "The account owner",
        "One of our guests",
        "The new administrator",
        "Somebody on the night shift",
        "Our auditor",
        "The support engineer",
        "A long-standing client",
    ];
    const DID: &[&str] = &[
        "noticed that",
        "reported that",
        "complained that",
        "asked why",
        "could not understand why",
        "wrote again to say that",
        "confirmed on the phone that",
        "was surprised that",
    ];
    const WHAT: &[&str] = &[
        "the invoice for March listed the same seat twice",
        "the card was charged before the trial had ended",
        "shared folders disappeared right after the upgrade",
        "the password reset email never arrived",
        "the export to spreadsheet stopped halfway through",
        "two-factor codes were rejected on the mobile app",
        "the refund had not reached the original card",
        "the dashboard showed yesterday's numbers all morning",
        "the quarterly report was missing every cancelled order",
        "guests kept their access after the project was archived",
        "the search box returned nothing for exact invoice numbers",
        "the billing address reverted to the old office",
    ];
    const THEN: &[&str] = &[
        "and would like a corrected statement before Friday.",
        "although nothing had changed on their side.",
        "which made the team miss an internal deadline.",
        "so they are considering moving to another provider.",
        "and attached screenshots of every step they took.",
        "but the issue went away after a second login.",
        "even though the status page said everything was fine.",
        "and they need an answer they can forward to their manager.",
        "while the same flow still works in the desktop client.",
        "so please treat this as urgent.",
    ];
    let mut rng = Rng(0x5EED_0F7E_A170_C5A7);
    (0..n)
        .map(|i| {
            let order = 100_000 + rng.next() % 900_000;
            format!(
                "{} {} {} (case {order}, note {i}) {} ",
                rng.pick(WHO),
                rng.pick(DID),
                rng.pick(WHAT),
                rng.pick(THEN)
            )
        })
        .collect()
}

/// The longest prefix of the sentences whose rendered state is at most `target` tokens:
/// the state text and its exact token count.
fn state_of_about(tk: &LoadedTokenizer, target: usize) -> (String, usize) {
    // ~30 tokens a sentence; room for twice the target.
    let all = sentences(target / 15 + 16);
    let text = |k: usize| all[..k].concat().trim_end().to_string();
    let (mut lo, mut hi) = (1usize, all.len());
    assert!(
        state_tokens(tk, &text(hi)) > target,
        "the sentences cover the target"
    );
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if state_tokens(tk, &text(mid)) <= target {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let state = text(lo);
    let tokens = state_tokens(tk, &state);
    (state, tokens)
}

/// The large body: the routing question about `state`.
fn large_body(state: &str) -> bytes::Bytes {
    let body = json!({"state": state, "questions": question()});
    bytes::Bytes::from(serde_json::to_vec(&body).expect("serialises"))
}

// ---------------------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------------------

/// One binary under test and its running service.
struct Service {
    name: &'static str,
    binary: PathBuf,
    addr: SocketAddr,
    /// Log lines after `listening` (each one is work the binary did while measured).
    late_lines: Arc<AtomicUsize>,
    _guard: ServiceGuard,
}

/// Starts `binary serve` on 127.0.0.1:0 with the flags both binaries share.
fn start(name: &'static str, binary: &Path, backend_url: &str, tokenizer: &Path) -> Service {
    let mut command = Command::new(binary);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--backend", "vllm", "--backend-url", backend_url])
        .args(["--token-table", "gemma-3", "--model", MODEL])
        .arg("--tokenizer")
        .arg(tokenizer)
        .args(["--token-check-interval-secs", "0"])
        .env("RUST_LOG", SERVICE_RUST_LOG)
        .env("NO_COLOR", "1")
        .env_remove("SYSTEMONE_API_KEYS")
        .env_remove("SYSTEMONE_KEYS_FILE")
        .env_remove("SYSTEMONE_CONFIG")
        .env_remove("TOKIO_WORKER_THREADS");
    support::own_ledger(&mut command);
    if let Ok(workers) = std::env::var("REACTOR_WORKER_THREADS") {
        command.env("TOKIO_WORKER_THREADS", workers);
    }
    let late_lines = Arc::new(AtomicUsize::new(0));
    let counter = late_lines.clone();
    let (guard, addr) = support::start_service(command, move |line, after_listening| {
        if after_listening && counter.fetch_add(1, Ordering::Relaxed) < 3 {
            eprintln!("[{name}] {line}");
        }
    });
    Service {
        name,
        binary: binary.to_path_buf(),
        addr,
        late_lines,
        _guard: guard,
    }
}

/// What one binary measured, merged over the rounds.
#[derive(Default)]
struct Measured {
    small_alone: Phase,
    mixed_small: Phase,
    mixed_large: Phase,
    large_alone: Phase,
}

/// Latency percentile `p` of `phase` in milliseconds, or `–` when nothing succeeded.
fn pct(phase: &Phase, p: f64) -> String {
    phase
        .percentile(p)
        .map_or_else(|| "–".to_string(), |d| format!("{:.2}", ms(d)))
}

fn main() {
    // `cargo bench` passes `--bench` (and maybe a filter); nothing here takes arguments.
    let warmup = env_secs("REACTOR_WARMUP_SECS", 0.3);
    let round = env_secs("REACTOR_SECS", 8.0) / ROUNDS;
    let small_c = env_count("REACTOR_SMALL_CONCURRENCY", 16);
    let large_c = env_count("REACTOR_LARGE_CONCURRENCY", 2);
    let large_tokens = env_count("REACTOR_LARGE_TOKENS", 32_000);
    let old_bin = std::env::var_os("REACTOR_OLD_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    if let Some(old) = &old_bin {
        assert!(
            old.is_file(),
            "REACTOR_OLD_BIN={} is not a file",
            old.display()
        );
    } else {
        eprintln!("REACTOR_OLD_BIN is not set: measuring the new binary only (no old rows)");
    }
    let new_bin = PathBuf::from(env!("CARGO_BIN_EXE_systemone"));

    // The large state, sized with the tokenizer the services count with.
    let tokenizer = gemma_tokenizer();
    let started = Instant::now();
    let tk = LoadedTokenizer::from_file(&tokenizer).expect("the Gemma 3 tokenizer loads");
    let (state, tokens) = state_of_about(&tk, large_tokens);
    drop(tk);
    let small = small_body();
    let large = large_body(&state);
    eprintln!(
        "tokenizer {}; large state {tokens} Gemma 3 tokens, {} chars, large body {} bytes; \
         small body {} bytes (sized in {:.1} s)",
        tokenizer.display(),
        state.chars().count(),
        large.len(),
        small.len(),
        started.elapsed().as_secs_f64()
    );

    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);

    let mut services = Vec::new();
    if let Some(old) = &old_bin {
        services.push(start("old", old, &fake.base_url(), &tokenizer));
    }
    services.push(start("new", &new_bin, &fake.base_url(), &tokenizer));
    for s in &services {
        eprintln!("{}: {} at {}", s.name, s.binary.display(), s.addr);
    }

    let client_rt = support::runtime("load-client");
    let client = support::load_client(small_c + large_c + 8, REQUEST_TIMEOUT);
    let post = |addr: SocketAddr, body: &bytes::Bytes| {
        client
            .post(format!("http://{addr}/v1/systemone"))
            .header("content-type", "application/json")
            .body(body.clone())
    };

    // Sanity: both bodies are answered 200 by every service (a large body over the state
    // limit would be a cheap 422 and measure nothing).
    client_rt.block_on(async {
        for s in &services {
            for (what, body) in [("small", &small), ("large", &large)] {
                let sent = Instant::now();
                let response = post(s.addr, body).send().await.expect("answers");
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                assert_eq!(
                    status.as_u16(),
                    200,
                    "{}: the {what} body is answered 200; got {status}: {text}",
                    s.name
                );
                let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
                eprintln!(
                    "{}: {what} answered 200 in {:.1} ms: {}",
                    s.name,
                    ms(sent.elapsed()),
                    answer.to_string().chars().take(160).collect::<String>()
                );
            }
        }
    });
    eprintln!(
        "{} binaries × 3 phases × {ROUNDS} rounds of {:.2} s warm-up + {:.2} s measured; \
         small c={small_c}, large c={large_c}",
        services.len(),
        warmup.as_secs_f64(),
        round.as_secs_f64()
    );

    let mut measured: Vec<Measured> = services.iter().map(|_| Measured::default()).collect();
    let run_started = Instant::now();
    for r in 0..ROUNDS as usize {
        // old, new, new, old, …: neither binary always goes first.
        let order: Vec<usize> = if r % 2 == 0 {
            (0..services.len()).collect()
        } else {
            (0..services.len()).rev().collect()
        };
        for i in order {
            let addr = services[i].addr;
            let m = &mut measured[i];
            let phase = client_rt.block_on(drive(post(addr, &small), small_c, warmup, round));
            m.small_alone.merge(phase);
            let (s, l) = client_rt.block_on(async {
                tokio::join!(
                    drive(post(addr, &small), small_c, warmup, round),
                    drive(post(addr, &large), large_c, warmup, round),
                )
            });
            m.mixed_small.merge(s);
            m.mixed_large.merge(l);
            let phase = client_rt.block_on(drive(post(addr, &large), large_c, warmup, round));
            m.large_alone.merge(phase);
        }
        eprintln!(
            "round {}/{ROUNDS} done ({:.0} s)",
            r + 1,
            run_started.elapsed().as_secs_f64()
        );
    }
    let took = started.elapsed();

    for (s, m) in services.iter().zip(&measured) {
        m.small_alone
            .report_errors(&format!("{} small alone", s.name));
        m.mixed_small
            .report_errors(&format!("{} small (with large)", s.name));
        m.mixed_large
            .report_errors(&format!("{} large (with small)", s.name));
        m.large_alone
            .report_errors(&format!("{} large alone", s.name));
        let late = s.late_lines.load(Ordering::Relaxed);
        if late > 0 {
            // The startup warning about open access is one; per-request lines would be more.
            eprintln!(
                "{}: {late} log lines after `listening` (the first 3 are shown above)",
                s.name
            );
        }
    }

    println!();
    println!(
        "### systemone reactor: small requests (1 question × 4 options, {} B, c={small_c}) beside large ones \
         ({tokens} Gemma 3 tokens, {} B, c={large_c}), fake vLLM with 0 latency, {:.1} s measured per binary and phase",
        small.len(),
        large.len(),
        round.as_secs_f64() * f64::from(ROUNDS)
    );
    if old_bin.is_none() {
        println!();
        println!("REACTOR_OLD_BIN was not set: no old rows, nothing to compare against.");
    }
    println!();
    println!(
        "| binary | phase | small p50 ms | small p99 ms | small req/s | large p50 ms | large count | errors small/large |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (s, m) in services.iter().zip(&measured) {
        println!(
            "| {} | small alone | {} | {} | {:.0} | – | – | {}/– |",
            s.name,
            pct(&m.small_alone, 50.0),
            pct(&m.small_alone, 99.0),
            m.small_alone.rate(),
            m.small_alone.errors,
        );
        println!(
            "| {} | small + large | {} | {} | {:.0} | {} | {} | {}/{} |",
            s.name,
            pct(&m.mixed_small, 50.0),
            pct(&m.mixed_small, 99.0),
            m.mixed_small.rate(),
            pct(&m.mixed_large, 50.0),
            m.mixed_large.requests(),
            m.mixed_small.errors,
            m.mixed_large.errors,
        );
        println!(
            "| {} | large alone | – | – | – | {} | {} | –/{} |",
            s.name,
            pct(&m.large_alone, 50.0),
            m.large_alone.requests(),
            m.large_alone.errors,
        );
    }
    println!();
    for (s, m) in services.iter().zip(&measured) {
        let ratio = |p: f64| match (m.mixed_small.percentile(p), m.small_alone.percentile(p)) {
            (Some(with), Some(alone)) => format!("{:.2}×", ms(with) / ms(alone)),
            _ => "–".to_string(),
        };
        println!(
            "{}: small p50 with large / alone {}, small p99 with large / alone {}.",
            s.name,
            ratio(50.0),
            ratio(99.0)
        );
    }
    println!();
    println!(
        "Small requests are parsed and validated inline by both binaries; the large ones' strict parse \
         and exact token count run on the async workers in old and on the blocking pool in new. \
         The fake, the client and the services share this machine's {} CPUs (each service: tokio's \
         default runtime{}); the whole run took {:.0} s.",
        support::cpus(),
        std::env::var("REACTOR_WORKER_THREADS")
            .map(|w| format!(", TOKIO_WORKER_THREADS={w}"))
            .unwrap_or_default(),
        took.as_secs_f64()
    );

    drop(services);
    drop(client_rt);
    drop(fake_rt);
}
