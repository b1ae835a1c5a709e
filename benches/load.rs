//! End-to-end load: `systemone` binaries side by side in front of one fake vLLM server.
//!
//! * The fake runs in this process on its own multi-thread runtime, with no added latency.
//! * **new** is the binary Cargo built (`CARGO_BIN_EXE_systemone`); **base** is the binary
//!   at `LOAD_BASE_BIN` (`scripts/bench-load-ab.sh` builds the base commit's in a temporary
//!   worktree and sets it). Both run at once as children on `127.0.0.1:0`, and every
//!   measurement alternates between them (each round starts with the other one), so a change
//!   is judged as a ratio on the same noisy machine. Without `LOAD_BASE_BIN` only new runs.
//!   `LOAD_NEW_BIN` runs another binary as new (two older commits side by side, or a copy
//!   kept apart from the `target/release/systemone` a later build overwrites).
//! * Scenarios: 1 question × 4 options, 5 questions × 4 options, 1 question × 150 options
//!   (two upstream requests: 128 ids per read), each at 1, 16 and 64 callers.
//! * Per row and binary: **service CPU per answer** (utime + stime of the child from
//!   `/proc/<pid>/stat` over its phases, warm-ups included, divided by the questions
//!   answered), **peak RSS** (`VmHWM`, reset through `/proc/<pid>/clear_refs` before each
//!   phase, so it is the row's own peak), **upstream requests per answer** (the fake's
//!   count) and latency. At 1 question × 4 options the exact upstream body is also sent
//!   straight to the fake: *added* latency is the service percentile minus that one.
//! * `LOAD_LOGS=quiet,info` runs each binary twice more with `RUST_LOG=info` (the
//!   default's one summary line per request) and prints what that logging costs.
//!
//! Targets are printed next to the numbers, never asserted.
//!
//! `scripts/bench-load-ab.sh [BASE_COMMIT]`, or `LOAD_BASE_BIN=… cargo bench --bench load`
//! Knobs (environment): `LOAD_SECS` (measured seconds per binary and row, default 3, split
//! over `LOAD_ROUNDS` rounds, default 3), `LOAD_WARMUP_SECS` (per round, default 0.3), `LOAD_LEVELS` (default
//! `1,16,64`), `LOAD_SCENARIOS` (names, default all: `1x4,5x4,1x150`), `LOAD_LOGS`
//! (`quiet` and/or `info`; default `quiet`: warnings plus the startup lines),
//! `LOAD_SERVICE_ARGS` (extra `serve` flags, split on whitespace), `LOAD_LEDGERS` (the
//! decision ledgers to run each binary with, e.g. `off,sqlite,postgres`: one child per binary
//! and ledger, every one alternating with the others; `sqlite` is a fresh file in a temp
//! dir, `postgres` a fresh database in the server at `LOAD_POSTGRES_URL` (a URL naming its
//! `postgres` database, default `SYSTEMONE_POSTGRES_URL_FOR_TESTS`); prints what each ledger
//! adds over `off` for the same binary, and the kernel's part of each child's CPU (`stime`:
//! system calls, fsync); unset: each binary's default, a fresh SQLite file),
//! `LOAD_CALLERS` (`key,token`: one child per binary and caller kind, each with a keys
//! file holding one key and a `[jwt]` section on a JWKS file (`support::tokens`); the
//! callers of a `key` child send the key, those of a `token` child one ES256 token (sent
//! again, as clients do: the verified-token cache answers after the first); prints what a
//! token caller adds over a key caller, issue 40's goal ≤ 10 µs per request at 64 callers;
//! unset: an open service, no bearer),
//! `LOAD_VARIANTS` (`name=WORDS;name=WORDS…`: one child of the new binary per variant, each
//! started with its words: `serve` flags, or `NAME=value` environment variables; `{otlp}`
//! in them is the URL of an OTLP/HTTP sink this bench runs, which answers 200 to every
//! export and keeps nothing; e.g. `plain=;traced=--otlp-traces-endpoint {otlp}
//! OTEL_TRACES_SAMPLER=always_on`; base runs once without them; prints each variant's CPU per
//! answer and its ratio to the first variant's),
//! `LOAD_FLOOR=1` (adds two
//! children, the bare proxies of `benches/floor/`: on sockets, and through axum and reqwest,
//! each sending upstream exactly the bodies the new binary sent for the same caller body;
//! prints the floor any tokio service pays per row, and what those libraries add to it,
//! beside the services' CPU per answer; they run on `serve`'s default runtime, or as
//! `LOAD_FLOOR_RUNTIME=current_thread|multi_thread` says).

// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_server.rs"]
mod fake_server;
// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_vllm.rs"]
mod fake_vllm;
#[path = "floor/mod.rs"]
mod floor;
#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use fake_vllm::FakeVllm;
use support::scenario::{Scenario, SCENARIOS};
use support::{
    cpu_times, drive, env_secs, fake_backend_flags, label_ids, mark, one_question, route_criteria,
    route_question, ticket_state, Phase, ServiceGuard, SERVICE_RUST_LOG,
};
use systemone::backend::vllm::VllmBackend;
use systemone::backend::ReadRequest;
use systemone::models::tokens::TokenTable;
use systemone::models::Model;
use systemone::request::prompt::plan;

const MODEL: &str = "glm-5.3-flash";
const LEVELS: [usize; 3] = [1, 16, 64];
/// Each row alternates the binaries (and the direct path) over this many rounds by default
/// (`LOAD_ROUNDS`), so drift in the machine's state (other work, frequency) hits every side
/// alike; more, shorter rounds follow faster drift.
const ROUNDS: usize = 3;
/// No single request may take longer than this; keeps every phase bounded.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

// Targets of issue 28 (printed, not asserted): what a ledger may add over `off`.
const TARGET_LEDGER_ADDED_P50_MS: f64 = 1.0;
const TARGET_LEDGER_CPU_RATIO: f64 = 1.25;
/// The ledger key of the PostgreSQL children (a shared database needs one).
const BENCH_LEDGER_KEY: &str = "bench-ledger-key-0123456789abcdef";

// Targets of issue 14 (printed, not asserted), as new ÷ base.
const TARGET_CPU_RATIO: f64 = 0.5;
const TARGET_CPU_RATIO_150: f64 = 0.35;
const TARGET_LOG_SHARE: f64 = 0.05;
const TARGET_RSS_MB: f64 = 30.0;
/// What a token caller may add over a key caller, per request (issue 40).
const TARGET_TOKEN_ADDED_US: f64 = 10.0;

/// One service child: which binary, which logging.
struct Config {
    /// For a floor: the file of upstream bodies per caller body ([`floor::Plan`]).
    floor_plan: Option<PathBuf>,
    /// `base`, `new`, `floor` or `floor-libs` (this bench binary as a bare proxy of
    /// [`floor`]: on sockets, or through axum and reqwest).
    binary: &'static str,
    path: PathBuf,
    /// `quiet` or `info`.
    log: String,
    /// The ledger (`LOAD_LEDGERS`): its name (`default`, `off`, `sqlite`, `postgres`) and
    /// the `SYSTEMONE_LEDGER` value to start with (`None`: [`support::own_ledger`]).
    ledger: (String, Option<String>),
    /// `LOAD_CALLERS`: the caller kind (`key`, `token`), the keys file and the bearer
    /// its callers send; `None`: an open service.
    caller: Option<(&'static str, PathBuf, String)>,
    /// `LOAD_VARIANTS`: the variant's name and words (`None`: no variants, or base).
    variant: Option<(String, String)>,
}

impl Config {
    fn name(&self) -> String {
        let name = match self.ledger.0.as_str() {
            "default" => format!("{}/{}", self.binary, self.log),
            ledger => format!("{}/{ledger}/{}", self.binary, self.log),
        };
        let name = match &self.caller {
            Some((kind, ..)) => format!("{name}/{kind}"),
            None => name,
        };
        match &self.variant {
            Some((variant, _)) => format!("{name}/{variant}"),
            None => name,
        }
    }

    /// Starts this binary against `backend_url` (`otlp`: the sink's URL, for `{otlp}`);
    /// returns the guard and its address.
    fn start(&self, backend_url: &str, otlp: &str) -> (ServiceGuard, SocketAddr) {
        if let Some(plan) = &self.floor_plan {
            let mut command = std::process::Command::new(&self.path);
            command.arg(floor::FLAG);
            if self.binary == "floor-libs" {
                command.arg(floor::LIBS);
            }
            command.arg(backend_url).arg(plan);
            return support::start_service(command, |_, _| {});
        }
        let extra_args = std::env::var("LOAD_SERVICE_ARGS").unwrap_or_default();
        let mut command = std::process::Command::new(&self.path);
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(fake_backend_flags(backend_url))
            // The 150-option question is ~17 k bytes, estimated as as many tokens.
            .args(["--max-question-tokens", "32768"])
            .args(extra_args.split_whitespace())
            .args(
                self.caller.iter().flat_map(|(_, file, _)| {
                    [std::ffi::OsStr::new("--keys-file"), file.as_os_str()]
                }),
            )
            .env("NO_COLOR", "1");
        let words = self
            .variant
            .as_ref()
            .map_or("", |(_, words)| words.as_str());
        for word in words.split_whitespace().map(|w| w.replace("{otlp}", otlp)) {
            match word.split_once('=') {
                Some((name, value)) if is_env_name(name) => command.env(name, value),
                _ => command.arg(word),
            };
        }
        command.env(
            "RUST_LOG",
            if self.log == "info" {
                "info"
            } else {
                SERVICE_RUST_LOG
            },
        );
        match &self.ledger.1 {
            Some(target) => {
                command
                    .env("SYSTEMONE_LEDGER", target)
                    .env("SYSTEMONE_LEDGER_KEY", BENCH_LEDGER_KEY);
            }
            None => support::own_ledger(&mut command),
        }
        support::start_service(command, |_, _| {})
    }
}

/// `NAME` of a `NAME=value` word of `LOAD_VARIANTS` is an environment variable's
/// (`OTEL_TRACES_SAMPLER`), not a flag's value.
fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// `LOAD_VARIANTS`' `(name, words)` pairs; `[None]` when unset.
fn variants() -> Vec<Option<(String, String)>> {
    let text = std::env::var("LOAD_VARIANTS").unwrap_or_default();
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

/// An OTLP/HTTP sink for `{otlp}` in `LOAD_VARIANTS`, on the current runtime: answers 200
/// to every `POST /v1/traces` and counts the exports, their bytes, spans and attributes
/// (that spans really left the services, and what an export holds), keeping nothing. Its URL.
async fn otlp_sink(seen: Arc<OtlpSeen>) -> String {
    let export = move |body: axum::body::Bytes| {
        let _counted = seen.exports.enter();
        seen.bytes.fetch_add(body.len(), Ordering::Relaxed);
        seen.count(&body);
        std::future::ready(axum::http::StatusCode::OK)
    };
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(export));
    format!("http://{}/v1/traces", fake_server::serve(app).await)
}

/// What the OTLP sink received.
#[derive(Default)]
struct OtlpSeen {
    exports: fake_server::Recorder,
    bytes: AtomicUsize,
    spans: AtomicUsize,
    attributes: AtomicUsize,
}

impl OtlpSeen {
    /// Counts the spans and their attributes of one export (protobuf, decoded).
    fn count(&self, body: &[u8]) {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use prost::Message;
        let Ok(export) = ExportTraceServiceRequest::decode(body) else {
            return;
        };
        let spans = export
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans);
        let (mut count, mut attributes) = (0, 0);
        for span in spans {
            count += 1;
            attributes += span.attributes.len();
        }
        self.spans.fetch_add(count, Ordering::Relaxed);
        self.attributes.fetch_add(attributes, Ordering::Relaxed);
    }
}

/// The ledgers `LOAD_LEDGERS` names, each with the `SYSTEMONE_LEDGER` of one child (a
/// fresh file or database per child: `children` of them); `[default]` when unset.
fn ledgers(names: Option<Vec<String>>, children: usize) -> Vec<(String, Vec<Option<String>>)> {
    let Some(names) = names.filter(|n| !n.is_empty()) else {
        return vec![("default".to_string(), vec![None; children])];
    };
    names
        .into_iter()
        .map(|name| {
            let targets = (0..children)
                .map(|_| match name.as_str() {
                    "off" => "off".to_string(),
                    "sqlite" => {
                        let dir = std::env::temp_dir().join(format!(
                            "systemone-bench-ledger-{}-{}",
                            std::process::id(),
                            uuid::Uuid::new_v4().simple()
                        ));
                        format!("sqlite:{}", dir.join("ledger.sqlite").display())
                    }
                    "postgres" => postgres_database(),
                    other => panic!("LOAD_LEDGERS: {other} is not off, sqlite or postgres"),
                })
                .map(Some)
                .collect();
            (name, targets)
        })
        .collect()
}

/// A fresh database in the PostgreSQL at `LOAD_POSTGRES_URL` (else
/// `SYSTEMONE_POSTGRES_URL_FOR_TESTS`); its URL.
fn postgres_database() -> String {
    use sqlx::{Connection, Executor};
    let admin = std::env::var("LOAD_POSTGRES_URL")
        .or_else(|_| std::env::var("SYSTEMONE_POSTGRES_URL_FOR_TESTS"))
        .expect("LOAD_LEDGERS=…postgres needs LOAD_POSTGRES_URL (scripts/start-postgres.sh)");
    let name = format!("bench_ledger_{}", uuid::Uuid::new_v4().simple());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .expect("LOAD_POSTGRES_URL accepts connections");
        conn.execute(&*format!("CREATE DATABASE {name}"))
            .await
            .expect("create database");
    });
    let base = admin.rsplit_once('/').expect("a URL with a database").0;
    format!("{base}/{name}")
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

/// Resets `pid`'s peak RSS to its current RSS (Linux ≥ 4.0); false when not allowed.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// The vLLM body the service sends upstream for the 1 × 4 scenario, rendered by the library.
fn direct_body(base_url: &str) -> Vec<u8> {
    let pool =
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool");
    let backend = || VllmBackend::new(pool.clone(), base_url, MODEL.into(), None, 128);
    let model = Arc::new(Model::new(
        MODEL,
        Arc::new(backend()),
        TokenTable::load("golden-fake").expect("golden-fake table"),
    ));
    let req = one_question(&model, &ticket_state(), route_question(route_criteria()));
    let asks = plan(&req);
    let ids = label_ids(&model, 4);
    let table = model.table.get().expect("a fixed table");
    let read = ReadRequest {
        content: &asks[0][0].content,
        prefix: &table.prefix,
        allowed_ids: &ids,
        read_ids: &ids,
        chained: false,
        routing: None,
        cache_salt: None,
    };
    serde_json::to_vec(&backend().body(&read)).expect("serialises")
}

/// The CPU-per-answer target for a scenario, as a ratio to base.
fn target_ratio(s: &Scenario) -> f64 {
    if s.options >= 150 {
        TARGET_CPU_RATIO_150
    } else {
        TARGET_CPU_RATIO
    }
}

/// One binary's measurements of one row, rounds merged.
#[derive(Default)]
struct Measured {
    phase: Phase,
    cpu: Duration,
    upstream: usize,
    /// The highest peak RSS of its phases (MiB).
    peak_mb: f64,
    /// The ledger's commits in its phases: (rows, commits), from its `/metrics`.
    commits: (f64, f64),
    /// The part of `cpu` spent in the kernel (`stime`).
    system: Duration,
}

impl Measured {
    /// Questions answered, warm-ups included (what the CPU time covers).
    fn answers(&self, s: &Scenario) -> f64 {
        (self.phase.all_requests * s.questions).max(1) as f64
    }
    fn cpu_us_per_answer(&self, s: &Scenario) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.answers(s)
    }
    fn system_us_per_answer(&self, s: &Scenario) -> f64 {
        self.system.as_secs_f64() * 1e6 / self.answers(s)
    }
    fn upstream_per_answer(&self, s: &Scenario) -> f64 {
        self.upstream as f64 / self.answers(s)
    }
    /// Records made durable per commit (SQLite: per fsync of the WAL).
    fn rows_per_commit(&self) -> f64 {
        self.commits.0 / self.commits.1.max(1.0)
    }
}

/// `systemone_ledger_batch_rows`' sum and count at the service whose `url` this is (zero
/// without a ledger), read over a plain HTTP/1.0 GET of `/metrics`.
fn ledger_commits(url: &str) -> (f64, f64) {
    use std::io::{Read, Write};
    let rest = url.trim_start_matches("http://");
    let addr = rest.split('/').next().unwrap_or(rest);
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0.0, 0.0);
    };
    let _ = write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let value = |name: &str| {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    (
        value("systemone_ledger_batch_rows_sum"),
        value("systemone_ledger_batch_rows_count"),
    )
}

/// A running service of one [`Config`].
struct Running {
    config: Config,
    guard: ServiceGuard,
    url: String,
}

/// What the run needs from the environment.
struct Knobs {
    warmup: Duration,
    /// Measured time of one round.
    round: Duration,
    rounds: usize,
    levels: Vec<usize>,
    scenarios: Vec<Scenario>,
    configs: Vec<Config>,
    /// The ledgers' names, in `LOAD_LEDGERS` order (`[default]` when unset).
    ledgers: Vec<String>,
    /// `LOAD_FLOOR=1`: run the two floors of [`floor`] too.
    floors: bool,
}

/// The caller kinds `LOAD_CALLERS` names (`key`, `token`), each with the keys file and
/// the bearer its callers send; `[None]` (an open service) when unset.
fn callers(names: Option<Vec<String>>) -> Vec<Option<(&'static str, PathBuf, String)>> {
    let kinds: Vec<&'static str> = ["key", "token"]
        .into_iter()
        .filter(|k| names.iter().flatten().any(|n| n == k))
        .collect();
    if kinds.is_empty() {
        return vec![None];
    }
    let tokens = support::tokens::BenchTokens::new();
    kinds
        .into_iter()
        .map(|kind| {
            let bearer = match kind {
                "key" => support::tokens::KEY.to_string(),
                _ => tokens.token("load-caller@example.com"),
            };
            Some((kind, tokens.keys_file.clone(), format!("Bearer {bearer}")))
        })
        .collect()
}

fn knobs() -> Knobs {
    let list = |name: &str| -> Option<Vec<String>> {
        std::env::var(name).ok().map(|v| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
    };
    let rounds = std::env::var("LOAD_ROUNDS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(ROUNDS);
    let levels: Vec<usize> = list("LOAD_LEVELS")
        .map(|l| l.iter().filter_map(|c| c.parse().ok()).collect::<Vec<_>>())
        .map(|l| l.into_iter().filter(|c| (1..=4096).contains(c)).collect())
        .filter(|l: &Vec<usize>| !l.is_empty())
        .unwrap_or_else(|| LEVELS.to_vec());
    let scenarios: Vec<Scenario> = list("LOAD_SCENARIOS")
        .map(|names| {
            SCENARIOS
                .into_iter()
                .filter(|s| names.iter().any(|n| n == s.name))
                .collect()
        })
        .filter(|s: &Vec<Scenario>| !s.is_empty())
        .unwrap_or_else(|| SCENARIOS.to_vec());
    let logs = list("LOAD_LOGS")
        .map(|l| {
            l.into_iter()
                .filter(|l| l == "quiet" || l == "info")
                .collect()
        })
        .filter(|l: &Vec<String>| !l.is_empty())
        .unwrap_or_else(|| vec!["quiet".to_string()]);
    let base = std::env::var_os("LOAD_BASE_BIN").map(PathBuf::from);
    match &base {
        Some(b) if !b.is_file() => panic!("LOAD_BASE_BIN={} is not a file", b.display()),
        Some(b) => eprintln!("base binary: {}", b.display()),
        None => eprintln!("LOAD_BASE_BIN is not set: measuring the new binary only"),
    }
    let mut binaries = Vec::new();
    if let Some(b) = &base {
        binaries.push(("base", b.clone(), None));
    }
    let new = std::env::var_os("LOAD_NEW_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_systemone")),
        PathBuf::from,
    );
    if !new.is_file() {
        panic!("LOAD_NEW_BIN={} is not a file", new.display());
    }
    for variant in variants() {
        binaries.push(("new", new.clone(), variant));
    }
    let callers = callers(list("LOAD_CALLERS"));
    let ledgers = ledgers(
        list("LOAD_LEDGERS"),
        binaries.len() * logs.len() * callers.len(),
    );
    let mut configs = Vec::new();
    for (ledger, targets) in &ledgers {
        let mut targets = targets.iter();
        for log in &logs {
            for (binary, path, variant) in &binaries {
                for caller in &callers {
                    configs.push(Config {
                        floor_plan: None,
                        binary,
                        path: path.clone(),
                        log: log.clone(),
                        ledger: (ledger.clone(), targets.next().cloned().flatten()),
                        caller: caller.clone(),
                        variant: variant.clone(),
                    });
                }
            }
        }
    }
    Knobs {
        warmup: env_secs("LOAD_WARMUP_SECS", 0.3),
        round: env_secs("LOAD_SECS", 3.0) / rounds as u32,
        rounds,
        levels,
        scenarios,
        configs,
        ledgers: ledgers.into_iter().map(|(name, _)| name).collect(),
        floors: std::env::var("LOAD_FLOOR").is_ok_and(|v| v == "1"),
    }
}

fn main() {
    // `cargo bench` passes `--bench` (and maybe a filter); the only argument read here is
    // the floor's, when this binary is started again as the bare proxy.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == floor::FLAG) {
        let libs = args.get(2).is_some_and(|a| a == floor::LIBS);
        let [base_url, plan] = &args[args.len() - 2..] else {
            panic!(
                "{} [{}] <backend url> <plan file>",
                floor::FLAG,
                floor::LIBS
            );
        };
        floor::run(base_url, std::path::Path::new(plan), libs);
        return;
    }
    let knobs = knobs();
    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);

    let otlp_seen = Arc::new(OtlpSeen::default());
    let otlp = fake_rt.block_on(otlp_sink(otlp_seen.clone()));
    let start = |config: Config| {
        let (guard, addr) = config.start(&fake.base_url(), &otlp);
        eprintln!("{} (pid {}) at {addr}", config.name(), guard.pid());
        Running {
            config,
            guard,
            url: format!("http://{addr}/v1/systemone"),
        }
    };
    let mut services: Vec<Running> = knobs.configs.into_iter().map(start).collect();
    let client_rt = support::runtime("load-client");
    let client = support::load_client(256, REQUEST_TIMEOUT);
    let bearers: std::collections::HashMap<String, String> = services
        .iter()
        .filter_map(|s| Some((s.url.clone(), s.config.caller.as_ref()?.2.clone())))
        .collect();
    let post = |url: &str, body: &[u8]| {
        let request = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_vec());
        match bearers.get(url) {
            Some(bearer) => request.header("authorization", bearer),
            None => request,
        }
    };
    let direct_url = format!("{}/chat/completions", fake.base_url());
    let direct_body = direct_body(&fake.base_url());
    let bodies: Vec<Vec<u8>> = knobs.scenarios.iter().map(Scenario::body).collect();
    sanity_check(&client_rt, &fake, &services, &bodies, &direct_body, &post);
    let floor_plan = knobs.floors.then(|| {
        let new = services.iter().find(|s| s.config.binary == "new");
        let plan = client_rt.block_on(capture_plan(&fake, &new.expect("new").url, &bodies, &post));
        let path =
            std::env::temp_dir().join(format!("systemone-floor-{}.json", std::process::id()));
        std::fs::write(&path, serde_json::to_vec(&plan).expect("json")).expect("plan written");
        path
    });
    for binary in ["floor", "floor-libs"].into_iter().filter(|_| knobs.floors) {
        services.push(start(Config {
            floor_plan: floor_plan.clone(),
            binary,
            path: std::env::current_exe().expect("this bench's own path"),
            log: "quiet".to_string(),
            ledger: ("off".to_string(), Some("off".to_string())),
            caller: None,
            variant: None,
        }));
    }
    eprintln!(
        "fake vLLM at {}; per row and side {} rounds of {:.1} s warm-up + {:.1} s measured",
        fake.base_url(),
        knobs.rounds,
        knobs.warmup.as_secs_f64(),
        knobs.round.as_secs_f64()
    );

    let rows = knobs.scenarios.len() * knobs.levels.len();
    let mut measured: Vec<Vec<Measured>> = (0..rows)
        .map(|_| services.iter().map(|_| Measured::default()).collect())
        .collect();
    let mut direct: Vec<Phase> = (0..rows).map(|_| Phase::default()).collect();
    let run = |request, concurrency| {
        client_rt.block_on(drive(request, concurrency, knobs.warmup, knobs.round))
    };
    // Rows one after another (so a row's peak RSS is not the heap an earlier, larger row
    // left behind: glibc keeps what it grew), and within a row the rounds, each starting
    // with the next binary, so drift in the machine's state hits every side alike.
    for (si, s) in knobs.scenarios.iter().enumerate() {
        for (li, &concurrency) in knobs.levels.iter().enumerate() {
            let row = si * knobs.levels.len() + li;
            for r in 0..knobs.rounds {
                if s.name == "1x4" {
                    direct[row].merge(run(post(&direct_url, &direct_body), concurrency));
                }
                for k in 0..services.len() {
                    let c = (k + r) % services.len();
                    let pid = services[c].guard.pid();
                    if !reset_peak(pid) && row == 0 && r == 0 {
                        eprintln!(
                            "WARNING: cannot reset the peak RSS of pid {pid}: peaks are cumulative"
                        );
                    }
                    let commits_before = ledger_commits(&services[c].url);
                    let (user_before, system_before) = cpu_times(pid);
                    let up_before = fake.state.chat.requests();
                    let phase = run(post(&services[c].url, &bodies[si]), concurrency);
                    let m = &mut measured[row][c];
                    let (user, system) = cpu_times(pid);
                    m.cpu += (user + system).saturating_sub(user_before + system_before);
                    m.system += system.saturating_sub(system_before);
                    let commits_after = ledger_commits(&services[c].url);
                    m.commits.0 += commits_after.0 - commits_before.0;
                    m.commits.1 += commits_after.1 - commits_before.1;
                    m.upstream += fake.state.chat.requests() - up_before;
                    m.peak_mb = m.peak_mb.max(memory(pid).1);
                    m.phase.merge(phase);
                }
            }
            eprintln!("row {} of {rows} done", row + 1);
        }
    }
    for (row, per_service) in measured.iter().enumerate() {
        for (m, s) in per_service.iter().zip(&services) {
            m.phase
                .report_errors(&format!("row {row} {}", s.config.name()));
        }
    }
    let table = Table {
        ledgers: &knobs.ledgers,
        knobs_levels: &knobs.levels,
        scenarios: &knobs.scenarios,
        services: &services,
        measured: &measured,
        direct: &direct,
    };
    table.print(knobs.round * knobs.rounds as u32);
    drop(services);
    let exports = otlp_seen.exports.requests();
    if exports > 0 {
        let bytes = otlp_seen.bytes.load(Ordering::Relaxed);
        let spans = otlp_seen.spans.load(Ordering::Relaxed);
        let attributes = otlp_seen.attributes.load(Ordering::Relaxed);
        println!(
            "\nThe OTLP sink received {exports} exports, {:.1} MB: {spans} spans ({:.0} bytes \
             and {:.1} attributes a span, {:.0} spans an export).",
            bytes as f64 / 1e6,
            bytes as f64 / spans.max(1) as f64,
            attributes as f64 / spans.max(1) as f64,
            spans as f64 / exports as f64,
        );
    }
    if let Some(plan) = floor_plan {
        let _ = std::fs::remove_file(plan);
    }
    drop(client_rt);
    drop(fake_rt);
}

/// What the floors send: for each scenario, the upstream bodies the new service sent for
/// it, keyed by the caller body's length (each scenario's body has its own).
async fn capture_plan(
    fake: &FakeVllm,
    new_url: &str,
    bodies: &[Vec<u8>],
    post: &impl Fn(&str, &[u8]) -> reqwest::RequestBuilder,
) -> floor::Plan {
    let mut plan = floor::Plan::new();
    for body in bodies {
        // Kept from here on, the bodies before forgotten.
        fake.set_keep_bodies(true);
        let _ = post(new_url, body).send().await;
        let upstream = fake.chat_bodies().iter().map(Value::to_string).collect();
        plan.push((body.len(), upstream));
    }
    fake.set_keep_bodies(false);
    plan
}

/// Each service answers each scenario; at 1 × 4 it sends upstream exactly the direct body.
fn sanity_check(
    client_rt: &tokio::runtime::Runtime,
    fake: &FakeVllm,
    services: &[Running],
    bodies: &[Vec<u8>],
    direct_body: &[u8],
    post: &impl Fn(&str, &[u8]) -> reqwest::RequestBuilder,
) {
    client_rt.block_on(async {
        for s in services {
            for body in bodies {
                let response = post(&s.url, body)
                    .send()
                    .await
                    .expect("the service answers");
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                if !status.is_success() {
                    eprintln!("WARNING: {} answered {status}: {text}", s.config.name());
                }
            }
        }
        fake.set_keep_bodies(true);
        if let (Some(s), Some(body)) = (services.first(), bodies.first()) {
            let _ = post(&s.url, body).send().await;
            let sent = fake.chat_bodies();
            let want: Value = serde_json::from_slice(direct_body).expect("json");
            if sent.len() != 1 || sent[0] != want {
                eprintln!(
                    "WARNING: the service sent {} upstream bodies, not exactly the direct body; \
                     added latency compares different requests",
                    sent.len()
                );
            }
        }
        fake.set_keep_bodies(false);
    });
}

/// The measurements, printed as Markdown.
struct Table<'a> {
    /// The ledgers' names; the other tables compare the first one's children.
    ledgers: &'a [String],
    knobs_levels: &'a [usize],
    scenarios: &'a [Scenario],
    services: &'a [Running],
    measured: &'a [Vec<Measured>],
    direct: &'a [Phase],
}

impl Table<'_> {
    /// The index of the service of `binary` with logging `log` (and the first ledger).
    fn find(&self, binary: &str, log: &str) -> Option<usize> {
        let ledger = self.ledgers.first().map_or("default", String::as_str);
        self.find_ledger(binary, log, ledger)
    }

    fn find_ledger(&self, binary: &str, log: &str, ledger: &str) -> Option<usize> {
        self.services.iter().position(|s| {
            s.config.binary == binary
                && s.config.log == log
                && (s.config.ledger.0 == ledger || s.config.binary.starts_with("floor"))
        })
    }

    fn print(&self, measured_secs: Duration) {
        println!();
        println!(
            "### systemone load vs zero-latency fake vLLM, {:.1} s measured per row and side, {} CPUs shared by client, fake and services",
            measured_secs.as_secs_f64(),
            support::cpus()
        );
        for log in ["quiet", "info"] {
            if let Some(new) = self.find("new", log) {
                self.print_log(log, self.find("base", log), new);
            }
        }
        if let (Some(floor), Some(libs), Some(new)) = (
            self.find("floor", "quiet"),
            self.find("floor-libs", "quiet"),
            self.find("new", "quiet"),
        ) {
            self.print_floor([floor, libs], new, self.find("base", "quiet"));
        }
        if self.ledgers.iter().any(|l| l == "off") && self.ledgers.len() > 1 {
            self.print_ledgers();
        }
        self.print_callers();
        self.print_variants();
        if let (Some(quiet), Some(info)) = (self.find("new", "quiet"), self.find("new", "info")) {
            self.print_logging_cost(
                quiet,
                info,
                self.find("base", "quiet"),
                self.find("base", "info"),
            );
        }
    }

    fn rows(&self) -> impl Iterator<Item = (usize, &Scenario, usize)> + '_ {
        self.scenarios.iter().enumerate().flat_map(move |(si, s)| {
            self.knobs_levels
                .iter()
                .enumerate()
                .map(move |(li, &c)| (si * self.knobs_levels.len() + li, s, c))
        })
    }

    /// One table of new (and base, with ratios) under one logging setting.
    fn print_log(&self, log: &str, base: Option<usize>, new: usize) {
        println!();
        println!(
            "#### logging `{log}`: base = `LOAD_BASE_BIN`, new = this tree; ratio = new ÷ base"
        );
        println!();
        println!(
            "| scenario | callers | CPU µs/answer base | new | ratio (≤ {TARGET_CPU_RATIO}, ≤ {TARGET_CPU_RATIO_150} at 150) \
             | answers/s base | new | p50 ms base | new | added p50 ms base | new \
             | peak RSS MB base | new (< {TARGET_RSS_MB:.0}) | upstream/answer base | new | errors base/new |"
        );
        println!(
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (row, s, callers) in self.rows() {
            let n = &self.measured[row][new];
            let b = base.map(|b| &self.measured[row][b]);
            let target = target_ratio(s);
            let ratio = b.map(|b| n.cpu_us_per_answer(s) / b.cpu_us_per_answer(s));
            let cell = |f: &dyn Fn(&Measured) -> String| b.map_or("–".to_string(), f);
            let added = |m: &Measured| {
                if s.name == "1x4" {
                    format!(
                        "{:+.3}",
                        m.phase.percentile_ms(50.0) - self.direct[row].percentile_ms(50.0)
                    )
                } else {
                    "–".to_string()
                }
            };
            let answers_rate = |m: &Measured| m.phase.rate() * s.questions as f64;
            println!(
                "| {} | {callers} | {} | {:.1} | {} | {} | {:.0} | {} | {:.3} | {} | {} | {} | {:.1} {} | {} | {:.2} | {}/{} |",
                s.label(),
                cell(&|b| format!("{:.1}", b.cpu_us_per_answer(s))),
                n.cpu_us_per_answer(s),
                ratio.map_or("–".to_string(), |r| format!("{r:.3} {}", mark(r <= target))),
                cell(&|b| format!("{:.0}", answers_rate(b))),
                answers_rate(n),
                cell(&|b| format!("{:.3}", b.phase.percentile_ms(50.0))),
                n.phase.percentile_ms(50.0),
                cell(&added),
                added(n),
                cell(&|b| format!("{:.1}", b.peak_mb)),
                n.peak_mb,
                if callers == 64 { mark(n.peak_mb < TARGET_RSS_MB) } else { "" },
                cell(&|b| format!("{:.2}", b.upstream_per_answer(s))),
                n.upstream_per_answer(s),
                b.map_or("–".to_string(), |b| b.phase.errors.to_string()),
                n.phase.errors,
            );
        }
        if self.direct.iter().any(|d| d.requests() > 0) {
            let cells: Vec<String> = self
                .rows()
                .filter(|(_, s, _)| s.name == "1x4")
                .map(|(row, _, c)| format!("c={c} {:.3} ms", self.direct[row].percentile_ms(50.0)))
                .collect();
            println!();
            println!(
                "Direct round trip to the fake (p50, the 1 × 4 upstream body): {}. Added = service p50 − that.",
                cells.join(", ")
            );
        }
    }

    /// The floors beside the services (quiet logging): what is left to
    /// cut above the I/O any tokio service pays and above what axum and reqwest add to it,
    /// and whether half of base is below them.
    fn print_floor(&self, [floor, libs]: [usize; 2], new: usize, base: Option<usize>) {
        println!();
        println!(
            "#### the floors (benches/floor/): bare proxies doing only the service's I/O, on sockets and through axum + reqwest; quiet logging"
        );
        println!();
        println!(
            "| scenario | callers | CPU µs/answer floor | floor axum+reqwest | new | base | target × base | floor ÷ base | axum+reqwest floor ÷ base | upstream/answer floors | errors floors |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (row, s, callers) in self.rows() {
            let m = |i: usize| &self.measured[row][i];
            let cpu = |i: usize| m(i).cpu_us_per_answer(s);
            let b = base.map(cpu);
            let cell = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}"));
            let share = |i: usize| b.map_or("–".to_string(), |b| format!("{:.3}", cpu(i) / b));
            println!(
                "| {} | {callers} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {:.2} / {:.2} | {} / {} |",
                s.label(),
                cpu(floor),
                cpu(libs),
                cpu(new),
                cell(b),
                cell(b.map(|b| b * target_ratio(s))),
                share(floor),
                share(libs),
                m(floor).upstream_per_answer(s),
                m(libs).upstream_per_answer(s),
                m(floor).phase.errors,
                m(libs).phase.errors,
            );
        }
    }

    /// What each ledger adds over `off` for the same binary (quiet logging): CPU per
    /// answer as a ratio, and the p50 and p99 it adds.
    fn print_ledgers(&self) {
        println!();
        println!(
            "#### what the decision ledger adds: each binary with `LOAD_LEDGERS` against itself with the ledger off; quiet logging"
        );
        println!();
        println!(
            "| scenario | callers | binary | ledger | CPU µs/answer | of it kernel | ÷ off (≤ {TARGET_LEDGER_CPU_RATIO}) | answers/s | p50 ms | added p50 ms (≤ {TARGET_LEDGER_ADDED_P50_MS} at 64) | p99 ms | added p99 ms | records per commit | errors |"
        );
        println!("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (row, s, callers) in self.rows() {
            for binary in ["base", "new"] {
                let Some(off) = self.find_ledger(binary, "quiet", "off") else {
                    continue;
                };
                let off = &self.measured[row][off];
                for ledger in self.ledgers {
                    let Some(i) = self.find_ledger(binary, "quiet", ledger) else {
                        continue;
                    };
                    let m = &self.measured[row][i];
                    let is_off = ledger == "off";
                    let ratio = m.cpu_us_per_answer(s) / off.cpu_us_per_answer(s);
                    let added = m.phase.percentile_ms(50.0) - off.phase.percentile_ms(50.0);
                    let cell = |text: String| if is_off { "–".to_string() } else { text };
                    println!(
                        "| {} | {callers} | {binary} | {ledger} | {:.1} | {:.1} | {} | {:.0} | {:.3} | {} | {:.3} | {} | {} | {} |",
                        s.label(),
                        m.cpu_us_per_answer(s),
                        m.system_us_per_answer(s),
                        cell(format!("{ratio:.2} {}", mark(ratio <= TARGET_LEDGER_CPU_RATIO))),
                        m.phase.rate() * s.questions as f64,
                        m.phase.percentile_ms(50.0),
                        cell(format!(
                            "{added:+.3}{}",
                            if callers == 64 {
                                format!(" {}", mark(added <= TARGET_LEDGER_ADDED_P50_MS))
                            } else {
                                String::new()
                            }
                        )),
                        m.phase.percentile_ms(99.0),
                        cell(m.phase.added_ms(&off.phase, 99.0)),
                        cell(format!("{:.1}", m.rows_per_commit())),
                        m.phase.errors,
                    );
                }
            }
        }
    }

    /// What a token caller adds over a key caller, per binary (quiet logging, the first
    /// ledger): CPU per request and p50.
    fn print_callers(&self) {
        let child = |binary: &str, kind: &str| {
            self.services.iter().position(|s| {
                s.config.binary == binary
                    && s.config.log == "quiet"
                    && s.config.caller.as_ref().is_some_and(|c| c.0 == kind)
            })
        };
        let pairs: Vec<(&str, usize, usize)> = ["base", "new"]
            .into_iter()
            .filter_map(|b| Some((b, child(b, "key")?, child(b, "token")?)))
            .collect();
        if pairs.is_empty() {
            return;
        }
        println!();
        println!("#### what a signed token adds over an API key (`LOAD_CALLERS=key,token`); quiet logging");
        println!();
        println!(
            "| scenario | callers | binary | CPU µs/request key | token | added µs/request (≤ {TARGET_TOKEN_ADDED_US} at 64) | answers/s key | token | p50 ms key | token | errors key/token |"
        );
        println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (row, s, callers) in self.rows() {
            for &(binary, key, token) in &pairs {
                let (k, t) = (&self.measured[row][key], &self.measured[row][token]);
                let per_request = |m: &Measured| m.cpu_us_per_answer(s) * s.questions as f64;
                let added = per_request(t) - per_request(k);
                let goal = if callers == 64 {
                    format!(" {}", mark(added <= TARGET_TOKEN_ADDED_US))
                } else {
                    String::new()
                };
                println!(
                    "| {} | {callers} | {binary} | {:.1} | {:.1} | {added:+.1}{goal} | {:.0} | {:.0} | {:.3} | {:.3} | {}/{} |",
                    s.label(),
                    per_request(k),
                    per_request(t),
                    k.phase.rate() * s.questions as f64,
                    t.phase.rate() * s.questions as f64,
                    k.phase.percentile_ms(50.0),
                    t.phase.percentile_ms(50.0),
                    k.phase.errors,
                    t.phase.errors,
                );
            }
        }
    }

    /// Each `LOAD_VARIANTS` child of the new binary against the first one of its ledger
    /// (quiet logging): CPU per answer and its ratio, and base's beside them.
    fn print_variants(&self) {
        let variants: Vec<usize> = (0..self.services.len())
            .filter(|&i| self.services[i].config.variant.is_some())
            .filter(|&i| self.services[i].config.log == "quiet")
            .collect();
        if variants.len() < 2 {
            return;
        }
        println!();
        println!("#### the new binary's `LOAD_VARIANTS`, each against the first variant of its ledger; quiet logging");
        println!();
        println!("| scenario | callers | child | CPU µs/answer | ÷ first variant | ÷ base | answers/s | p50 ms | errors |");
        println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
        for (row, s, callers) in self.rows() {
            for &i in &variants {
                let ledger = &self.services[i].config.ledger.0;
                let first = variants
                    .iter()
                    .find(|&&f| self.services[f].config.ledger.0 == *ledger)
                    .copied()
                    .unwrap_or(i);
                let cpu = |i: usize| self.measured[row][i].cpu_us_per_answer(s);
                let base = self.find_ledger("base", "quiet", ledger);
                let m = &self.measured[row][i];
                println!(
                    "| {} | {callers} | {} | {:.1} | {:.3} | {} | {:.0} | {:.3} | {} |",
                    s.label(),
                    self.services[i].config.name(),
                    cpu(i),
                    cpu(i) / cpu(first),
                    base.map_or("–".to_string(), |b| format!("{:.3}", cpu(i) / cpu(b))),
                    m.phase.rate() * s.questions as f64,
                    m.phase.percentile_ms(50.0),
                    m.phase.errors,
                );
            }
        }
    }

    /// What `RUST_LOG=info` costs over quiet logging, as a share of CPU per answer.
    fn print_logging_cost(
        &self,
        quiet: usize,
        info: usize,
        base_quiet: Option<usize>,
        base_info: Option<usize>,
    ) {
        println!();
        println!(
            "#### what the default `info` logging costs: (info − quiet) ÷ info CPU per answer"
        );
        println!();
        println!(
            "| scenario | callers | base | new (≤ {:.0}%) |",
            TARGET_LOG_SHARE * 100.0
        );
        println!("|---|---:|---:|---:|");
        for (row, s, callers) in self.rows() {
            let share = |q: usize, i: usize| {
                let (q, i) = (&self.measured[row][q], &self.measured[row][i]);
                1.0 - q.cpu_us_per_answer(s) / i.cpu_us_per_answer(s)
            };
            let new = share(quiet, info);
            let base = match (base_quiet, base_info) {
                (Some(q), Some(i)) => format!("{:.1}%", share(q, i) * 100.0),
                _ => "–".to_string(),
            };
            println!(
                "| {} | {callers} | {base} | {:.1}% {} |",
                s.label(),
                new * 100.0,
                mark(new <= TARGET_LOG_SHARE)
            );
        }
    }
}
