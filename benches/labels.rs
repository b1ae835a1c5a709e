//! Multi-token option labels against a real llama.cpp backend (Gemma 3 270M): latency and
//! reads per option count, and the trie's wave schedule against level by level.
//!
//! Needs `SYSTEMONE_LLAMA_URL` (a `llama-server` base URL ending in `/v1`, e.g. from
//! `scripts/start-llama.sh 0`). Prints two markdown tables on stdout, then the raw numbers;
//! progress goes to stderr. Nothing is asserted.
//!
//! Gemma 3's tokenizer splits digits, so only `0`…`9` are single-token labels: a question of
//! up to 10 options is one masked read; 11–100 options use the numerals `00`…`99` (a trie of
//! 1 + ⌈n/10⌉ nodes), 101–255 the numerals `000`…`254` (1 + ⌈n/100⌉ + ⌈n/10⌉ nodes). Each
//! node is one upstream read of the whole prompt, prefilled with `answer=` plus the digits
//! so far; the service sends the root's read first and alone, then every other node at once
//! (under its in-flight cap, 16 by default).
//!
//! 1. **Option counts.** One choice question with n options, n in `BENCH_LABEL_NS` (default
//!    4, 10, 11, 26, 50, 100, 255), labels `item 0`…, no descriptions, about a state of ~40
//!    words that is new on every call (a per-run nonce and a call number in its first
//!    sentence). Through the service, round by round (the order of n flips every round):
//!    a call on a new state, then the same request again at once. Round 0 is the first time
//!    the service and llama-server see each question: **cold** (the whole prompt is
//!    evaluated). Rounds 1…`BENCH_LABEL_ROUNDS` (default 3) are **fresh** (a new state: the
//!    prompt head, preamble plus the question object that the `accuracy` layout puts before
//!    the state, may be served from llama-server's prompt cache, the state and the
//!    question's second copy after it are evaluated). The repeat of every call is
//!    **cached** (the same prompt again: only the prefill differs between reads). The
//!    table gives medians (nearest rank) and the service's `usage`: `upstream_requests`
//!    and the prompt tokens the backend reported over all reads (`input_tokens`,
//!    `cached_tokens`). The instructions name n, so different sizes share no prompt head
//!    beyond the preamble. Before round 0 one 3-option call warms the service (its first
//!    request waits for the live token-table check: one `/tokenize` per label).
//!    `BENCH_LABEL_SCHEME=letters` runs the service (and the planning below) with
//!    `--label-scheme letters`: 11–52 options are then one read of the letters.
//! 2. **Wave vs level by level** (n in `BENCH_WAVE_NS`, default 100 and 255), emulated
//!    without the service: the request is validated and planned by the library
//!    (`request::validate` → `request::prompt::plan` → `rendered()[0].reads.nodes` →
//!    `LlamaCppBackend::body`, the exact bodies the service sends, as
//!    `tests/live/llamacpp_labels.rs` builds them) and sent straight to llama-server, each
//!    sample on a new state: **wave** is the service's schedule (root alone, then all other
//!    nodes at once, at most 16 in flight); **level** sends the root, then every depth-1
//!    node at once, then every depth-2 node at once. With width-2 numerals (n ≤ 100) the
//!    two schedules are the same (root, then its children), so that row is an A/A check of
//!    the noise; they differ only for width 3. `BENCH_WAVE_MODES` (default `wave,level`) may
//!    add `all` (every node at once, the root included). `BENCH_WAVE_SAMPLES` samples per
//!    mode (default 3), the mode order flipping every sample. Not emulated: the service's
//!    fallback re-read when an option id is outside the raw top-1000 (the table counts the
//!    direct reads where that would have happened).
//!
//! **Reading the numbers.** Whether llama-server still holds a question's prompt head in
//! its prompt cache (`--cache-ram 512`) decides whether a new state's root read evaluates
//! about half of the prompt or all of it, and that swings a 255-option call between ~22 s
//! and ~48 s on 2 cores: far more than the schedule does. The per-sample lines on stderr
//! give each call's prompt and cached tokens (evaluated = prompt − cached): compare wave
//! and level at equal evaluated tokens, not by the medians alone, which mix both states
//! with 3 samples. Wall time beyond llama-server's own timings (`prompt_ms +
//! predicted_ms`) of up to ~10 s per call was also seen, in both modes and on repeats
//! right after a whole-prompt evaluation; its cause was not investigated.
//!
//! The service is `systemone serve --backend llamacpp --backend-url $SYSTEMONE_LLAMA_URL
//! --model gemma-3-270m --token-table gemma-3 --listen 127.0.0.1:0` with generous bounds
//! (`--read-timeout-secs 300 --request-timeout-secs 600`) and the default token limits,
//! without `--tokenizer`.
//!
//! Beside every fresh call, part 1 times **one single read** of a prompt of the same length:
//! the question's root read (the exact body the service sends, `answer=` prefill) on
//! another new state, straight to llama-server with `cache_prompt: false`, so the whole
//! prompt is evaluated whatever llama-server holds. It is what one prompt costs; the table
//! gives the fresh call's latency and evaluated tokens (`usage.evaluated_tokens`: the
//! backend's own `timings.prompt_n` summed over the reads) as ratios to it.
//!
//! A time budget (`BENCH_BUDGET_SECS`, default 600) trims the samples on a slow machine:
//! part 1 starts no fresh round after 60% of it (round 0 and one fresh round always run),
//! part 2 no new sample after 100% (one per mode always runs). The tables state the counts
//! that ran. About 5–10 minutes on 2 cores with nothing else running; run it on an
//! otherwise idle machine.
//!
//! `SYSTEMONE_LLAMA_URL=http://127.0.0.1:PORT/v1 cargo bench --bench labels`
//! (or `scripts/bench-labels.sh`, which starts and stops its own llama-server).

#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use futures::stream::{self, StreamExt};
use serde_json::{json, Map, Value};

use support::{nearest_rank, serve_command, ServiceGuard};

use systemone::backend::llamacpp::LlamaCppBackend;
use systemone::backend::ReadRequest;
use systemone::cli::{Cli, Command};
use systemone::request::prompt::plan;
use systemone::request::trie::ReadNode;
use systemone::request::validate;
use systemone::AppState;

const MODEL: &str = "gemma-3-270m";
const TOKEN_TABLE: &str = "gemma-3";
/// Bound on one service call or one direct read.
const CALL_TIMEOUT: Duration = Duration::from_secs(600);
/// The service's default in-flight cap (`--max-in-flight`), kept by the direct wave.
const IN_FLIGHT: usize = 16;
/// The flags the service runs with, after `--backend-url URL`: the default token limits
/// (issue 30: they count what the backend evaluates, exactly before refusing).
const SERVE_FLAGS: [&str; 8] = [
    "--model",
    MODEL,
    "--token-table",
    TOKEN_TABLE,
    "--read-timeout-secs",
    "300",
    "--request-timeout-secs",
    "600",
];

// ---------------------------------------------------------------------------------------
// Knobs and small helpers
// ---------------------------------------------------------------------------------------

fn env_usize(name: &str, default: usize, max: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=max).contains(n))
        .unwrap_or(default)
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn env_ns(name: &str, default: &str) -> Vec<usize> {
    env_list(name, default)
        .iter()
        .filter_map(|s| s.parse::<usize>().ok())
        .filter(|n| (2..=255).contains(n))
        .collect()
}

/// Median (nearest rank) of the values; NaN when empty.
fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    nearest_rank(&v, 50.0).unwrap_or(f64::NAN)
}

fn fmt_ms(values: &[f64]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
    format!("[{}]", items.join(", "))
}

/// "a" when every value is "a", else "a / b / …" (in first-seen order).
fn distinct<T: PartialEq + std::fmt::Display>(values: &[T]) -> String {
    let mut seen: Vec<&T> = Vec::new();
    for v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    if seen.is_empty() {
        return "–".into();
    }
    seen.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(" / ")
}

/// A state new on every call: a per-run nonce and a call number in the first sentence.
struct States {
    nonce: u64,
    next: u64,
}

impl States {
    fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64 ^ d.as_secs());
        States {
            nonce: (nanos ^ (u64::from(std::process::id()) << 20)) % 900_000 + 100_000,
            next: 0,
        }
    }

    /// ~40 words about one of the `n` items.
    fn fresh(&mut self, n: usize) -> String {
        self.next += 1;
        let k = self.next;
        format!(
            "Delivery note {}-{k:04}: this morning the warehouse clerk signed for one parcel. \
             The label on the box reads item {}, the packing slip agrees, and the customer \
             asked for it to be shelved near the loading door until Friday afternoon.",
            self.nonce,
            (k as usize * 7 + 3) % n
        )
    }
}

/// The service's request body: one choice question of `n` options about `state`. The
/// instructions name `n`, so questions of different sizes share no prompt head beyond the
/// preamble (a list of 26 options is otherwise a prefix of the list of 50).
fn request_body(state: &str, n: usize) -> Value {
    let criteria: Map<String, Value> = (0..n).map(|i| (format!("item {i}"), Value::Null)).collect();
    json!({
        "state": state,
        "questions": {"item": {
            "type": "choice",
            "instructions": format!("Which of these {n} items does the delivery note mention?"),
            "criteria": criteria
        }}
    })
}

/// The label scheme of a read plan: one read, or numerals of the deepest prefill + 1 digits.
fn scheme(n: usize, nodes: &[ReadNode], prefix: &str) -> String {
    match (nodes.len(), n) {
        (1, 0..=10) => return "single-token (0–9)".into(),
        (1, _) => return "letters (A–Z, a–z)".into(),
        _ => {}
    }
    let width = nodes
        .iter()
        .map(|n| n.prefill.len() - prefix.len())
        .max()
        .unwrap_or(0)
        + 1;
    format!("numerals, width {width}")
}

// ---------------------------------------------------------------------------------------
// The service child
// ---------------------------------------------------------------------------------------

fn start_service(backend_url: &str, label_scheme: &str) -> (ServiceGuard, SocketAddr) {
    let mut flags = vec!["--backend", "llamacpp", "--backend-url", backend_url];
    flags.extend_from_slice(&SERVE_FLAGS);
    flags.extend_from_slice(&["--label-scheme", label_scheme]);
    let command = serve_command(&flags);
    support::start_service(command, |line, listening| {
        if listening && !line.contains(" INFO ") {
            eprintln!("service: {line}");
        }
    })
}

/// The library's state for the same flags, for validating and planning requests here.
fn library_state(backend_url: &str, label_scheme: &str) -> AppState {
    let mut args = vec![
        "systemone",
        "serve",
        "--backend",
        "llamacpp",
        "--backend-url",
        backend_url,
    ];
    args.extend_from_slice(&SERVE_FLAGS);
    args.extend_from_slice(&["--label-scheme", label_scheme]);
    let config = match Cli::try_parse_from(args).expect("valid flags").command {
        Command::Serve(config) => *config,
        other => panic!("not serve: {other:?}"),
    };
    systemone::build_state(&config).expect("state builds")
}

// ---------------------------------------------------------------------------------------
// Calls
// ---------------------------------------------------------------------------------------

/// One service call: latency and its `usage`.
#[derive(Debug, Clone, Default)]
struct Call {
    ms: f64,
    ok: bool,
    upstream: u64,
    input: u64,
    cached: u64,
    evaluated: u64,
    error: Option<String>,
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> (f64, Result<Value, String>) {
    let started = Instant::now();
    let result = async {
        let response = client
            .post(url)
            .timeout(CALL_TIMEOUT)
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            ));
        }
        serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string())
    }
    .await;
    (started.elapsed().as_secs_f64() * 1e3, result)
}

async fn call_service(client: &reqwest::Client, url: &str, body: &Value) -> Call {
    let (ms, result) = post(client, url, body).await;
    match result {
        Ok(v) => {
            let u = &v["usage"];
            let n = |x: &Value| x.as_u64().unwrap_or(0);
            Call {
                ms,
                ok: true,
                upstream: n(&u["upstream_requests"]),
                input: n(&u["input_tokens"]),
                cached: n(&u["cached_tokens"]),
                evaluated: n(&u["evaluated_tokens"]),
                error: None,
            }
        }
        Err(e) => Call {
            ms,
            error: Some(e),
            ..Call::default()
        },
    }
}

/// One direct read of llama-server: what it reported.
#[derive(Debug, Clone, Default)]
struct DirectRead {
    /// Wall time of the read.
    ms: f64,
    prompt: u64,
    cached: u64,
    /// `timings.prompt_ms + predicted_ms`.
    server_ms: f64,
    /// Some id of the node's mask was not among the raw top-K (the service would re-read).
    missing: bool,
}

async fn direct_read(
    client: &reqwest::Client,
    chat_url: &str,
    body: &Value,
    ids: &[u32],
) -> Result<DirectRead, String> {
    let (ms, result) = post(client, chat_url, body).await;
    let v = result?;
    let n = |x: &Value| x.as_u64().unwrap_or(0);
    let top = &v["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
    let found: Vec<u64> = top
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["id"].as_u64()).collect())
        .unwrap_or_default();
    Ok(DirectRead {
        ms,
        prompt: n(&v["usage"]["prompt_tokens"]),
        cached: v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .or_else(|| v["timings"]["cache_n"].as_u64())
            .unwrap_or(0),
        server_ms: v["timings"]["prompt_ms"].as_f64().unwrap_or(0.0)
            + v["timings"]["predicted_ms"].as_f64().unwrap_or(0.0),
        missing: ids.iter().any(|id| !found.contains(&u64::from(*id))),
    })
}

/// Sends `bodies` (indices into `reads`) at once, at most [`IN_FLIGHT`] in flight.
async fn send_group(
    client: &reqwest::Client,
    chat_url: &str,
    reads: &[(Value, Vec<u32>)],
    group: &[usize],
) -> Result<Vec<DirectRead>, String> {
    let results: Vec<Result<DirectRead, String>> = stream::iter(group.iter().map(|&i| {
        let (body, ids) = &reads[i];
        direct_read(client, chat_url, body, ids)
    }))
    .buffer_unordered(IN_FLIGHT)
    .collect()
    .await;
    results.into_iter().collect()
}

/// One schedule of a question's node reads, sent straight to llama-server.
#[derive(Debug, Clone, Default)]
struct Schedule {
    ms: f64,
    ok: bool,
    /// Groups sent one after the other.
    groups: usize,
    prompt: u64,
    cached: u64,
    server_ms: f64,
    missing: usize,
    error: Option<String>,
}

async fn run_schedule(
    client: &reqwest::Client,
    chat_url: &str,
    reads: &[(Value, Vec<u32>)],
    groups: &[Vec<usize>],
) -> Schedule {
    let started = Instant::now();
    let mut out = Schedule {
        groups: groups.len(),
        ..Schedule::default()
    };
    for group in groups {
        match send_group(client, chat_url, reads, group).await {
            Ok(replies) => {
                for r in replies {
                    out.prompt += r.prompt;
                    out.cached += r.cached;
                    out.server_ms += r.server_ms;
                    out.missing += usize::from(r.missing);
                }
            }
            Err(e) => {
                out.error = Some(e);
                out.ms = started.elapsed().as_secs_f64() * 1e3;
                return out;
            }
        }
    }
    out.ms = started.elapsed().as_secs_f64() * 1e3;
    out.ok = true;
    out
}

/// The node groups of a schedule: `wave` (root, then the rest), `level` (by depth) or `all`.
fn groups(mode: &str, nodes: &[ReadNode], prefix: &str) -> Vec<Vec<usize>> {
    let all: Vec<usize> = (0..nodes.len()).collect();
    match mode {
        "all" => vec![all],
        "level" => {
            let depth = |i: usize| nodes[i].prefill.len() - prefix.len();
            let deepest = all.iter().map(|&i| depth(i)).max().unwrap_or(0);
            (0..=deepest)
                .map(|d| all.iter().copied().filter(|&i| depth(i) == d).collect())
                .filter(|g: &Vec<usize>| !g.is_empty())
                .collect()
        }
        _ => {
            if nodes.len() > 1 {
                vec![vec![0], all[1..].to_vec()]
            } else {
                vec![all]
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------

/// What part 2 measured for one n.
struct WaveRow {
    n: usize,
    scheme: String,
    per_mode: Vec<ModeRuns>,
}

/// One schedule's samples.
struct ModeRuns {
    mode: String,
    /// Sequential groups of the schedule.
    groups: usize,
    runs: Vec<Schedule>,
}

/// What part 1 measured for one n.
#[derive(Default)]
struct Row {
    n: usize,
    scheme: String,
    nodes: usize,
    cold: Vec<Call>,
    fresh: Vec<Call>,
    cached: Vec<Call>,
    /// One single root read of a same-length prompt beside each fresh call.
    single: Vec<DirectRead>,
}

fn main() {
    let Ok(llama_url) = std::env::var("SYSTEMONE_LLAMA_URL") else {
        eprintln!(
            "labels: set SYSTEMONE_LLAMA_URL to a llama-server base URL ending in /v1 \
             (e.g. from scripts/start-llama.sh 0), or run scripts/bench-labels.sh"
        );
        std::process::exit(2);
    };
    let llama_url = llama_url.trim_end_matches('/').to_string();
    let chat_url = format!("{llama_url}/chat/completions");
    let label_ns = env_ns("BENCH_LABEL_NS", "4,10,11,26,50,100,255");
    let wave_ns = env_ns("BENCH_WAVE_NS", "100,255");
    let rounds = env_usize("BENCH_LABEL_ROUNDS", 3, 100);
    let wave_samples = env_usize("BENCH_WAVE_SAMPLES", 3, 100);
    let modes = env_list("BENCH_WAVE_MODES", "wave,level");
    let label_scheme = std::env::var("BENCH_LABEL_SCHEME").unwrap_or_else(|_| "numerals".into());
    let budget = Duration::from_secs(env_usize("BENCH_BUDGET_SECS", 600, 86_400) as u64);
    let started = Instant::now();

    let rt = support::runtime("labels-bench");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(IN_FLIGHT)
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let state = {
        let _enter = rt.enter();
        library_state(&llama_url, &label_scheme)
    };
    let prefix = state
        .models
        .default_model()
        .table
        .get()
        .expect("a fixed table")
        .prefix
        .clone();
    let plan_of = |body: &Value| {
        let req =
            validate(body.clone(), &state.models.routes(), &state.limits).expect("a valid request");
        let nodes = req.rendered()[0].reads.nodes.clone();
        (req, nodes)
    };

    let (guard, addr) = start_service(&llama_url, &label_scheme);
    let service_url = format!("http://{addr}/v1/systemone");
    eprintln!(
        "labels: service at {addr} (pid {}), llama-server at {llama_url}",
        guard.pid()
    );
    let mut states = States::new();

    // Warm-up: the first request waits for the live token-table check. Three options, a
    // size not measured, so no measured question's head is cached by it.
    let warm = rt.block_on(call_service(
        &client,
        &service_url,
        &request_body(&states.fresh(3), 3),
    ));
    eprintln!(
        "labels: warm-up {:.0} ms ({})",
        warm.ms,
        warm.error.as_deref().unwrap_or("ok")
    );

    let direct = LlamaCppBackend::new(
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool"),
        &llama_url,
        MODEL.to_string(),
        None,
        true,
        None,
    );
    // The service's root read of `body`: one read of the whole prompt, evaluated in full.
    let uncached = LlamaCppBackend::new(
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool"),
        &llama_url,
        MODEL.to_string(),
        None,
        false,
        None,
    );
    let root_read = |body: &Value| {
        let (req, nodes) = plan_of(body);
        let asks = plan(&req);
        let read = ReadRequest {
            content: &asks[0][0].content,
            prefix: &nodes[0].prefill,
            allowed_ids: &nodes[0].ids,
            read_ids: &nodes[0].ids,
            chained: nodes.len() > 1,
            routing: None,
            cache_salt: None,
        };
        let json = serde_json::to_value(uncached.body(&read, false)).expect("serialises");
        (json, nodes[0].ids.clone())
    };

    // Part 1: option counts.
    let mut rows: Vec<Row> = label_ns
        .iter()
        .map(|&n| {
            let (_, nodes) = plan_of(&request_body("x", n));
            Row {
                n,
                scheme: scheme(n, &nodes, &prefix),
                nodes: nodes.len(),
                ..Row::default()
            }
        })
        .collect();
    let mut rounds_run = 0;
    for round in 0..=rounds {
        if round >= 2 && started.elapsed() > budget.mul_f64(0.6) {
            eprintln!("labels: budget: stopping part 1 after {rounds_run} rounds");
            break;
        }
        let order: Vec<usize> = if round % 2 == 0 {
            (0..rows.len()).collect()
        } else {
            (0..rows.len()).rev().collect()
        };
        for i in order {
            let n = rows[i].n;
            let body = request_body(&states.fresh(n), n);
            let first = rt.block_on(call_service(&client, &service_url, &body));
            let again = rt.block_on(call_service(&client, &service_url, &body));
            let what = if round == 0 { "cold" } else { "fresh" };
            for (label, c) in [(what, &first), ("cached", &again)] {
                match &c.error {
                    Some(e) => eprintln!("labels: n={n} {label}: FAILED after {:.0} ms: {e}", c.ms),
                    None => eprintln!(
                        "labels: n={n} round {round} {label}: {:.0} ms, {} upstream, {} input, {} cached, {} evaluated",
                        c.ms, c.upstream, c.input, c.cached, c.evaluated
                    ),
                }
            }
            if round > 0 {
                let (json, ids) = root_read(&request_body(&states.fresh(n), n));
                match rt.block_on(direct_read(&client, &chat_url, &json, &ids)) {
                    Ok(r) => {
                        eprintln!(
                            "labels: n={n} round {round} single read: {:.0} ms, {} prompt, {} cached",
                            r.ms, r.prompt, r.cached
                        );
                        rows[i].single.push(r);
                    }
                    Err(e) => eprintln!("labels: n={n} single read: FAILED: {e}"),
                }
            }
            let row = &mut rows[i];
            if round == 0 {
                row.cold.push(first);
            } else {
                row.fresh.push(first);
            }
            row.cached.push(again);
        }
        rounds_run = round + 1;
    }
    drop(guard);

    // Part 2: wave vs level by level, straight to llama-server.
    let mut wave: Vec<WaveRow> = Vec::new();
    for &n in &wave_ns {
        let (_, nodes) = plan_of(&request_body("x", n));
        let per_mode = modes
            .iter()
            .map(|m| ModeRuns {
                mode: m.clone(),
                groups: groups(m, &nodes, &prefix).len(),
                runs: Vec::new(),
            })
            .collect();
        wave.push(WaveRow {
            n,
            scheme: scheme(n, &nodes, &prefix),
            per_mode,
        });
    }
    let mut samples_run = 0;
    for sample in 0..wave_samples {
        if sample >= 1 && started.elapsed() > budget {
            eprintln!("labels: budget: stopping part 2 after {samples_run} samples");
            break;
        }
        for row in &mut wave {
            let n = row.n;
            let per_mode = &mut row.per_mode;
            let mode_order: Vec<usize> = if sample % 2 == 0 {
                (0..per_mode.len()).collect()
            } else {
                (0..per_mode.len()).rev().collect()
            };
            for m in mode_order {
                let body = request_body(&states.fresh(n), n);
                let (req, nodes) = plan_of(&body);
                let asks = plan(&req);
                let reads: Vec<(Value, Vec<u32>)> = nodes
                    .iter()
                    .map(|node| {
                        let read = ReadRequest {
                            content: &asks[0][0].content,
                            prefix: &node.prefill,
                            allowed_ids: &node.ids,
                            read_ids: &node.ids,
                            chained: true,
                            routing: None,
                            cache_salt: None,
                        };
                        let body =
                            serde_json::to_value(direct.body(&read, false)).expect("serialises");
                        (body, node.ids.clone())
                    })
                    .collect();
                let mode = per_mode[m].mode.clone();
                let g = groups(&mode, &nodes, &prefix);
                let s = rt.block_on(run_schedule(&client, &chat_url, &reads, &g));
                match &s.error {
                    Some(e) => eprintln!("labels: direct n={n} {mode}: FAILED: {e}"),
                    None => eprintln!(
                        "labels: direct n={n} {mode} sample {sample}: {:.0} ms in {} groups, {} prompt, {} cached, server {:.0} ms",
                        s.ms, s.groups, s.prompt, s.cached, s.server_ms
                    ),
                }
                per_mode[m].runs.push(s);
            }
        }
        samples_run = sample + 1;
    }

    // Tables.
    let ok_ms =
        |calls: &[Call]| -> Vec<f64> { calls.iter().filter(|c| c.ok).map(|c| c.ms).collect() };
    let ok_u = |calls: &[Call], f: fn(&Call) -> u64| -> Vec<u64> {
        calls.iter().filter(|c| c.ok).map(f).collect()
    };
    let med_u = |v: &[u64]| median(&v.iter().map(|x| *x as f64).collect::<Vec<_>>());
    println!(
        "## Multi-token labels on llama.cpp (Gemma 3 270M, {} CPUs): one choice question of n options\n",
        support::cpus()
    );
    println!(
        "Through the service; cold = round 0 (question never seen), fresh = new state \
         ({} rounds ran, p50), cached = the same request again at once (p50 over every \
         round). Tokens are summed over all reads of the call (p50).\n",
        rounds_run.saturating_sub(1)
    );
    println!(
        "| n | labels | trie nodes (reads per order) | upstream_requests | cold ms | fresh ms p50 | cached ms p50 | single read ms p50 | fresh / single | input tokens | cached tokens (fresh) | evaluated (fresh) | evaluated (repeat) | single read evaluated | evaluated fresh / single | failed |"
    );
    println!("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let all: Vec<Call> = r
            .cold
            .iter()
            .chain(&r.fresh)
            .chain(&r.cached)
            .cloned()
            .collect();
        let failed = all.iter().filter(|c| !c.ok).count();
        let single_ms = median(&r.single.iter().map(|s| s.ms).collect::<Vec<_>>());
        let single_eval = median(
            &r.single
                .iter()
                .map(|s| s.prompt.saturating_sub(s.cached) as f64)
                .collect::<Vec<_>>(),
        );
        let fresh_ms = median(&ok_ms(&r.fresh));
        let fresh_eval = med_u(&ok_u(&r.fresh, |c| c.evaluated));
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {} |",
            r.n,
            r.scheme,
            r.nodes,
            distinct(&ok_u(&all, |c| c.upstream)),
            median(&ok_ms(&r.cold)),
            fresh_ms,
            median(&ok_ms(&r.cached)),
            single_ms,
            fresh_ms / single_ms,
            med_u(&ok_u(&r.fresh, |c| c.input)),
            med_u(&ok_u(&r.fresh, |c| c.cached)),
            fresh_eval,
            med_u(&ok_u(&r.cached, |c| c.evaluated)),
            single_eval,
            fresh_eval / single_eval,
            failed
        );
    }
    if !wave.is_empty() {
        println!(
            "\n## Trie schedules, straight to llama-server (the service's bodies), new state per sample ({samples_run} samples per mode ran, p50)\n"
        );
        println!(
            "wave = root alone, then all other nodes at once (the service); level = root, then depth 1, then depth 2; all = every node at once. At most {IN_FLIGHT} in flight.\n"
        );
        println!(
            "| n | labels | mode | sequential groups | wall ms p50 | llama-server ms p50 (sum over reads) | prompt tokens | cached tokens | reads outside top-1000 | failed |"
        );
        println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for WaveRow {
            n,
            scheme,
            per_mode,
        } in &wave
        {
            for ModeRuns { mode, groups, runs } in per_mode {
                let ok: Vec<&Schedule> = runs.iter().filter(|s| s.ok).collect();
                let f = |g: fn(&Schedule) -> f64| -> f64 {
                    median(&ok.iter().map(|s| g(s)).collect::<Vec<_>>())
                };
                println!(
                    "| {n} | {scheme} | {mode} | {groups} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} |",
                    f(|s| s.ms),
                    f(|s| s.server_ms),
                    f(|s| s.prompt as f64),
                    f(|s| s.cached as f64),
                    ok.iter().map(|s| s.missing).sum::<usize>(),
                    runs.len() - ok.len()
                );
            }
        }
    }

    println!("\n## Raw numbers\n");
    for r in &rows {
        println!(
            "n={}: cold ms {} (input {:?}, cached {:?}), fresh ms {}, cached ms {}; fresh input {:?}, fresh cached {:?}, repeat cached {:?}, upstream {:?}; fresh evaluated {:?}; single read ms {}",
            r.n,
            fmt_ms(&ok_ms(&r.cold)),
            ok_u(&r.cold, |c| c.input),
            ok_u(&r.cold, |c| c.cached),
            fmt_ms(&ok_ms(&r.fresh)),
            fmt_ms(&ok_ms(&r.cached)),
            ok_u(&r.fresh, |c| c.input),
            ok_u(&r.fresh, |c| c.cached),
            ok_u(&r.cached, |c| c.cached),
            ok_u(&r.cold.iter().chain(&r.fresh).chain(&r.cached).cloned().collect::<Vec<_>>(), |c| c.upstream),
            ok_u(&r.fresh, |c| c.evaluated),
            fmt_ms(&r.single.iter().map(|s| s.ms).collect::<Vec<_>>()),
        );
        for c in r.cold.iter().chain(&r.fresh).chain(&r.cached) {
            if let Some(e) = &c.error {
                println!("  n={} failed: {e}", r.n);
            }
        }
    }
    for WaveRow { n, per_mode, .. } in &wave {
        for ModeRuns { mode, runs, .. } in per_mode {
            let ms: Vec<f64> = runs.iter().filter(|s| s.ok).map(|s| s.ms).collect();
            let server: Vec<f64> = runs.iter().filter(|s| s.ok).map(|s| s.server_ms).collect();
            println!(
                "direct n={n} {mode}: wall ms {}, llama-server ms {}",
                fmt_ms(&ms),
                fmt_ms(&server)
            );
            for s in runs {
                if let Some(e) = &s.error {
                    println!("  direct n={n} {mode} failed: {e}");
                }
            }
        }
    }
    println!(
        "\nwarm-up {:.0} ms; total {:.0} s",
        warm.ms,
        started.elapsed().as_secs_f64()
    );
}
