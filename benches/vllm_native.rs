//! vLLM's own `POST /v1/systemone` against this service in front of the same vLLM (issue 26,
//! "Close the gap to vLLM's own endpoint", and issue 42, the `compact` layout): what each path
//! costs, and where vLLM's prompt tokens and requests go.
//!
//! Needs `SYSTEMONE_VLLM_URL`: the base URL (ending in `/v1`) of a vLLM 0.32 serving a
//! Qwen 3 family model, which is all its `/v1/systemone` reads (it answers 501 for Gemma 3;
//! on a model it refuses the bench measures the service alone and native's cells say why:
//! `SYSTEMONE_VLLM_MODEL=gemma-3-270m BENCH_TOKEN_TABLE=gemma-3` on `scripts/start-vllm.sh`'s
//! default):
//!
//! ```text
//! eval "$(SYSTEMONE_VLLM_ARGS="--block-size 32" SYSTEMONE_VLLM_SERVE=qwen3-random scripts/start-vllm.sh 0)"
//! SYSTEMONE_VLLM_URL=$VLLM_URL cargo bench --bench vllm_native
//! kill -- -$VLLM_PID
//! ```
//!
//! `qwen3-random` is a small Qwen 3 with random weights and the real Qwen 3 tokenizer
//! (`scripts/make-qwen3-random.py`): its answers are noise, its costs are a Qwen 3's.
//!
//! Four paths, on the same server, alternating (each round starts one path later):
//! * **native**: vLLM's `/v1/systemone` (body `{model, state, questions}`; one engine request
//!   per question, the state first in each user turn, labels A–Z / 0–9 / yes-no);
//! * **accuracy** / **cost** / **compact**: this service started in-process (as the tests do:
//!   `build_state` + `app` on 127.0.0.1:0) with `--backend vllm --upstream-model MODEL
//!   --token-table qwen-3` (the shipped table, equal to what `auto` builds; the live check
//!   is off so no `/tokenize` traffic runs beside the measurement), the request's `layout`
//!   set to `accuracy`, `cost` or `compact`.
//!
//! The request: the same 5 questions (2 nouls, 2 four-option choices, a 3-level score) about
//! a ~300-token support ticket (301 Qwen 3 tokens as text). Per path:
//! * **new state**: `BENCH_NEW_CALLS` sequential calls (default 8), each with a state no
//!   call has sent before (a per-run, per-call ticket number at its start): p50, p90;
//! * **same state**: one state per path sent once to seat it, then `BENCH_SAME_CALLS` more
//!   (default 6): p50;
//! * **4 callers**: `BENCH_CALLERS` (default 4) loops sending new states for
//!   `BENCH_LOAD_SECS` (default 15) per path and round, `BENCH_LOAD_ROUNDS` rounds (default
//!   2): answers (questions answered) per second;
//! * **26 and 50 options** (or the counts in `BENCH_WIDE_OPTIONS`, e.g. `26,50,100,255`):
//!   one choice question of that many options on a new state, `BENCH_WIDE_CALLS` calls
//!   (default 3); native refuses more than 26 (its status is recorded). Above ~60 options
//!   raise the service's token limits with `BENCH_SERVICE_ARGS`.
//!
//! Around every sequential call (and every load phase) vLLM's `/metrics` is read, and the
//! deltas of its own counters give the call's cost: `vllm:request_success_total` (engine
//! requests: the reads), `vllm:prompt_tokens_by_source_total{source="local_compute"}`
//! (prompt tokens computed) and `{source="local_cache_hit"}` (served from the prefix
//! cache, in whole blocks of 128 tokens on this CPU build), `vllm:iteration_tokens_total`'s
//! count (engine steps: reads scheduled in one step share its fixed cost) and the API-server
//! process's `process_cpu_seconds_total` (its Python work per call: HTTP, JSON, chat
//! templates, tokenizing, logprobs; less what one pair of `/metrics` scrapes costs, measured
//! first). The service's own `usage.upstream_requests` is checked against vLLM's request
//! count (a mismatch is printed). Before the measurement, each read's prompt of one call is
//! tokenized by vLLM (`/tokenize` of its exact messages) to show where the tokens go: per
//! read, the head all reads of a call share, and the head shared with another call.
//!
//! Prints markdown tables on stdout, then the raw calls; progress goes to stderr. The goals
//! of the issues (`cost`: answers/s ≥ 0.8× native's, new-state p50 ≤ 1.25× native's;
//! `compact`: prompt tokens computed per new-state call ≤ native's, answers/s ≥ 0.95×
//! native's, new-state p50 ≤ 1.1× native's, faster than native on a repeated state) are
//! printed beside the numbers, never asserted. About 2 minutes with the defaults on 2 cores
//! (plus the server's start).
//!
//! Other knobs: `SYSTEMONE_VLLM_MODEL` (served model name, default `qwen3-random`),
//! `BENCH_TOKEN_TABLE` (default `qwen-3`; `auto` builds it from vLLM's tokenizer first),
//! `BENCH_SERVICE_ARGS` (extra `serve` flags, split on whitespace).

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use serde_json::{json, Map, Value};

use support::{env_secs, load_client, nearest_rank};
use systemone::backend::vllm::VllmBackend;
use systemone::backend::ReadRequest;
use systemone::cli::{Cli, Command};
use systemone::request::prompt::plan;
use systemone::request::validate;
use systemone::AppState;

/// Bound on one call (a 50-option question is several reads on a busy machine).
const CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Goals of issue 26 for the `cost` layout against native (printed, not asserted).
const GOAL_RATE_RATIO: f64 = 0.8;
const GOAL_P50_RATIO: f64 = 1.25;
/// Goals of issue 42 for the `compact` layout against native (printed, not asserted).
const COMPACT_RATE_RATIO: f64 = 0.95;
const COMPACT_P50_RATIO: f64 = 1.1;

/// The ticket after its number: ~1,390 characters, 301 Qwen 3 tokens with the number.
const TICKET: &str = "from Dana Whitfield (business plan, 27 months): Last Tuesday we upgraded our workspace from the Team plan to the Business plan. Since then our card was charged twice for the same month: 480.00 for the old plan and 720.00 for the new one, and the invoice page shows both as paid for the same billing period. I expected the Team charge to be prorated or replaced, as your pricing page describes for upgrades in the middle of a cycle. Our finance team closes the quarter in nine days and needs a corrected invoice with our VAT number before then, and we would like the duplicate 480.00 refunded to the original card rather than kept as credit, because that card belongs to a cost centre that closes next month. Separately, right after the upgrade two external guests, auditors from a partner firm, lost access to the shared folders they had used for weeks: links now say the folder does not exist or that they lack permission. Their accounts still appear in the member list with the same role, internal members open the same folders without trouble, and a fresh invitation email never arrived. We signed out and in again, cleared caches, tried two browsers and the desktop app, and checked our single sign-on rules, which apply only to internal accounts. Please tell us which charge will be refunded and when, and whether the guest problem is known and what we should do meanwhile.";

/// The four paths, in table order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Native,
    Accuracy,
    Cost,
    Compact,
}

const PATHS: [Path; 4] = [Path::Native, Path::Accuracy, Path::Cost, Path::Compact];

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Native => "native",
            Path::Accuracy => "accuracy",
            Path::Cost => "cost",
            Path::Compact => "compact",
        }
    }
}

/// Where the paths are and how their bodies look.
struct Setup {
    client: reqwest::Client,
    /// vLLM's root (no `/v1`): `/metrics`, `/v1/systemone`.
    vllm_root: String,
    /// The service's `/v1/systemone`.
    service_url: String,
    model: String,
    /// A per-run prefix of every ticket number, so no run reuses another's cache.
    run: u64,
    /// The next ticket number.
    next: AtomicU64,
    /// API-server CPU seconds one pair of `/metrics` scrapes adds to a call's delta.
    scrape_cpu: f64,
}

impl Setup {
    /// A state no call has sent before.
    fn fresh_state(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("Ticket {}-{n:05} {TICKET}", self.run)
    }

    fn url(&self, path: Path) -> String {
        match path {
            Path::Native => format!("{}/v1/systemone", self.vllm_root),
            _ => self.service_url.clone(),
        }
    }

    fn body(&self, path: Path, state: &str, questions: &Value) -> Vec<u8> {
        let mut body = json!({"model": self.model, "state": state, "questions": questions});
        if path != Path::Native {
            body["layout"] = json!(path.name());
        }
        serde_json::to_vec(&body).expect("serialises")
    }
}

/// The 5-question request's questions.
fn five_questions() -> Value {
    json!({
        "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
        "guests": {"type": "noul", "instructions": "Did people outside the company lose access to something?"},
        "team": {"type": "choice", "instructions": "Which team should handle this ticket?", "criteria": {
            "billing": "Charges, invoices, refunds, payment methods",
            "access": "Logins, permissions, shared folders, guests",
            "bug": "Something in the product does not work as documented",
            "other": null}},
        "request": {"type": "choice", "instructions": "What does the customer mainly ask for?", "criteria": {
            "refund": "Money back for a charge",
            "fix": "A problem in the product to be repaired",
            "information": "An answer or an explanation",
            "cancel": "Ending the subscription"}},
        "urgency": {"type": "score", "instructions": "How urgent is this ticket?", "criteria": ["low", "medium", "high"]},
    })
}

/// One choice question of `n` options (`queue_01`…).
fn wide_question(n: usize) -> Value {
    let criteria: Map<String, Value> = (1..=n)
        .map(|i| (format!("queue_{i:02}"), Value::Null))
        .collect();
    json!({"route": {"type": "choice", "instructions": "Which queue should this ticket go to?", "criteria": criteria}})
}

// ---------------------------------------------------------------------------------------
// vLLM's counters
// ---------------------------------------------------------------------------------------

/// vLLM's own counters at one moment (or a difference of two).
#[derive(Clone, Copy, Default, Debug)]
struct Counters {
    /// Finished engine requests (`vllm:request_success_total`, every finish reason).
    requests: f64,
    /// Prompt tokens computed (`vllm:prompt_tokens_by_source_total{source="local_compute"}`).
    computed: f64,
    /// Prompt tokens served from the prefix cache (`…{source="local_cache_hit"}`).
    cached: f64,
    /// All prompt tokens (`vllm:prompt_tokens_total`).
    prompt: f64,
    /// Engine steps (`vllm:iteration_tokens_total_count`): reads scheduled in one step
    /// share its fixed cost.
    steps: f64,
    /// CPU seconds of vLLM's API-server process (`process_cpu_seconds_total`: HTTP, JSON,
    /// chat templates, tokenizing, logprobs; the engine runs in another process).
    api_cpu: f64,
}

impl Counters {
    fn minus(self, before: Counters) -> Counters {
        Counters {
            requests: self.requests - before.requests,
            computed: self.computed - before.computed,
            cached: self.cached - before.cached,
            prompt: self.prompt - before.prompt,
            steps: self.steps - before.steps,
            api_cpu: self.api_cpu - before.api_cpu,
        }
    }

    fn plus(self, other: Counters) -> Counters {
        Counters {
            requests: self.requests + other.requests,
            computed: self.computed + other.computed,
            cached: self.cached + other.cached,
            prompt: self.prompt + other.prompt,
            steps: self.steps + other.steps,
            api_cpu: self.api_cpu + other.api_cpu,
        }
    }

    fn per(self, calls: usize) -> Counters {
        let n = calls.max(1) as f64;
        Counters {
            requests: self.requests / n,
            computed: self.computed / n,
            cached: self.cached / n,
            prompt: self.prompt / n,
            steps: self.steps / n,
            api_cpu: self.api_cpu / n,
        }
    }
}

/// Sums the samples of `name` in Prometheus text whose labels contain `label` (all when
/// `label` is empty).
fn metric_sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.contains(label)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

async fn counters(setup: &Setup) -> Counters {
    let text = setup
        .client
        .get(format!("{}/metrics", setup.vllm_root))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("vLLM's /metrics answers")
        .text()
        .await
        .expect("vLLM's /metrics body");
    let by_source = "vllm:prompt_tokens_by_source_total";
    let counters = Counters {
        requests: metric_sum(&text, "vllm:request_success_total", ""),
        computed: metric_sum(&text, by_source, "source=\"local_compute\""),
        cached: metric_sum(&text, by_source, "source=\"local_cache_hit\""),
        prompt: metric_sum(&text, "vllm:prompt_tokens_total", ""),
        steps: metric_sum(&text, "vllm:iteration_tokens_total_count", ""),
        api_cpu: metric_sum(&text, "process_cpu_seconds_total", ""),
    };
    assert!(
        text.contains("vllm:request_success_total") && text.contains(by_source),
        "vLLM's /metrics lacks the counters this bench reads (vLLM 0.32's names)"
    );
    counters
}

/// The counters once at least `requests` more requests than `before` have finished (vLLM
/// may count a request a moment after its answer is out; polled for at most 2 s).
async fn counters_after(setup: &Setup, before: Counters, requests: f64) -> Counters {
    let mut now = counters(setup).await;
    for _ in 0..80 {
        if now.requests - before.requests >= requests {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        now = counters(setup).await;
    }
    now
}

// ---------------------------------------------------------------------------------------
// Calls
// ---------------------------------------------------------------------------------------

/// One timed call and what it cost vLLM.
#[derive(Clone, Debug, Default)]
struct Call {
    ms: f64,
    status: u16,
    /// vLLM's counters over the call (sequential calls only).
    cost: Counters,
    /// The service's `usage.upstream_requests` (native: the questions, one request each).
    upstream: Option<u64>,
    error: Option<String>,
}

impl Call {
    fn ok(&self) -> bool {
        self.status == 200
    }
}

/// Sends one body; returns the latency, the status and, for a 200, the reads it reports.
async fn send(setup: &Setup, path: Path, body: Vec<u8>, questions: usize) -> Call {
    let started = Instant::now();
    let result = async {
        let response = setup
            .client
            .post(setup.url(path))
            .timeout(CALL_TIMEOUT)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, bytes))
    }
    .await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok((200, bytes)) => {
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let answered = v["answers"].as_object().map_or(0, |a| a.len());
            let upstream = match path {
                Path::Native => Some(questions as u64),
                _ => v["usage"]["upstream_requests"].as_u64(),
            };
            Call {
                ms,
                status: 200,
                upstream,
                error: (answered != questions)
                    .then(|| format!("{answered} answers for {questions} questions: {v}")),
                ..Call::default()
            }
        }
        Ok((status, bytes)) => Call {
            ms,
            status,
            error: Some(String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned()),
            ..Call::default()
        },
        Err(e) => Call {
            ms,
            error: Some(e.to_string()),
            ..Call::default()
        },
    }
}

/// One call alone on the server, with vLLM's counters read around it.
async fn measured(setup: &Setup, path: Path, state: &str, questions: &Value) -> Call {
    let n = questions.as_object().map_or(0, |q| q.len());
    let before = counters(setup).await;
    let mut call = send(setup, path, setup.body(path, state, questions), n).await;
    let expected = call.upstream.unwrap_or(0) as f64;
    call.cost = counters_after(setup, before, expected).await.minus(before);
    call.cost.api_cpu -= setup.scrape_cpu;
    if call.ok() && (call.cost.requests - expected).abs() > 0.5 {
        eprintln!(
            "{}: the service reported {expected} upstream requests, vLLM counted {}",
            path.name(),
            call.cost.requests
        );
    }
    if let Some(e) = &call.error {
        eprintln!(
            "{}: {} after {:.0} ms: {e}",
            path.name(),
            call.status,
            call.ms
        );
    }
    call
}

/// What `callers` loops of new-state calls did over one phase.
#[derive(Default)]
struct Load {
    calls: usize,
    errors: usize,
    elapsed: Duration,
    cost: Counters,
    first_error: Option<String>,
}

async fn load(setup: &Arc<Setup>, path: Path, callers: usize, secs: Duration) -> Load {
    let questions = Arc::new(five_questions());
    let before = counters(setup).await;
    let started = Instant::now();
    let stop_at = started + secs;
    let done = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (setup, questions, done) = (setup.clone(), questions.clone(), done.clone());
            tokio::spawn(async move {
                let mut calls = Vec::new();
                while Instant::now() < stop_at {
                    let body = setup.body(path, &setup.fresh_state(), &questions);
                    let call = send(&setup, path, body, 5).await;
                    done.fetch_add(call.upstream.unwrap_or(0) as usize, Ordering::Relaxed);
                    calls.push(call);
                }
                calls
            })
        })
        .collect();
    let mut out = Load::default();
    for task in tasks {
        for call in task.await.expect("load task") {
            if call.ok() && call.error.is_none() {
                out.calls += 1;
            } else {
                out.errors += 1;
                if out.first_error.is_none() {
                    out.first_error = Some(format!("{}: {:?}", call.status, call.error));
                }
            }
        }
    }
    out.elapsed = started.elapsed();
    let requests = done.load(Ordering::Relaxed) as f64;
    out.cost = counters_after(setup, before, requests).await.minus(before);
    out
}

// ---------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------

/// A comma-separated list of counts from the environment (`default` when unset or empty).
fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(|n| n.trim().parse().unwrap_or_else(|_| panic!("{name}: {v:?}")))
            .collect(),
        _ => default.to_vec(),
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `paths` rotated by `round`, so no path always goes first.
fn order(round: usize, paths: &[Path]) -> Vec<Path> {
    (0..paths.len())
        .map(|k| paths[(k + round) % paths.len()])
        .collect()
}

/// Nearest-rank percentile of the successful calls' latencies (NaN when none).
fn percentile(calls: &[Call], p: f64) -> f64 {
    let mut ms: Vec<f64> = calls.iter().filter(|c| c.ok()).map(|c| c.ms).collect();
    ms.sort_by(f64::total_cmp);
    nearest_rank(&ms, p).unwrap_or(f64::NAN)
}

/// The mean cost of the successful calls.
fn mean_cost(calls: &[Call]) -> Counters {
    let ok: Vec<&Call> = calls.iter().filter(|c| c.ok()).collect();
    ok.iter()
        .fold(Counters::default(), |sum, c| sum.plus(c.cost))
        .per(ok.len())
}

/// `computed / cached` prompt tokens.
fn tokens(c: Counters) -> String {
    format!("{:.0} / {:.0}", c.computed, c.cached)
}

/// Starts the service in this runtime; returns its `/v1/systemone` URL once `/readyz` is 200,
/// and its state (to render its prompts).
async fn start_service(vllm_url: &str, model: &str) -> (String, AppState) {
    let table = std::env::var("BENCH_TOKEN_TABLE").unwrap_or_else(|_| "qwen-3".into());
    let extra = std::env::var("BENCH_SERVICE_ARGS").unwrap_or_default();
    let mut args: Vec<&str> = vec![
        "systemone",
        "serve",
        "--backend",
        "vllm",
        "--backend-url",
        vllm_url,
        "--model",
        model,
        "--upstream-model",
        model,
        "--token-table",
        &table,
        "--read-timeout-secs",
        "120",
        "--request-timeout-secs",
        "300",
    ];
    if table != "auto" {
        args.extend(["--token-check-interval-secs", "0"]);
    }
    args.extend(extra.split_whitespace());
    let config = match Cli::try_parse_from(&args)
        .expect("valid serve flags")
        .command
    {
        Command::Serve(config) => *config,
        other => panic!("not serve: {other:?}"),
    };
    let state = systemone::build_state(&config).expect("the service's state builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = systemone::app(state.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let client = reqwest::Client::new();
    let readyz = format!("http://{addr}/readyz");
    let started = Instant::now();
    loop {
        let ready = client.get(&readyz).send().await;
        if ready.as_ref().is_ok_and(|r| r.status().is_success()) {
            break;
        }
        if started.elapsed() > Duration::from_secs(300) {
            let text = match ready {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            panic!("the service was not ready within 300 s: {text}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "service ready on {addr} ({:.1} s; token table {table})",
        started.elapsed().as_secs_f64()
    );
    (format!("http://{addr}/v1/systemone"), state)
}

fn main() {
    let Ok(vllm_url) = std::env::var("SYSTEMONE_VLLM_URL") else {
        eprintln!(
            "vllm_native: set SYSTEMONE_VLLM_URL to a vLLM 0.32 serving a Qwen 3 model, e.g.\n  \
             eval \"$(SYSTEMONE_VLLM_SERVE=qwen3-random scripts/start-vllm.sh 0)\"\n  \
             SYSTEMONE_VLLM_URL=$VLLM_URL cargo bench --bench vllm_native\n  \
             kill -- -$VLLM_PID"
        );
        std::process::exit(2);
    };
    let model = std::env::var("SYSTEMONE_VLLM_MODEL").unwrap_or_else(|_| "qwen3-random".into());
    support::runtime("vllm-native").block_on(run(vllm_url, model));
}

async fn run(vllm_url: String, model: String) {
    let bench_started = Instant::now();
    let new_calls = env_usize("BENCH_NEW_CALLS", 8);
    let same_calls = env_usize("BENCH_SAME_CALLS", 6);
    let wide_calls = env_usize("BENCH_WIDE_CALLS", 3);
    let wide_options = env_list("BENCH_WIDE_OPTIONS", &[26, 50]);
    let callers = env_usize("BENCH_CALLERS", 4);
    let load_rounds = env_usize("BENCH_LOAD_ROUNDS", 2);
    let load_secs = env_secs("BENCH_LOAD_SECS", 15.0);
    let vllm_root = vllm_url
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_string();
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() % 100_000);

    let (service_url, service_state) = start_service(&vllm_url, &model).await;
    let mut setup = Setup {
        client: load_client(2 * callers, CALL_TIMEOUT),
        vllm_root,
        service_url,
        model: model.clone(),
        run: run_id,
        next: AtomicU64::new(0),
        scrape_cpu: 0.0,
    };
    // What reading /metrics costs the API server, so a call's CPU is its own.
    let first = counters(&setup).await;
    let mut last = first;
    for _ in 0..20 {
        last = counters(&setup).await;
    }
    setup.scrape_cpu = last.minus(first).api_cpu / 20.0;
    eprintln!(
        "one /metrics scrape costs vLLM's API server {:.1} ms of CPU",
        setup.scrape_cpu * 1e3
    );
    let setup = Arc::new(setup);
    let five = five_questions();

    // Warm-up: one call per path (its first request pays for cold paths in vLLM and the
    // service's connection pool), and the check that native reads this model at all: a
    // model it refuses (Gemma 3: 501) is measured through the service only.
    let mut paths = PATHS.to_vec();
    let mut refused = None;
    for path in PATHS {
        let call = measured(&setup, path, &setup.fresh_state(), &five).await;
        if path == Path::Native && !call.ok() {
            let why = short_message(call.error.as_deref().unwrap_or(""));
            eprintln!("native refuses {model}: {} {why}", call.status);
            refused = Some((call.status, why));
            paths.retain(|p| *p != Path::Native);
            continue;
        }
        assert!(
            call.ok(),
            "the warm-up call through {} failed ({}): {:?}",
            path.name(),
            call.status,
            call.error
        );
    }

    let anatomy = anatomy(&setup, &service_state, &vllm_url, &paths, &five).await;

    // New state, alternating.
    let mut fresh: BTreeMap<&str, Vec<Call>> = BTreeMap::new();
    for round in 0..new_calls {
        for path in order(round, &paths) {
            let call = measured(&setup, path, &setup.fresh_state(), &five).await;
            fresh.entry(path.name()).or_default().push(call);
        }
    }
    eprintln!("new state: {new_calls} calls per path done");

    // Same state again: one state per path, seated once.
    let same_state: Vec<String> = PATHS.iter().map(|_| setup.fresh_state()).collect();
    for (k, path) in PATHS.iter().enumerate() {
        if paths.contains(path) {
            measured(&setup, *path, &same_state[k], &five).await;
        }
    }
    let mut same: BTreeMap<&str, Vec<Call>> = BTreeMap::new();
    for round in 0..same_calls {
        for path in order(round, &paths) {
            let k = PATHS.iter().position(|p| *p == path).expect("a path");
            let call = measured(&setup, path, &same_state[k], &five).await;
            same.entry(path.name()).or_default().push(call);
        }
    }
    eprintln!("same state: {same_calls} calls per path done");

    // Callers at once, new states.
    let mut loads: BTreeMap<&str, Load> = BTreeMap::new();
    for round in 0..load_rounds {
        for path in order(round, &paths) {
            let phase = load(&setup, path, callers, load_secs).await;
            eprintln!(
                "load {} round {}: {} calls in {:.1} s, {} errors",
                path.name(),
                round + 1,
                phase.calls,
                phase.elapsed.as_secs_f64(),
                phase.errors
            );
            let total = loads.entry(path.name()).or_default();
            total.calls += phase.calls;
            total.errors += phase.errors;
            total.elapsed += phase.elapsed;
            total.cost = total.cost.plus(phase.cost);
            if total.first_error.is_none() {
                total.first_error = phase.first_error;
            }
        }
    }

    // Wide questions (26 and 50 options unless BENCH_WIDE_OPTIONS says), new states.
    let mut wide: BTreeMap<(usize, &str), Vec<Call>> = BTreeMap::new();
    for &n in &wide_options {
        let question = wide_question(n);
        for round in 0..wide_calls {
            for path in order(round, &paths) {
                let call = measured(&setup, path, &setup.fresh_state(), &question).await;
                wide.entry((n, path.name())).or_default().push(call);
            }
        }
    }
    eprintln!("done in {:.0} s", bench_started.elapsed().as_secs_f64());

    print_table(
        &model,
        refused
            .as_ref()
            .map(|(status, why)| (*status, why.as_str())),
        &anatomy,
        [new_calls, same_calls, wide_calls, callers, load_rounds],
        load_secs,
        &fresh,
        &same,
        &loads,
        &wide,
    );
}

#[allow(clippy::too_many_arguments)]
fn print_table(
    model: &str,
    refused: Option<(u16, &str)>,
    anatomy: &[Anatomy],
    [new_calls, same_calls, wide_calls, callers, load_rounds]: [usize; 5],
    load_secs: Duration,
    fresh: &BTreeMap<&str, Vec<Call>>,
    same: &BTreeMap<&str, Vec<Call>>,
    loads: &BTreeMap<&str, Load>,
    wide: &BTreeMap<(usize, &str), Vec<Call>>,
) {
    let names: Vec<&str> = PATHS.iter().map(|p| p.name()).collect();
    // The paths measured (native only when it reads this model).
    let measured: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| fresh.contains_key(n))
        .collect();
    let row = |label: &str, cell: &dyn Fn(&str) -> String| {
        let cells: Vec<String> = names
            .iter()
            .map(|n| match refused {
                Some((status, _)) if !fresh.contains_key(n) => format!("refused ({status})"),
                _ => cell(n),
            })
            .collect();
        println!("| {label} | {} |", cells.join(" | "));
    };
    let answers_per_sec = |n: &str| {
        let l = &loads[n];
        l.calls as f64 * 5.0 / l.elapsed.as_secs_f64()
    };
    println!(
        "\n### vLLM native `/v1/systemone` vs systemone, {model} on the same vLLM 0.32 (CPU, float32)\n"
    );
    println!("| | vLLM native | systemone `accuracy` | systemone `cost` | systemone `compact` |");
    println!("|---|---:|---:|---:|---:|");
    row("new state, p50 / p90 (ms)", &|n| {
        format!(
            "{:.0} / {:.0}",
            percentile(&fresh[n], 50.0),
            percentile(&fresh[n], 90.0)
        )
    });
    row("same state again, p50 (ms)", &|n| {
        format!("{:.0}", percentile(&same[n], 50.0))
    });
    row(
        &format!("answers/s, {callers} callers (new states)"),
        &|n| format!("{:.1}", answers_per_sec(n)),
    );
    row("vLLM requests (reads) per call", &|n| {
        format!("{:.1}", mean_cost(&fresh[n]).requests)
    });
    row("prompt tokens per read (computed + cached)", &|n| {
        let c = mean_cost(&fresh[n]);
        format!("{:.0}", c.prompt / c.requests)
    });
    row("vLLM engine steps per call, new state", &|n| {
        format!("{:.1}", mean_cost(&fresh[n]).steps)
    });
    row(
        "vLLM API-server CPU per call (ms), new state / same state",
        &|n| {
            format!(
                "{:.0} / {:.0}",
                mean_cost(&fresh[n]).api_cpu * 1e3,
                mean_cost(&same[n]).api_cpu * 1e3
            )
        },
    );
    row(
        "prompt tokens computed / from cache per call, new state",
        &|n| tokens(mean_cost(&fresh[n])),
    );
    row("same, same state again", &|n| tokens(mean_cost(&same[n])));
    row(&format!("same, {callers} callers (per call)"), &|n| {
        let l = &loads[n];
        tokens(l.cost.per(l.calls + l.errors))
    });
    row(
        &format!("engine steps / API-server CPU ms per call, {callers} callers"),
        &|n| {
            let c = loads[n].cost.per(loads[n].calls + loads[n].errors);
            format!("{:.1} / {:.0}", c.steps, c.api_cpu * 1e3)
        },
    );
    for &n in wide
        .keys()
        .map(|(n, _)| n)
        .collect::<std::collections::BTreeSet<_>>()
    {
        row(
            &format!("{n} options (1 choice, new state): p50 ms, reads, computed / cached"),
            &|p| {
                let calls = &wide[&(n, p)];
                match calls.iter().find(|c| !c.ok()) {
                    Some(refused) if calls.iter().all(|c| !c.ok()) => format!(
                        "refused ({}{})",
                        refused.status,
                        if p == "native" {
                            format!(
                                ": {}",
                                short_message(refused.error.as_deref().unwrap_or(""))
                            )
                        } else {
                            String::new()
                        }
                    ),
                    _ => {
                        let c = mean_cost(calls);
                        format!(
                            "{:.0} ms, {:.1} reads, {}",
                            percentile(calls, 50.0),
                            c.requests,
                            tokens(c)
                        )
                    }
                }
            },
        );
    }
    println!();
    if let Some((status, why)) = refused {
        println!(
            "Native refuses {model} ({status}: {why}): the issue's goals need a model it reads."
        );
    } else {
        print_goals(fresh, same, &answers_per_sec);
    }
    println!(
        "\n{new_calls} new-state and {same_calls} same-state calls per path, {load_rounds} × {:.0} s of \
         load per path, {wide_calls} calls per wide row; paths alternating. Token counts are vLLM's \
         own `/metrics` deltas per call (`prompt_tokens_by_source_total`: `local_compute` / \
         `local_cache_hit`); reads are its finished requests (`request_success_total`).",
        load_secs.as_secs_f64()
    );
    print_anatomy(anatomy);
    print_raw(&measured, fresh, same, loads, wide);
}

/// The issues' goals for `cost` and `compact` against native, and `accuracy`'s ratios.
fn print_goals(
    fresh: &BTreeMap<&str, Vec<Call>>,
    same: &BTreeMap<&str, Vec<Call>>,
    answers_per_sec: &dyn Fn(&str) -> f64,
) {
    let rate = |p: &str| answers_per_sec(p) / answers_per_sec("native");
    let p50 = |p: &str| percentile(&fresh[p], 50.0) / percentile(&fresh["native"], 50.0);
    let same_faster = |p: &str| percentile(&same[p], 50.0) < percentile(&same["native"], 50.0);
    let computed = |p: &str| mean_cost(&fresh[p]).computed;
    println!(
        "Goals for `cost` (issue 26): answers/s {:.2}× native's (goal ≥ {GOAL_RATE_RATIO}: {}), \
         new-state p50 {:.2}× native's (goal ≤ {GOAL_P50_RATIO}: {}), same state faster than \
         native: {}. `accuracy`: answers/s {:.2}×, new-state p50 {:.2}×.",
        rate("cost"),
        support::mark(rate("cost") >= GOAL_RATE_RATIO),
        p50("cost"),
        support::mark(p50("cost") <= GOAL_P50_RATIO),
        support::mark(same_faster("cost")),
        rate("accuracy"),
        p50("accuracy"),
    );
    println!(
        "\nGoals for `compact` (issue 42): prompt tokens computed per new-state call {:.0} against \
         native's {:.0} (goal ≤: {}), answers/s {:.2}× native's (goal ≥ {COMPACT_RATE_RATIO}: {}), \
         new-state p50 {:.2}× native's (goal ≤ {COMPACT_P50_RATIO}: {}), same state faster than \
         native: {}.",
        computed("compact"),
        computed("native"),
        support::mark(computed("compact") <= computed("native")),
        rate("compact"),
        support::mark(rate("compact") >= COMPACT_RATE_RATIO),
        p50("compact"),
        support::mark(p50("compact") <= COMPACT_P50_RATIO),
        support::mark(same_faster("compact")),
    );
}

/// Where each path's prompt tokens go.
fn print_anatomy(anatomy: &[Anatomy]) {
    println!(
        "\nThe prompts of the 5-question request (the model's tokens, from vLLM's `/tokenize` \
         of each read's exact messages):\n"
    );
    println!(
        "| | tokens per read | head all reads of a call share | head shared with a call on \
         another state |\n|---|---:|---:|---:|"
    );
    for a in anatomy {
        println!(
            "| {} | {} (mean {:.0}) | {} | {} |",
            a.path.name(),
            a.lengths
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            a.lengths.iter().sum::<usize>() as f64 / a.lengths.len().max(1) as f64,
            a.call_head,
            a.cross_head
        );
    }
}

/// Every call, for the record.
fn print_raw(
    names: &[&str],
    fresh: &BTreeMap<&str, Vec<Call>>,
    same: &BTreeMap<&str, Vec<Call>>,
    loads: &BTreeMap<&str, Load>,
    wide: &BTreeMap<(usize, &str), Vec<Call>>,
) {
    println!(
        "\nRaw calls (ms/reads/computed/cached/engine steps, service-reported upstream requests):"
    );
    let raw = |what: &str, calls: &[Call]| {
        let mut line = String::new();
        for c in calls {
            let _ = write!(
                line,
                " {}{:.0}/{:.0}/{:.0}/{:.0}/{:.0}{}",
                if c.ok() { "" } else { "!" },
                c.ms,
                c.cost.requests,
                c.cost.computed,
                c.cost.cached,
                c.cost.steps,
                c.upstream.map_or(String::new(), |u| format!("({u})"))
            );
        }
        println!("- {what}:{line}");
    };
    for n in names {
        raw(&format!("new state, {n}"), &fresh[n]);
    }
    for n in names {
        raw(&format!("same state, {n}"), &same[n]);
    }
    for n in names {
        let l = &loads[n];
        println!(
            "- load, {n}: {} calls, {} errors, {:.1} s, {:.1} reads / {} per call{}",
            l.calls,
            l.errors,
            l.elapsed.as_secs_f64(),
            l.cost.per(l.calls + l.errors).requests,
            tokens(l.cost.per(l.calls + l.errors)),
            l.first_error
                .as_ref()
                .map_or(String::new(), |e| format!("; first error: {e}"))
        );
    }
    for ((n, p), calls) in wide {
        raw(&format!("{n} options, {p}"), calls);
        if let Some(e) = calls.iter().find_map(|c| c.error.as_ref()) {
            println!("  first error: {}", short_message(e));
        }
    }
}

/// The `message` of an error body, or its start.
fn short_message(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let message = v["error"]["message"]
        .as_str()
        .or_else(|| v["message"].as_str())
        .unwrap_or(body);
    message.chars().take(120).collect()
}

// ---------------------------------------------------------------------------------------
// The prompts, token by token
// ---------------------------------------------------------------------------------------

/// Where one path's prompt tokens go for the 5-question request.
struct Anatomy {
    path: Path,
    /// Each read's prompt length, in request order.
    lengths: Vec<usize>,
    /// The longest token prefix every read of one call shares (what the prefix cache can
    /// serve to all but the first read, rounded down to whole blocks).
    call_head: usize,
    /// The longest token prefix the first read shares with the first read of a call on
    /// another state (what a new call can take from the cache of earlier calls).
    cross_head: usize,
}

/// vLLM's tokens for chat `messages` (the service's reads: the prefill continued; native's:
/// a generation prompt with thinking off, as its `ReadPromptRequest` renders them).
async fn chat_tokens(setup: &Setup, messages: &Value, prefilled: bool) -> Vec<u64> {
    let mut body = json!({
        "model": setup.model,
        "messages": messages,
        "add_special_tokens": false,
    });
    if prefilled {
        body["continue_final_message"] = json!(true);
        body["add_generation_prompt"] = json!(false);
    } else {
        body["add_generation_prompt"] = json!(true);
        body["chat_template_kwargs"] = json!({"enable_thinking": false});
    }
    let v: Value = setup
        .client
        .post(format!("{}/tokenize", setup.vllm_root))
        .json(&body)
        .send()
        .await
        .expect("vLLM's /tokenize answers")
        .json()
        .await
        .expect("vLLM's /tokenize answers JSON");
    v["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("/tokenize: {v}"))
        .iter()
        .filter_map(Value::as_u64)
        .collect()
}

/// Native's user turn for one question, as vLLM 0.32's `NextTokenStrategy` writes it
/// (`{state}\n\n` + the question type's `prompt`).
fn native_content(state: &str, question: &Value) -> String {
    let mut lines = Vec::new();
    if let Some(i) = question["instructions"].as_str().filter(|i| !i.is_empty()) {
        lines.push(format!("Question: {i}"));
    }
    let criteria = &question["criteria"];
    let reply = match question["type"].as_str() {
        Some("noul") => {
            let side = |k: &str, label: &str| {
                criteria[k]
                    .as_str()
                    .map_or(label.to_string(), |d| format!("{label}: {d}"))
            };
            lines.push(side("true", "yes"));
            lines.push(side("false", "no"));
            "Answer with yes or no only."
        }
        Some("score") => {
            for (i, level) in criteria.as_array().into_iter().flatten().enumerate() {
                lines.push(format!("{i}: {}", level.as_str().unwrap_or_default()));
            }
            "Answer with the number of one level only."
        }
        _ => {
            for (i, (name, d)) in criteria.as_object().into_iter().flatten().enumerate() {
                let label = char::from(b'A' + i as u8);
                lines.push(match d.as_str() {
                    Some(d) => format!("{label}: {name} - {d}"),
                    None => format!("{label}: {name}"),
                });
            }
            "Answer with the letter of one option only."
        }
    };
    lines.push(reply.to_string());
    format!("{state}\n\n{}", lines.join("\n"))
}

/// Each read's prompt tokens for `questions` on `state` through `path`.
async fn read_prompts(
    setup: &Setup,
    service: &AppState,
    vllm_url: &str,
    path: Path,
    state: &str,
    questions: &Value,
) -> Vec<Vec<u64>> {
    let mut prompts = Vec::new();
    if path == Path::Native {
        for question in questions.as_object().into_iter().flatten().map(|(_, q)| q) {
            let messages = json!([{"role": "user", "content": native_content(state, question)}]);
            prompts.push(chat_tokens(setup, &messages, false).await);
        }
        return prompts;
    }
    let body: Value = serde_json::from_slice(&setup.body(path, state, questions)).expect("JSON");
    let request =
        validate(body, &service.models.routes(), &service.limits).expect("the request is valid");
    let asks = plan(&request);
    let backend = VllmBackend::new(
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool"),
        vllm_url,
        request.model().upstream_model.clone(),
        None,
        128,
    );
    for (qi, rendered) in request.rendered().iter().enumerate() {
        let node = &rendered.reads.nodes[0];
        let read = ReadRequest {
            content: &asks[qi][0].content,
            prefix: &node.prefill,
            allowed_ids: &node.ids,
            read_ids: &node.ids,
            chained: rendered.reads.chained(),
            routing: None,
            cache_salt: None,
        };
        let body = serde_json::to_value(backend.body(&read)).expect("the body serialises");
        prompts.push(chat_tokens(setup, &body["messages"], true).await);
    }
    prompts
}

/// The length of the common prefix of two token lists.
fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

async fn anatomy(
    setup: &Setup,
    service: &AppState,
    vllm_url: &str,
    paths: &[Path],
    questions: &Value,
) -> Vec<Anatomy> {
    let (one, other) = (setup.fresh_state(), setup.fresh_state());
    let mut out = Vec::new();
    for &path in paths {
        let reads = read_prompts(setup, service, vllm_url, path, &one, questions).await;
        let next = read_prompts(setup, service, vllm_url, path, &other, questions).await;
        out.push(Anatomy {
            path,
            lengths: reads.iter().map(Vec::len).collect(),
            call_head: reads
                .iter()
                .map(|r| common_prefix(&reads[0], r))
                .min()
                .unwrap_or(0),
            cross_head: common_prefix(&reads[0], &next[0]),
        });
    }
    out
}
