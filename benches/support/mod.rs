//! What the benches share: the `systemone` binary Cargo built, started as a child process on
//! 127.0.0.1:0 (its address read from its `listening` log line); the load driver and what
//! it measures; the ~1,000-character ticket state; environment knobs and table helpers.
//!
//! Each bench includes it with `#[path = "support/mod.rs"] mod support;`. Every bench is a
//! crate of its own that uses a part of this file, hence the one allow below.

#![allow(dead_code)]

pub mod scenario;
pub mod tokens;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use systemone::config::Layout;
use systemone::models::Model;
use systemone::question::{lower_choice, LoweredQuestion};
use systemone::request::{History, ValidRequest};

/// The child's `RUST_LOG`: `listening` is an info line of the binary (target `systemone`);
/// the per-request info lines live in `systemone::http` and stay off.
pub const SERVICE_RUST_LOG: &str =
    "warn,systemone=info,systemone::http=warn,systemone::engine=warn";

/// A duration in seconds from the environment variable `name` (finite, ≥ 0), else `default`.
pub fn env_secs(name: &str, default: f64) -> Duration {
    let secs = std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(default);
    Duration::from_secs_f64(secs)
}

// ---------------------------------------------------------------------------------------
// The service child
// ---------------------------------------------------------------------------------------

/// The child service; killed and reaped when dropped (also while unwinding a panic).
pub struct ServiceGuard {
    pub child: Child,
}

impl ServiceGuard {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServiceGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) the process has used so far.
pub fn cpu_time(pid: u32) -> Duration {
    let (user, system) = cpu_times(pid);
    user + system
}

/// CPU time the process has used so far, (user, system): the kernel's share (system
/// calls, a ledger's fsync) apart from the process's own instructions.
pub fn cpu_times(pid: u32) -> (Duration, Duration) {
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
    (
        Duration::from_millis(ticks(14) * 10),
        Duration::from_millis(ticks(15) * 10),
    )
}

/// Removes ANSI escape sequences (in case the child logs in colour).
pub fn strip_ansi(line: &str) -> String {
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
pub fn parse_listening(line: &str) -> Option<SocketAddr> {
    let line = strip_ansi(line);
    if !line.contains("listening") {
        return None;
    }
    line.split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '=' || c == '}')
        .find_map(|word| word.parse::<SocketAddr>().ok())
}

/// The `systemone` binary Cargo built for this bench.
pub fn built_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_systemone"))
}

/// `systemone serve --listen 127.0.0.1:0` plus `args`, logging with [`SERVICE_RUST_LOG`],
/// without colour, with a ledger of its own ([`own_ledger`]).
pub fn serve_command(args: &[&str]) -> Command {
    serve_command_of(built_binary(), args)
}

/// [`serve_command`] for another build of the service (`binary`), as the benches that set
/// an old binary beside the new one start it.
pub fn serve_command_of(binary: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", SERVICE_RUST_LOG)
        .env("NO_COLOR", "1");
    own_ledger(&mut command);
    command
}

/// Gives a service its own decision ledger: the shipping default (an SQLite file) in a
/// fresh temp dir, never the user's state directory; `SYSTEMONE_LEDGER` set for the bench
/// (`off`, `postgres://…` with `SYSTEMONE_LEDGER_KEY`) is passed on instead. Through the
/// environment, which a baseline binary without a ledger ignores.
pub fn own_ledger(command: &mut Command) {
    if std::env::var_os("SYSTEMONE_LEDGER").is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!(
        "systemone-bench-ledger-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    command.env(
        "SYSTEMONE_LEDGER",
        format!("sqlite:{}", dir.join("ledger.sqlite").display()),
    );
}

/// The `serve` flags for the fake vLLM server at `backend_url`: the vLLM dialect, the golden
/// toy token table and the test model `glm-5.3-flash`.
pub fn fake_backend_flags(backend_url: &str) -> [&str; 8] {
    [
        "--backend",
        "vllm",
        "--backend-url",
        backend_url,
        "--token-table",
        "golden-fake",
        "--model",
        "glm-5.3-flash",
    ]
}

/// `binary` serving in front of the fake vLLM at `backend_url` ([`fake_backend_flags`]) with
/// `extra` flags, started by [`start_service`]. Keys and limit stores come from the flags
/// alone, never from the caller's environment.
pub fn start_on_fake(
    binary: &Path,
    backend_url: &str,
    extra: &[&str],
) -> (ServiceGuard, SocketAddr) {
    let mut command = serve_command_of(binary, &fake_backend_flags(backend_url));
    command.args(extra);
    without_operator_env(&mut command);
    start_service(command, |_, _| {})
}

/// Clears the settings an operator's shell may hold (keys, Redis, state directory), so a
/// measured service is the open, stateless one its flags say.
pub fn without_operator_env(command: &mut Command) {
    for name in [
        "SYSTEMONE_API_KEYS",
        "SYSTEMONE_KEYS_FILE",
        "SYSTEMONE_REDIS_URL",
        "SYSTEMONE_STATE_DIR",
    ] {
        command.env_remove(name);
    }
}

/// Writes a keys file at `path` holding one `[[key]]` per `(name, key)`, each with limits
/// far above what a bench sends (every check is made, none refuses).
pub fn keys_file(path: &Path, keys: &[(String, String)]) -> PathBuf {
    let mut text = String::with_capacity(keys.len() * 200);
    for (name, key) in keys {
        let hex: String = systemone::http::auth::digest(key)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        text.push_str(&format!(
            "[[key]]\nname = \"{name}\"\nsha256 = \"{hex}\"\nrequests_per_minute = 1000000000\n\
             questions_per_minute = 1000000000\ndaily_questions = 9000000000000000000\n\n"
        ));
    }
    std::fs::write(path, text).expect("write the keys file");
    path.to_path_buf()
}

/// Spawns `command` (stdin and stdout closed, stderr piped) and waits up to 30 s for its
/// `listening` line; returns the guard and the address. A thread keeps draining stderr so
/// the child never blocks on a full pipe, and hands every line (ANSI escapes removed) to
/// `each_line` with whether the `listening` line came before it.
pub fn start_service(
    mut command: Command,
    mut each_line: impl FnMut(&str, bool) + Send + 'static,
) -> (ServiceGuard, SocketAddr) {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the systemone binary starts");
    let mut guard = ServiceGuard { child };
    let stderr = guard.child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut early = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let line = strip_ansi(&line);
            each_line(&line, tx.is_none());
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

// ---------------------------------------------------------------------------------------
// Load
// ---------------------------------------------------------------------------------------

/// Hard cap on measured requests per phase (a phase normally stops on time first).
pub const MAX_REQUESTS_PER_PHASE: usize = 2_000_000;

/// A multi-thread runtime of 2 workers named `name`.
pub fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A keep-alive client for load: `max_idle` pooled connections, no Nagle, `timeout` on
/// every request.
pub fn load_client(max_idle: usize, timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(max_idle)
        .tcp_nodelay(true)
        .timeout(timeout)
        .build()
        .expect("client")
}

/// What one phase (or several merged rounds of one path) measured.
#[derive(Default)]
pub struct Phase {
    /// Every request sent, warm-up included (for CPU per request).
    pub all_requests: usize,
    pub errors: usize,
    pub elapsed: Duration,
    /// Sorted latencies of the successful requests.
    pub latencies: Vec<Duration>,
    pub first_error: Option<String>,
}

impl Phase {
    /// Successful requests.
    pub fn requests(&self) -> usize {
        self.latencies.len()
    }

    /// Adds another round of the same path.
    pub fn merge(&mut self, other: Phase) {
        self.all_requests += other.all_requests;
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        self.latencies.sort_unstable();
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    /// Successful requests per second.
    pub fn rate(&self) -> f64 {
        self.requests() as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest-rank percentile `p` in milliseconds (NaN when nothing succeeded).
    pub fn percentile_ms(&self, p: f64) -> f64 {
        self.percentile(p).map_or(f64::NAN, ms)
    }

    /// `self`'s percentile `p` minus `base`'s, in ms with a sign (`–` when they are the
    /// same phase): the latency a configuration adds over the baseline.
    pub fn added_ms(&self, base: &Phase, p: f64) -> String {
        if std::ptr::eq(self, base) {
            "–".to_string()
        } else {
            format!("{:+.3}", self.percentile_ms(p) - base.percentile_ms(p))
        }
    }

    /// Nearest-rank percentile of the latencies (`None` when there are none).
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        nearest_rank(&self.latencies, p)
    }

    /// Prints how many requests failed and the first failure, if any failed.
    pub fn report_errors(&self, what: &str) {
        if let Some(e) = &self.first_error {
            eprintln!("{what}: {} errors; first: {e}", self.errors);
        }
    }
}

/// Sends `request` (cloned for each send) from `concurrency` loops for `warmup`, then for
/// `duration` measured, or until [`MAX_REQUESTS_PER_PHASE`] measured requests have started.
pub async fn drive(
    request: reqwest::RequestBuilder,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> Phase {
    let measure_from = Instant::now() + warmup;
    let stop_at = measure_from + duration;
    let budget = Arc::new(AtomicUsize::new(MAX_REQUESTS_PER_PHASE));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let request = request.try_clone().expect("a request with a plain body");
            let budget = budget.clone();
            tokio::spawn(async move {
                let mut phase = Phase::default();
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
                        let response = request
                            .try_clone()
                            .expect("a request with a plain body")
                            .send()
                            .await?;
                        let status = response.status();
                        let text = response.bytes().await?;
                        Ok::<_, reqwest::Error>((status, text))
                    }
                    .await;
                    let took = sent.elapsed();
                    phase.all_requests += 1;
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
    // Requests still in flight at the stop time finish late; count the real span.
    phase.elapsed = measure_from.elapsed();
    phase
}

/// Measures every configuration at every concurrency level in `rounds` alternating rounds
/// (each round starts one configuration later, so none always runs first, right after the
/// change of level); `measure(config, concurrency)` runs one phase. Returns
/// `phases[config][level]`, the rounds merged.
pub fn alternating_rounds(
    configs: usize,
    levels: &[usize],
    rounds: u32,
    mut measure: impl FnMut(usize, usize) -> Phase,
) -> Vec<Vec<Phase>> {
    let mut phases: Vec<Vec<Phase>> = (0..configs)
        .map(|_| levels.iter().map(|_| Phase::default()).collect())
        .collect();
    for r in 0..rounds as usize {
        for (l, &concurrency) in levels.iter().enumerate() {
            for k in 0..configs {
                let c = (k + r) % configs;
                phases[c][l].merge(measure(c, concurrency));
            }
        }
    }
    phases
}

/// The table cells `p50 c=1 | p99 c=1 | p50 c=64 | p99 c=64 | added …` (four latencies in
/// ms, then each minus the baseline's `base[0]` / `base[1]`).
pub fn latency_cells(c1: &Phase, c64: &Phase, base: &[Phase]) -> String {
    format!(
        "{:.3} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {}",
        c1.percentile_ms(50.0),
        c1.percentile_ms(99.0),
        c64.percentile_ms(50.0),
        c64.percentile_ms(99.0),
        c1.added_ms(&base[0], 50.0),
        c1.added_ms(&base[0], 99.0),
        c64.added_ms(&base[1], 50.0),
        c64.added_ms(&base[1], 99.0),
    )
}

/// The load benchmarks' body: one choice question with four options about a short ticket.
pub fn route_body() -> bytes::Bytes {
    let body = json!({
        "state": {"ticket": 118734, "text": "Our card was charged twice after the upgrade; please refund one charge."},
        "questions": {"route": {"type": "choice", "instructions": "Which queue should this ticket go to?",
            "criteria": {"billing": "Charges, invoices, refunds", "access": "Logins, permissions",
                         "bug": "Something does not work as documented", "other": null}}}
    });
    bytes::Bytes::from(serde_json::to_vec(&body).expect("serialises"))
}

/// A state of about 1,000 characters: a support ticket with some structure.
pub fn ticket_state() -> Value {
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

/// The question asked about [`ticket_state`].
pub const ROUTE_INSTRUCTIONS: &str = "Which queue should this ticket go to?";

/// The four options of the routing question: (label, description).
pub fn route_criteria() -> Vec<(String, Value)> {
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

/// The routing question about [`ticket_state`], with these options.
pub fn route_question(criteria: Vec<(String, Value)>) -> LoweredQuestion {
    lower_choice("route".into(), json!(ROUTE_INSTRUCTIONS), criteria)
}

/// A validated request of the one `question` about `state`, with the defaults (no
/// temperature, the accuracy layout, one order, no images, no history).
pub fn one_question(model: &Arc<Model>, state: &Value, question: LoweredQuestion) -> ValidRequest {
    ValidRequest::reference(
        model.clone(),
        state,
        vec![question],
        None,
        Layout::Accuracy,
        1,
        vec![],
        History::None,
    )
    .expect("a valid reference request")
}

/// The token ids of the model's first `n` labels.
pub fn label_ids(model: &Model, n: usize) -> Vec<u32> {
    let table = model.table.get().expect("a fixed table");
    table.labels[..n].iter().map(|l| l.id).collect()
}

// ---------------------------------------------------------------------------------------
// Numbers and tables
// ---------------------------------------------------------------------------------------

/// Nearest-rank percentile of sorted `values` (`None` when empty).
pub fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A target's verdict in a table.
pub fn mark(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "MISS"
    }
}

/// The CPUs this machine offers (0 when unknown).
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}
