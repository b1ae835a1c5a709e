//! The service against a real llama.cpp backend (Gemma 3 270M): overhead, layouts, peer.
//!
//! Needs `SYSTEMONE_LLAMA_URL` (a `llama-server` base URL ending in `/v1`, e.g. from
//! `scripts/start-llama.sh 0`); `scripts/bench-llamacpp.sh` starts one, installs the peer and
//! runs this. Prints one markdown table on stdout, then the raw numbers; progress goes to
//! stderr. Targets are printed beside the numbers, never asserted.
//!
//! 1. **Overhead.** A 1-question, 4-option request on a plain-text email of ~4,000
//!    characters (~1,000 Gemma tokens) sent straight to llama-server (the exact body the
//!    service sends, built with the library's `LlamaCppBackend::body` and serialised with
//!    serde_json) and through the service, alternating over `BENCH_OVERHEAD_ITERS` pairs
//!    (default 12; the order flips every pair). Every request carries a state of its own (a
//!    different number in the email's first line, plus a per-run nonce), so neither path is
//!    served from a prefix the other warmed: both re-use only the preamble and question
//!    that precede the state. A warm-up sends one state both ways and checks that the
//!    service's prompt is token-for-token the direct one (its whole prompt is then cached).
//!    Then that same request is repeated both ways (`BENCH_CACHED_ITERS` pairs, default 8):
//!    llama-server evaluates one token, so the difference left is the fixed cost (HTTP,
//!    JSON, the service's own work), which the ~1.5 s of prompt evaluation otherwise hides
//!    in noise.
//! 2. **Layouts.** A 5-question call (4 options each) on a fresh ~1,000-token state through
//!    the service, `"layout": "accuracy"` against `"layout": "cost"`, prefix cache on,
//!    `BENCH_LAYOUT_CALLS` calls each (default 3, alternating): latency per call and the
//!    prompt tokens the backend reports (`usage.input_tokens`, `usage.cached_tokens`;
//!    evaluated = input − cached).
//! 3. **Peer.** PyPI `system-one-adapter` 0.2.1 on the same llama-server and the same
//!    5-question call (fresh states), driven by `benches/peer/system_one_adapter_peer.py`
//!    under `SYSTEMONE_PYTHON` (default `.venv/bin/python`): `BENCH_PEER_CALLS` calls per mode
//!    (default 3) with a per-call timeout of `BENCH_PEER_TIMEOUT_SECS` (default 40), modes
//!    `BENCH_PEER_MODES` (default `structured,prompted`). Its latency is shown beside
//!    systemone's from part 2, with how many calls succeeded and why the others failed.
//!
//! The service is `systemone serve --backend llamacpp --backend-url $SYSTEMONE_LLAMA_URL
//! --model gemma-3-270m --token-table gemma-3 --listen 127.0.0.1:0` (prefix cache on, the
//! `accuracy` layout by default) plus generous read/request timeouts (120 s / 300 s), so a
//! machine busy with other work slows calls down instead of failing them.
//!
//! If the service process exits during the run, the bench prints its exit status and last
//! log lines, starts it again (at most 3 times) and adds a row saying so to the table.
//!
//! Everything is bounded: client timeouts on every request, a wall-clock kill for the peer
//! process, the service child is killed on drop, and a time budget (`BENCH_BUDGET_SECS`,
//! default 330) trims the sample counts when the machine is slow: part 1 starts no new pair
//! after 30% of it (at least 3 pairs), part 2 no new round after 60% (at least 1), and the
//! peer gets as many calls per mode as fit in the rest (at least 1). The table states the
//! counts that ran. About 3–5 minutes on 2 cores.
//!
//! `SYSTEMONE_LLAMA_URL=http://127.0.0.1:PORT/v1 cargo bench --bench llamacpp`

#[path = "support/mod.rs"]
mod support;

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use support::{label_ids, mark, nearest_rank, one_question, serve_command, ServiceGuard};

use systemone::backend::llamacpp::LlamaCppBackend;
use systemone::backend::ReadRequest;
use systemone::models::tokens::TokenTable;
use systemone::models::Model;
use systemone::question::lower_choice;
use systemone::request::prompt::plan;

const MODEL: &str = "gemma-3-270m";
const TOKEN_TABLE: &str = "gemma-3";
/// Bound on one direct read or one 1-question service call.
const SHORT_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on one 5-question service call.
const LONG_TIMEOUT: Duration = Duration::from_secs(150);
/// Target for the overhead ratio (service p50 / direct p50); printed, not asserted.
const TARGET_OVERHEAD_RATIO: f64 = 1.02;

/// The email body after its first line: ~4,600 characters of plain text (~1,000 Gemma tokens).
const EMAIL_BODY: &str = "From: Dana Whitfield <dana.whitfield@northwind-analytics.example>
To: support@example-saas.example
Subject: Charged twice after upgrading, and two guests lost access to shared folders

Hello support team,

I am writing on behalf of Northwind Analytics, where I manage our workspace and the billing for about forty people. Last Tuesday morning we upgraded the workspace from the Team plan to the Business plan, mostly because we needed the audit log and the longer retention for our client projects. The upgrade itself looked fine in the admin console: the new features appeared within a few minutes and nobody complained that day.

On Wednesday our finance colleague noticed two card payments from your company on the same day. The first one was for 480.00 and matches the old Team price for the month; the second one was for 720.00 and matches the Business price. The invoice page in the console shows both invoices as paid, with the same billing period, so it looks as if we paid for two plans for the same month. I expected the Team charge to be prorated or replaced by the Business one, as your pricing page describes for upgrades in the middle of a billing cycle. Our finance team closes the quarter in nine days, and they need a corrected invoice with our VAT number on it before then. We would also like the duplicate 480.00 refunded to the original card rather than kept as account credit, because the card belongs to a cost centre that will be closed next month.

The second problem may or may not be related. Right after the upgrade, two of our external guests, both auditors from a partner firm, lost access to the shared folders they had been working in for weeks. When they open a link they see a message saying that the folder does not exist or that they do not have permission. Their guest accounts still appear in the member list, with the same role as before, and I have not changed any sharing settings. Internal members can still open the same folders without any problem. I tried removing one of the guests and inviting her again, but the new invitation email never arrived, and the old link still shows the same error. The auditors are in the middle of their fieldwork, so every day without access delays their report.

To be clear about what we have tried so far: we signed out and in again, cleared the browser cache, tried two different browsers and the desktop app, and checked that the guests are not blocked by our single sign-on rules, which only apply to internal accounts. I also looked through your help centre articles about guest access and plan changes, but none of them mention that an upgrade could reset guest permissions. If there is a setting on the Business plan that treats guests differently, I could not find it in the console.

I would appreciate it if you could look into both issues. For the billing part, please confirm which of the two charges will be refunded, how long the refund usually takes to appear on the card, and whether the corrected invoice will replace both current invoices or be issued as a credit note. For the access part, please tell me whether this is a known problem with upgrades, and whether there is anything I should do on our side in the meantime, for example sharing the folders again or converting the guests into paid members until it is fixed.

A little background that may help you find the cause: the workspace was created three years ago on the Starter plan, moved to the Team plan eighteen months ago, and has kept the same owner account throughout. The guests were invited in the spring through the sharing dialog of each folder, not through the admin console, and both of them accepted their invitations on the same day. One of them uses a personal address at a large email provider and the other an address at her own firm, so I doubt that their mail filters are the problem. Our internal members sign in through single sign-on, while guests sign in with a password and a code sent by email, which worked for them without any trouble until the upgrade.

I can be reached by email at any time, or by phone between nine and five on weekdays. Our workspace identifier is shown in the console as northwind-analytics-eu, and the two guests are listed as auditors from the partner firm. Please let me know if you need screenshots, the invoice numbers or anything else from our side.

Thank you for your help, and sorry for the long message.

Kind regards,
Dana Whitfield
Operations Manager, Northwind Analytics";

/// `(id, instructions, [(label, description); 4])` of one choice question.
type Question = (&'static str, &'static str, [Criterion; 4]);
/// `(label, description)` of one option.
type Criterion = (&'static str, Option<&'static str>);

/// The five questions of the 5-question call (4 options each); the first alone is the
/// 1-question request of the overhead part.
const QUESTIONS: [Question; 5] = [
    (
        "team",
        "Which team should handle this email?",
        [
            (
                "billing",
                Some("Charges, invoices, refunds, payment methods"),
            ),
            (
                "access",
                Some("Logins, permissions, shared folders, guests"),
            ),
            (
                "bug",
                Some("Something in the product does not work as documented"),
            ),
            ("other", None),
        ],
    ),
    (
        "request",
        "What does the customer mainly ask for?",
        [
            ("refund", Some("Money back for a charge")),
            ("fix", Some("A problem in the product to be repaired")),
            (
                "information",
                Some("An explanation or answers to questions"),
            ),
            ("cancellation", Some("Ending the subscription")),
        ],
    ),
    (
        "tone",
        "How does the customer sound?",
        [
            ("angry", None),
            ("frustrated but polite", None),
            ("neutral", None),
            ("happy", None),
        ],
    ),
    (
        "urgency",
        "How soon does the customer need an answer?",
        [
            ("immediately", Some("Within hours")),
            ("this week", Some("Within a few days")),
            ("this month", Some("Within a few weeks")),
            ("no deadline", None),
        ],
    ),
    (
        "area",
        "Which product area is involved most?",
        [
            ("payments", Some("Plans, charges and invoices")),
            ("sharing", Some("Folders, links, guests and permissions")),
            ("sign-in", Some("Single sign-on, passwords, sessions")),
            ("desktop app", None),
        ],
    ),
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

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(default)
}

/// Nearest-rank percentile of unsorted values (NaN when empty).
fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    nearest_rank(&v, p).unwrap_or(f64::NAN)
}

fn median_u64(values: &[u64]) -> f64 {
    percentile(&values.iter().map(|v| *v as f64).collect::<Vec<_>>(), 50.0)
}

fn fmt_list(values: &[f64], decimals: usize) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:.decimals$}")).collect();
    format!("[{}]", items.join(", "))
}

/// A distinct state for every request of the run: a fresh number in the first line.
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
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!(
            "Ticket {}-{:04} received by the support inbox\n{EMAIL_BODY}",
            self.nonce, self.next
        )
    }
}

fn criteria(q: usize) -> Vec<(String, Value)> {
    QUESTIONS[q]
        .2
        .iter()
        .map(|(label, description)| (label.to_string(), json!(description)))
        .collect()
}

/// `{"id": {"type": "choice", "instructions": …, "criteria": {…}}, …}` for the first `n`.
fn questions_json(n: usize) -> Value {
    let mut map = Map::new();
    for (q, (id, instructions, _)) in QUESTIONS.iter().enumerate().take(n) {
        let criteria: Map<String, Value> = criteria(q).into_iter().collect();
        map.insert(
            (*id).to_string(),
            json!({"type": "choice", "instructions": instructions, "criteria": criteria}),
        );
    }
    Value::Object(map)
}

fn service_body(state: &str, questions: usize, layout: Option<&str>) -> Vec<u8> {
    let mut body = json!({"state": state, "questions": questions_json(questions)});
    if let Some(layout) = layout {
        body["layout"] = json!(layout);
    }
    serde_json::to_vec(&body).expect("serialises")
}

/// Renders the upstream body the service sends for the 1-question request on `state`.
struct DirectBodies {
    backend: LlamaCppBackend,
    model: Arc<Model>,
}

impl DirectBodies {
    fn new(base_url: &str) -> Self {
        // As the service builds it from its defaults: upstream id = model name, no key,
        // prefix cache on, no template arguments.
        let backend = || {
            LlamaCppBackend::new(
                systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16)
                    .expect("a pool"),
                base_url,
                MODEL.into(),
                None,
                true,
                None,
            )
        };
        let table = TokenTable::load(TOKEN_TABLE).expect("the shipped gemma-3 token table");
        DirectBodies {
            backend: backend(),
            model: Arc::new(Model::new(MODEL, Arc::new(backend()), table)),
        }
    }

    fn body(&self, state: &str) -> Vec<u8> {
        let question = lower_choice(QUESTIONS[0].0.into(), json!(QUESTIONS[0].1), criteria(0));
        let req = one_question(&self.model, &Value::String(state.to_string()), question);
        let asks = plan(&req);
        let ids = label_ids(&self.model, 4);
        let table = self.model.table.get().expect("a fixed table");
        let read = ReadRequest {
            content: &asks[0][0].content,
            prefix: &table.prefix,
            allowed_ids: &ids,
            read_ids: &ids,
            chained: false,
            routing: None,
            cache_salt: None,
        };
        serde_json::to_vec(&self.backend.body(&read, false)).expect("serialises")
    }
}

// ---------------------------------------------------------------------------------------
// The service child (the approach of benches/load.rs)
// ---------------------------------------------------------------------------------------

/// Lines of the service's stderr kept to explain an exit.
const LOG_TAIL: usize = 20;

/// Starts `systemone serve` against the llama-server at `backend_url`; returns the guard,
/// its address and the last lines it wrote to stderr.
fn start_service(backend_url: &str) -> (ServiceGuard, SocketAddr, Arc<Mutex<VecDeque<String>>>) {
    let mut command = serve_command(&[
        "--backend",
        "llamacpp",
        "--backend-url",
        backend_url,
        "--model",
        MODEL,
        "--token-table",
        TOKEN_TABLE,
        // Generous bounds, so a machine busy with other work slows calls down instead
        // of failing them (the default 30 s per read counts the wait in llama-server's
        // queue: 5 reads share its one slot). They change nothing else.
        "--read-timeout-secs",
        "120",
        "--request-timeout-secs",
        "300",
    ]);
    if let Ok(rust_log) = std::env::var("BENCH_SERVICE_RUST_LOG") {
        command.env("RUST_LOG", rust_log);
    }
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_TAIL)));
    let keep = tail.clone();
    // Keeps the last lines, and echoes warnings and panics once the service listens.
    let (guard, addr) = support::start_service(command, move |line, listening| {
        if let Ok(mut tail) = keep.lock() {
            if tail.len() == LOG_TAIL {
                tail.pop_front();
            }
            tail.push_back(line.to_string());
        }
        if listening && !line.contains(" INFO ") {
            eprintln!("service: {line}");
        }
    });
    (guard, addr, tail)
}

/// Most times the service is started again after it exited on its own.
const MAX_RESTARTS: usize = 3;

/// The running service; started again (at most [`MAX_RESTARTS`] times) when it exits.
struct Service {
    guard: ServiceGuard,
    url: String,
    tail: Arc<Mutex<VecDeque<String>>>,
    backend_url: String,
    /// How each earlier child ended: exit status and its last log line.
    exits: Vec<String>,
}

impl Service {
    fn start(backend_url: &str) -> Self {
        let (guard, addr, tail) = start_service(backend_url);
        eprintln!(
            "service at {addr} (pid {}), llama-server at {backend_url}",
            guard.child.id()
        );
        Service {
            guard,
            url: format!("http://{addr}/v1/systemone"),
            tail,
            backend_url: backend_url.to_string(),
            exits: Vec::new(),
        }
    }

    /// After a failed call: if the child has exited, say how, and start a new one.
    fn revive_if_dead(&mut self) {
        let Ok(Some(status)) = self.guard.child.try_wait() else {
            return;
        };
        let lines: Vec<String> = self
            .tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        eprintln!(
            "SERVICE EXITED ({status}); its last {} stderr lines:\n{}",
            lines.len(),
            lines.join("\n")
        );
        self.exits.push(format!(
            "{status}; last log line: {}",
            lines.last().map_or("(none)", String::as_str)
        ));
        if self.exits.len() > MAX_RESTARTS {
            return;
        }
        let fresh = Service::start(&self.backend_url);
        let exits = std::mem::take(&mut self.exits);
        *self = Service { exits, ..fresh };
    }
}

// ---------------------------------------------------------------------------------------
// Calls
// ---------------------------------------------------------------------------------------

/// One timed request and what the backend reported about its prompt.
#[derive(Debug, Clone, Default)]
struct Call {
    ms: f64,
    ok: bool,
    /// Prompt tokens (llama-server `prompt_tokens`, or the service's `input_tokens`).
    input: u64,
    /// Of those, served from the prefix cache.
    cached: u64,
    /// Upstream requests the service sent (1 for a direct read).
    upstream: u64,
    /// Response body size.
    bytes: usize,
    /// llama-server's own time for the request (`timings.prompt_ms + predicted_ms`; direct
    /// reads only).
    server_ms: Option<f64>,
    error: Option<String>,
}

impl Call {
    fn evaluated(&self) -> u64 {
        self.input.saturating_sub(self.cached)
    }
}

async fn post(client: &reqwest::Client, url: &str, body: &[u8], limit: Duration) -> Call {
    let started = Instant::now();
    let result = async {
        let response = client
            .post(url)
            .timeout(limit)
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, bytes))
    }
    .await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok((status, bytes)) if status.is_success() => Call {
            ms,
            ok: true,
            bytes: bytes.len(),
            ..read_usage(&bytes)
        },
        Ok((status, bytes)) => Call {
            ms,
            error: Some(format!(
                "{status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            )),
            ..Call::default()
        },
        Err(e) => Call {
            ms,
            error: Some(e.to_string()),
            ..Call::default()
        },
    }
}

/// Token counts from a llama-server chat answer or a service answer.
fn read_usage(bytes: &[u8]) -> Call {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let u = &v["usage"];
    let n = |x: &Value| x.as_u64();
    if let Some(input) = n(&u["input_tokens"]) {
        // The service.
        return Call {
            input,
            cached: n(&u["cached_tokens"]).unwrap_or(0),
            upstream: n(&u["upstream_requests"]).unwrap_or(0),
            ..Call::default()
        };
    }
    Call {
        input: n(&u["prompt_tokens"]).unwrap_or(0),
        cached: n(&u["prompt_tokens_details"]["cached_tokens"])
            .or_else(|| n(&v["timings"]["cache_n"]))
            .unwrap_or(0),
        upstream: 1,
        server_ms: v["timings"]["prompt_ms"]
            .as_f64()
            .map(|p| p + v["timings"]["predicted_ms"].as_f64().unwrap_or(0.0)),
        ..Call::default()
    }
}

fn report_error(what: &str, call: &Call) {
    if let Some(e) = &call.error {
        eprintln!("{what}: FAILED after {:.0} ms: {e}", call.ms);
    }
}

fn ok_ms(calls: &[Call]) -> Vec<f64> {
    calls.iter().filter(|c| c.ok).map(|c| c.ms).collect()
}

/// One 1-question request both ways: `direct` straight to llama-server at `chat_url` and
/// `through` the service, direct first when `i` is even. Failures are reported under
/// `labels` (direct, service); a service that died meanwhile is started again.
fn pair(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    chat_url: &str,
    service: &mut Service,
    (direct, through): (&[u8], &[u8]),
    i: usize,
    labels: [&str; 2],
) -> (Call, Call) {
    let service_url = service.url.clone();
    let (d, s) = rt.block_on(async {
        if i % 2 == 0 {
            let d = post(client, chat_url, direct, SHORT_TIMEOUT).await;
            let s = post(client, &service_url, through, SHORT_TIMEOUT).await;
            (d, s)
        } else {
            let s = post(client, &service_url, through, SHORT_TIMEOUT).await;
            let d = post(client, chat_url, direct, SHORT_TIMEOUT).await;
            (d, s)
        }
    });
    report_error(labels[0], &d);
    report_error(labels[1], &s);
    if !s.ok {
        service.revive_if_dead();
    }
    (d, s)
}

// ---------------------------------------------------------------------------------------
// The peer
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct PeerRun {
    mode: String,
    ok: bool,
    secs: f64,
    error_type: Option<String>,
    error: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    /// Why, underneath (the first pydantic problem of a validation error).
    cause: Option<String>,
    text: Option<String>,
}

struct PeerOutcome {
    version: String,
    runs: Vec<PeerRun>,
    /// Why the peer could not run at all.
    failure: Option<String>,
}

fn run_peer(
    python: &str,
    base_url: &str,
    modes: &[String],
    calls: usize,
    timeout_secs: f64,
    states: &mut States,
) -> PeerOutcome {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/peer/system_one_adapter_peer.py"
    );
    let mut runs = Vec::new();
    for _ in 0..calls {
        for mode in modes {
            runs.push(
                json!({"mode": mode, "state": states.fresh(), "questions": questions_json(5)}),
            );
        }
    }
    let n_runs = runs.len();
    let job =
        json!({"base_url": base_url, "model": MODEL, "timeout_s": timeout_secs, "runs": runs});
    let failed = |why: String| PeerOutcome {
        version: "?".into(),
        runs: Vec::new(),
        failure: Some(why),
    };
    let mut child = match Command::new(python)
        .arg(script)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return failed(format!("cannot start {python}: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(job.to_string().as_bytes());
    }
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    // Each call is bounded in the script; this is the backstop for the whole process.
    let deadline =
        Instant::now() + Duration::from_secs_f64(n_runs as f64 * (timeout_secs + 10.0) + 30.0);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    let Some(status) = status else {
        return failed("the peer script overran its wall-clock limit and was killed".into());
    };
    let Some(parsed) = out
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
    else {
        return failed(format!("the peer script ({status}) printed no JSON: {out}"));
    };
    if let Some(e) = parsed["import_error"].as_str() {
        return failed(format!(
            "cannot import system_one_adapter under {python}: {e}"
        ));
    }
    let runs = parsed["runs"]
        .as_array()
        .map(|runs| {
            runs.iter()
                .map(|r| PeerRun {
                    mode: r["mode"].as_str().unwrap_or("?").to_string(),
                    ok: r["ok"].as_bool().unwrap_or(false),
                    secs: r["latency_s"].as_f64().unwrap_or(f64::NAN),
                    error_type: r["error_type"].as_str().map(str::to_string),
                    error: r["error"].as_str().map(str::to_string),
                    input_tokens: r["input_tokens"].as_u64(),
                    output_tokens: r["output_tokens"].as_u64(),
                    cause: r["cause"].as_str().map(str::to_string),
                    text: r["text"].as_str().map(str::to_string),
                })
                .collect()
        })
        .unwrap_or_default();
    PeerOutcome {
        version: parsed["adapter_version"]
            .as_str()
            .unwrap_or("?")
            .to_string(),
        runs,
        failure: None,
    }
}

// ---------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------

fn main() {
    // `cargo bench` passes `--bench` (and maybe a filter); nothing here takes arguments.
    let Some(llama_url) = std::env::var("SYSTEMONE_LLAMA_URL")
        .ok()
        .map(|u| u.trim().trim_end_matches('/').to_string())
        .filter(|u| !u.is_empty())
    else {
        eprintln!(
            "benches/llamacpp: SYSTEMONE_LLAMA_URL is not set. This bench needs a running \
             llama-server with Gemma 3 270M: run scripts/bench-llamacpp.sh (starts one), or \
             `eval \"$(scripts/start-llama.sh 0)\"` and then \
             `SYSTEMONE_LLAMA_URL=$LLAMA_URL cargo bench --bench llamacpp`."
        );
        std::process::exit(2);
    };
    let python = std::env::var("SYSTEMONE_PYTHON")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python").to_string());
    let overhead_iters = env_usize("BENCH_OVERHEAD_ITERS", 12, 1000);
    let layout_calls = env_usize("BENCH_LAYOUT_CALLS", 3, 100);
    let peer_calls = env_usize("BENCH_PEER_CALLS", 3, 100);
    let peer_timeout = env_f64("BENCH_PEER_TIMEOUT_SECS", 40.0);
    let budget = Duration::from_secs_f64(env_f64("BENCH_BUDGET_SECS", 330.0));
    let peer_modes: Vec<String> = std::env::var("BENCH_PEER_MODES")
        .unwrap_or_else(|_| "structured,prompted".into())
        .split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| m == "structured" || m == "prompted")
        .collect();
    let bench_started = Instant::now();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let root_url = llama_url.trim_end_matches("/v1").to_string();
    let chat_url = format!("{llama_url}/chat/completions");

    // The backend is there, and how big the state is in Gemma tokens.
    let mut states = States::new();
    let probe = states.fresh();
    let state_tokens = rt.block_on(async {
        let response = client
            .post(format!("{root_url}/tokenize"))
            .timeout(Duration::from_secs(15))
            .json(&json!({"content": probe, "add_special": false}))
            .send()
            .await;
        match response {
            Ok(r) if r.status().is_success() => r
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v["tokens"].as_array().map(Vec::len)),
            Ok(r) => {
                eprintln!("llama-server /tokenize answered {}", r.status());
                None
            }
            Err(e) => {
                eprintln!(
                    "benches/llamacpp: cannot reach llama-server at {root_url} \
                     (SYSTEMONE_LLAMA_URL={llama_url}): {e}"
                );
                std::process::exit(2);
            }
        }
    });
    let state_chars = probe.chars().count();
    let state_tokens_text = state_tokens.map_or("?".to_string(), |t| t.to_string());
    eprintln!("state: {state_chars} characters, {state_tokens_text} Gemma tokens (plain text)");

    let mut service = Service::start(&llama_url);
    let direct = DirectBodies::new(&llama_url);

    // Warm-up: the token-table check, and one state sent both ways; the service's prompt
    // must then come entirely from the cache the direct read just filled.
    let shared = states.fresh();
    let service_url = service.url.clone();
    let (warm_direct, warm_service) = rt.block_on(async {
        let first = post(
            &client,
            &service_url,
            &service_body(&states.fresh(), 1, None),
            SHORT_TIMEOUT,
        )
        .await;
        report_error("warm-up service", &first);
        let d = post(&client, &chat_url, &direct.body(&shared), SHORT_TIMEOUT).await;
        let s = post(
            &client,
            &service_url,
            &service_body(&shared, 1, None),
            SHORT_TIMEOUT,
        )
        .await;
        (d, s)
    });
    report_error("warm-up direct", &warm_direct);
    report_error("warm-up service", &warm_service);
    let same_prompt = warm_direct.ok
        && warm_service.ok
        && warm_service.input == warm_direct.input
        && warm_service.upstream == 1
        && warm_service.cached + 2 >= warm_service.input;
    eprintln!(
        "warm-up, one state both ways: direct {} prompt tokens; service {} prompt tokens, {} cached, {} upstream request(s) -> {}",
        warm_direct.input,
        warm_service.input,
        warm_service.cached,
        warm_service.upstream,
        if same_prompt { "the same prompt" } else { "WARNING: not the same prompt" }
    );

    // 1b. The fixed cost: the warm-up's state again and again, both ways; llama-server then
    // evaluates one token, so what is left is HTTP, JSON and the service's own work.
    let cached_iters = env_usize("BENCH_CACHED_ITERS", 8, 1000);
    let mut cached_direct = Vec::new();
    let mut cached_service = Vec::new();
    if same_prompt {
        let d_body = direct.body(&shared);
        let s_body = service_body(&shared, 1, None);
        for i in 0..cached_iters {
            let bodies = (&d_body[..], &s_body[..]);
            let labels = ["cached direct", "cached service"];
            let (d, s) = pair(&rt, &client, &chat_url, &mut service, bodies, i, labels);
            cached_direct.push(d);
            cached_service.push(s);
        }
        eprintln!(
            "cached: direct {} ms, service {} ms",
            fmt_list(&ok_ms(&cached_direct), 0),
            fmt_list(&ok_ms(&cached_service), 0)
        );
    }

    // 1. Overhead.
    let mut direct_calls = Vec::new();
    let mut service_calls = Vec::new();
    // The time budget: a busy machine gets fewer samples, not a longer run.
    let overhead_until = bench_started + budget.mul_f64(0.30);
    let layouts_until = bench_started + budget.mul_f64(0.60);
    for i in 0..overhead_iters {
        if i >= 3 && Instant::now() >= overhead_until {
            eprintln!("overhead: time budget reached after {i} pairs");
            break;
        }
        let d_body = direct.body(&states.fresh());
        let s_body = service_body(&states.fresh(), 1, None);
        let bodies = (&d_body[..], &s_body[..]);
        let labels = ["direct", "service"];
        let (d, s) = pair(&rt, &client, &chat_url, &mut service, bodies, i, labels);
        eprintln!(
            "overhead {}/{overhead_iters}: direct {:.0} ms ({} evaluated), service {:.0} ms ({} evaluated, {} upstream)",
            i + 1,
            d.ms,
            d.evaluated(),
            s.ms,
            s.evaluated(),
            s.upstream
        );
        direct_calls.push(d);
        service_calls.push(s);
    }

    // 2. Layouts.
    let mut accuracy_calls = Vec::new();
    let mut cost_calls = Vec::new();
    for i in 0..layout_calls {
        if i >= 1 && Instant::now() >= layouts_until {
            eprintln!("layouts: time budget reached after {i} calls each");
            break;
        }
        let order: [&str; 2] = if i % 2 == 0 {
            ["accuracy", "cost"]
        } else {
            ["cost", "accuracy"]
        };
        for layout in order {
            let body = service_body(&states.fresh(), 5, Some(layout));
            let call = rt.block_on(post(&client, &service.url, &body, LONG_TIMEOUT));
            report_error(layout, &call);
            if !call.ok {
                service.revive_if_dead();
            }
            eprintln!(
                "layout {layout} {}/{layout_calls}: {:.0} ms, input {} cached {} evaluated {} upstream {}",
                i + 1,
                call.ms,
                call.input,
                call.cached,
                call.evaluated(),
                call.upstream
            );
            if layout == "accuracy" {
                accuracy_calls.push(call);
            } else {
                cost_calls.push(call);
            }
        }
    }
    let service_exits = std::mem::take(&mut service.exits);
    drop(service);

    // 3. The peer.
    let remaining = budget.saturating_sub(bench_started.elapsed()).as_secs_f64();
    let fits = (remaining / (peer_timeout * peer_modes.len().max(1) as f64)).floor() as usize;
    let peer_calls = peer_calls.min(fits.max(1));
    eprintln!(
        "peer: system-one-adapter under {python}, {peer_calls} call(s) per mode {peer_modes:?}, {peer_timeout} s timeout each"
    );
    let peer = if peer_modes.is_empty() {
        PeerOutcome {
            version: "?".into(),
            runs: Vec::new(),
            failure: Some("BENCH_PEER_MODES names no mode".into()),
        }
    } else {
        run_peer(
            &python,
            &llama_url,
            &peer_modes,
            peer_calls,
            peer_timeout,
            &mut states,
        )
    };
    if let Some(why) = &peer.failure {
        eprintln!("peer: {why}");
    }
    drop(rt);

    // ----------------------------------------------------------------------------------
    // The table
    // ----------------------------------------------------------------------------------
    let d_ms = ok_ms(&direct_calls);
    let s_ms = ok_ms(&service_calls);
    let (d50, d99) = (percentile(&d_ms, 50.0), percentile(&d_ms, 99.0));
    let (s50, s99) = (percentile(&s_ms, 50.0), percentile(&s_ms, 99.0));
    let ratio50 = s50 / d50;
    let ratio99 = s99 / d99;
    let paired: Vec<f64> = direct_calls
        .iter()
        .zip(&service_calls)
        .filter(|(d, s)| d.ok && s.ok)
        .map(|(d, s)| s.ms - d.ms)
        .collect();
    // llama-server's prompt evaluation speed on the direct reads: how busy the machine was.
    let throughput: Vec<f64> = direct_calls
        .iter()
        .filter_map(|c| c.server_ms.map(|s| c.evaluated() as f64 / (s / 1e3)))
        .collect();
    let errors = |calls: &[Call]| calls.iter().filter(|c| !c.ok).count();
    let evaluated = |calls: &[Call]| {
        median_u64(
            &calls
                .iter()
                .filter(|c| c.ok)
                .map(Call::evaluated)
                .collect::<Vec<_>>(),
        )
    };
    let field = |calls: &[Call], f: fn(&Call) -> u64| {
        median_u64(&calls.iter().filter(|c| c.ok).map(f).collect::<Vec<_>>())
    };
    let a_ms = ok_ms(&accuracy_calls);
    let c_ms = ok_ms(&cost_calls);
    let (a50, c50) = (percentile(&a_ms, 50.0), percentile(&c_ms, 50.0));
    let (a_eval, c_eval) = (evaluated(&accuracy_calls), evaluated(&cost_calls));

    println!();
    println!(
        "### systemone on llama.cpp (Gemma 3 270M, {llama_url}): state = plain-text email of {state_chars} characters, {state_tokens_text} Gemma tokens"
    );
    println!();
    println!("| # | measurement | systemone | compared with | ratio | target / note |");
    println!("|---|---|---:|---:|---:|---|");
    println!(
        "| 1 | p50 latency, 1 question × 4 options, {} alternating pairs, fresh state each | {s50:.0} ms (service) | {d50:.0} ms (direct to llama-server) | {ratio50:.3} | ≤ {TARGET_OVERHEAD_RATIO} {}; llama-server evaluated {:.0} tokens/s (median of the direct reads; ~800 on an idle machine) |",
        direct_calls.len(),
        mark(ratio50 <= TARGET_OVERHEAD_RATIO),
        percentile(&throughput, 50.0)
    );
    println!(
        "| 1 | p99 latency (nearest rank: the max of {}) | {s99:.0} ms | {d99:.0} ms | {ratio99:.3} | |",
        s_ms.len().min(d_ms.len())
    );
    println!(
        "| 1 | added latency per pair, service − direct: median (min … max) | {:+.0} ms ({:+.0} … {:+.0}) | | | errors service/direct: {}/{} |",
        percentile(&paired, 50.0),
        percentile(&paired, 0.0),
        percentile(&paired, 100.0),
        errors(&service_calls),
        errors(&direct_calls)
    );
    println!(
        "| 1 | prompt tokens per request: input / evaluated (median) | {:.0} / {:.0} | {:.0} / {:.0} | | same prompt as direct (warm-up check): {} |",
        field(&service_calls, |c| c.input),
        evaluated(&service_calls),
        field(&direct_calls, |c| c.input),
        evaluated(&direct_calls),
        if same_prompt { "yes" } else { "NO" }
    );
    if !cached_direct.is_empty() {
        let (cd, cs) = (ok_ms(&cached_direct), ok_ms(&cached_service));
        let cached_paired: Vec<f64> = cached_direct
            .iter()
            .zip(&cached_service)
            .filter(|(d, s)| d.ok && s.ok)
            .map(|(d, s)| s.ms - d.ms)
            .collect();
        println!(
            "| 1 | p50 latency, the same request repeated ({} pairs; prompt fully cached, 1 token evaluated: the fixed cost) | {:.1} ms | {:.1} ms | {:.3} | added per pair, median: {:+.1} ms |",
            cached_paired.len(),
            percentile(&cs, 50.0),
            percentile(&cd, 50.0),
            percentile(&cs, 50.0) / percentile(&cd, 50.0),
            percentile(&cached_paired, 50.0)
        );
    }
    println!(
        "| 1 | upstream requests per service call (median) / direct response body | {:.0} | {:.0} KB | | 1 = no post-sampling fallback read |",
        field(&service_calls, |c| c.upstream),
        field(&direct_calls, |c| c.bytes as u64) / 1024.0
    );
    println!(
        "| 2 | p50 latency per 5-question call (4 options each), fresh state, cache on | {c50:.0} ms (cost) | {a50:.0} ms (accuracy) | {:.2}× faster | {} + {} calls; errors cost/accuracy: {}/{} |",
        a50 / c50,
        cost_calls.len(),
        accuracy_calls.len(),
        errors(&cost_calls),
        errors(&accuracy_calls)
    );
    println!(
        "| 2 | prompt tokens evaluated per call (input − cached, median) | {c_eval:.0} (cost) | {a_eval:.0} (accuracy) | {:.2}× fewer | the reference's measurement: 2,101 vs 6,395 |",
        a_eval / c_eval
    );
    println!(
        "| 2 | prompt tokens input / cached per call (median) | {:.0} / {:.0} | {:.0} / {:.0} | | upstream requests {:.0} / {:.0} |",
        field(&cost_calls, |c| c.input),
        field(&cost_calls, |c| c.cached),
        field(&accuracy_calls, |c| c.input),
        field(&accuracy_calls, |c| c.cached),
        field(&cost_calls, |c| c.upstream),
        field(&accuracy_calls, |c| c.upstream)
    );
    if let Some(why) = &peer.failure {
        println!(
            "| 3 | peer system-one-adapter | | not run: {} | | |",
            why.replace('|', "/")
        );
    }
    for mode in &peer_modes {
        let runs: Vec<&PeerRun> = peer.runs.iter().filter(|r| &r.mode == mode).collect();
        if runs.is_empty() {
            continue;
        }
        let all: Vec<f64> = runs.iter().map(|r| r.secs * 1e3).collect();
        let good: Vec<f64> = runs.iter().filter(|r| r.ok).map(|r| r.secs * 1e3).collect();
        // Error type → (count, the first run's underlying cause).
        let mut kinds: Vec<(String, usize, Option<String>)> = Vec::new();
        for r in runs.iter().filter(|r| !r.ok) {
            let kind = r.error_type.clone().unwrap_or_else(|| "?".into());
            match kinds.iter_mut().find(|(k, _, _)| *k == kind) {
                Some((_, n, _)) => *n += 1,
                None => kinds.push((kind, 1, r.cause.clone())),
            }
        }
        let failures = if kinds.is_empty() {
            "no failures".to_string()
        } else {
            kinds
                .iter()
                .map(|(k, n, cause)| match cause {
                    Some(c) => format!("{n}× {k} (e.g. {})", c.replace('|', "/")),
                    None => format!("{n}× {k}"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let p50_all = percentile(&all, 50.0);
        let ok_note = if good.is_empty() {
            String::new()
        } else {
            format!("; p50 of the successful: {:.0} ms", percentile(&good, 50.0))
        };
        let label = if mode == "structured" {
            "structured_outputs=True (json_schema → grammar)"
        } else {
            "structured_outputs=False (JSON asked in the prompt)"
        };
        println!(
            "| 3 | p50 latency per 5-question call: peer system-one-adapter {} {label}, {peer_timeout} s timeout | {a50:.0} ms (accuracy) / {c50:.0} ms (cost) | {p50_all:.0} ms (peer, all calls) | {:.2}× / {:.2}× (peer ÷ systemone) | peer succeeded {}/{}: {failures}{ok_note} |",
            peer.version,
            p50_all / a50,
            p50_all / c50,
            good.len(),
            runs.len()
        );
    }
    if !service_exits.is_empty() {
        println!(
            "| ! | the service process exited on its own during the run (started again, at most {MAX_RESTARTS} times; the failed calls count as errors) | {}× | | | first: {} |",
            service_exits.len(),
            service_exits[0].replace('|', "/")
        );
    }
    println!();

    // Raw numbers.
    println!("Raw numbers (ms unless noted):");
    println!(
        "- overhead direct:  {}",
        fmt_list(&direct_calls.iter().map(|c| c.ms).collect::<Vec<_>>(), 1)
    );
    println!(
        "- overhead service: {}",
        fmt_list(&service_calls.iter().map(|c| c.ms).collect::<Vec<_>>(), 1)
    );
    println!(
        "- overhead service − direct per pair: {}",
        fmt_list(&paired, 1)
    );
    println!(
        "- overhead evaluated tokens direct / service: {:?} / {:?}",
        direct_calls.iter().map(Call::evaluated).collect::<Vec<_>>(),
        service_calls
            .iter()
            .map(Call::evaluated)
            .collect::<Vec<_>>()
    );
    println!(
        "- llama-server prompt evaluation during part 1 (direct reads, tokens/s): {}",
        fmt_list(&throughput, 0)
    );
    let transfer: Vec<f64> = direct_calls
        .iter()
        .filter_map(|c| c.server_ms.map(|s| c.ms - s))
        .collect();
    println!(
        "- overhead direct, wall − llama-server's own time (HTTP + body): median {:.1} ms, {}",
        percentile(&transfer, 50.0),
        fmt_list(&transfer, 1)
    );
    println!(
        "- cached (fully cached prompt) direct:  {}",
        fmt_list(&cached_direct.iter().map(|c| c.ms).collect::<Vec<_>>(), 1)
    );
    println!(
        "- cached (fully cached prompt) service: {}",
        fmt_list(&cached_service.iter().map(|c| c.ms).collect::<Vec<_>>(), 1)
    );
    println!(
        "- warm-up (one state both ways): direct {:.1} ms, {} prompt / {} cached; service {:.1} ms, {} input / {} cached",
        warm_direct.ms, warm_direct.input, warm_direct.cached, warm_service.ms, warm_service.input, warm_service.cached
    );
    for (name, calls) in [("accuracy", &accuracy_calls), ("cost", &cost_calls)] {
        let rows: Vec<String> = calls
            .iter()
            .map(|c| {
                format!(
                    "{:.0} ms (input {}, cached {}, evaluated {}, upstream {})",
                    c.ms,
                    c.input,
                    c.cached,
                    c.evaluated(),
                    c.upstream
                )
            })
            .collect();
        println!("- layout {name}: {}", rows.join("; "));
    }
    for (i, r) in peer.runs.iter().enumerate() {
        let tokens = format!(
            "prompt {} / completion {} tokens",
            r.input_tokens.map_or("?".into(), |t| t.to_string()),
            r.output_tokens.map_or("?".into(), |t| t.to_string())
        );
        if r.ok {
            println!(
                "- peer #{} {}: ok in {:.0} ms, {tokens}",
                i + 1,
                r.mode,
                r.secs * 1e3
            );
        } else {
            println!(
                "- peer #{} {}: {} after {:.0} ms, {tokens}: {}{}{}",
                i + 1,
                r.mode,
                r.error_type.as_deref().unwrap_or("?"),
                r.secs * 1e3,
                r.error.as_deref().unwrap_or("").replace('\n', " "),
                r.cause
                    .as_ref()
                    .map(|c| format!(" ({})", c.replace('\n', " ")))
                    .unwrap_or_default(),
                r.text
                    .as_ref()
                    .map(|t| format!(" | model wrote: {:?}", t))
                    .unwrap_or_default()
            );
        }
    }
    for (i, exit) in service_exits.iter().enumerate() {
        println!("- service exit #{}: {exit}", i + 1);
    }
    println!(
        "- whole bench: {:.0} s",
        bench_started.elapsed().as_secs_f64()
    );
}
