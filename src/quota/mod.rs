//! Per-key quotas, daily caps and usage records, behind one [`LimitStore`] with three
//! implementations:
//!
//! * [`memory`]: this process's memory (tests, and a service with neither a state
//!   directory nor Redis). Replicas each count on their own; a restart forgets.
//! * [`embedded`]: a `redb` file under `--state-dir` for a single instance: daily counts and
//!   usage survive a restart; per-minute limits stay in memory (a restart forgets at most
//!   a minute of rate).
//! * [`redis`]: one Redis every replica shares (`--redis-url`): per-minute GCRA and the
//!   daily cap are evaluated atomically by one Lua script (`EVALSHA`, one round trip per
//!   check), usage is written in one atomic pipeline per answered request.
//!
//! [`Quotas`] wraps the store with what a shared store needs: a bounded time per call
//! (default 50 ms) and the failure policy (`fail_open`: count in this process and serve;
//! `fail_closed`: 503 `system_one_limits_unavailable`), metrics and a warning at most once
//! a minute. Keys are known here by their configured name only (never the key, never
//! anything a caller sent).
//!
//! Beside `engine/` in the layers (neither uses the other), below `http/`, which
//! authenticates, maps refusals to the error table and calls [`Quotas`]; it uses only
//! `config.rs` and the leaves.

pub mod embedded;
mod local;
pub mod memory;
pub mod redis;

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use serde::Serialize;

use crate::config::{ConfigError, FailurePolicy, LimitStoreSettings};
use crate::metrics::Metrics;

pub use local::LocalLimits;

/// Longest `Retry-After` a per-minute limit answers with.
pub const MAX_RATE_RETRY_SECS: u64 = 60;
/// `Retry-After` of a 503 `system_one_limits_unavailable`: about one reconnect attempt.
pub const UNAVAILABLE_RETRY_SECS: u64 = 2;
/// Seconds in a UTC day.
pub const DAY_SECS: u64 = 86_400;
/// After a failed call to a remote store, calls fail at once for this long (one probe per
/// interval still goes through and reconnects): an outage then costs each request nothing,
/// instead of the whole timeout per call.
pub const BACKOFF: Duration = Duration::from_millis(250);
/// Days a usage record is kept (Redis expiry; the embedded store keeps them all).
pub const USAGE_RETENTION_DAYS: u64 = 400;

/// Seconds from `unix_secs` to the next UTC midnight (1 to 86,400).
pub fn secs_to_utc_midnight(unix_secs: u64) -> u64 {
    DAY_SECS - unix_secs % DAY_SECS
}

/// Whole seconds to wait, at least 1, at most [`MAX_RATE_RETRY_SECS`].
fn retry_secs(wait: Duration) -> u64 {
    (wait.as_secs_f64().ceil() as u64).clamp(1, MAX_RATE_RETRY_SECS)
}

/// The limits configured for one key (each optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLimits {
    /// Requests per minute (also the burst).
    pub requests_per_minute: Option<NonZeroU32>,
    /// Questions per minute (also the burst).
    pub questions_per_minute: Option<NonZeroU32>,
    /// Questions per UTC day.
    pub daily_questions: Option<u64>,
}

/// One key as the stores know it: its configured name and its limits' local state.
#[derive(Debug)]
pub struct KeyQuota {
    /// The configured name (or `key-N`): the store's key, the usage record's key.
    pub name: String,
    /// This process's state of the key's limits.
    pub local: LocalLimits,
}

impl KeyQuota {
    /// A key named `name` with `limits`.
    pub fn new(name: String, limits: KeyLimits) -> Self {
        KeyQuota {
            name,
            local: LocalLimits::new(limits),
        }
    }

    /// The configured numbers.
    pub fn limits(&self) -> &KeyLimits {
        self.local.limits()
    }
}

/// Which limit refused a request (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Requests,
    Questions,
    Daily,
}

impl LimitKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Requests => "requests",
            LimitKind::Questions => "questions",
            LimitKind::Daily => "daily",
        }
    }
}

/// A limit said no. Carries numbers only, never the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A per-minute limit is used up; free again in `retry_after` seconds.
    RateLimited {
        kind: LimitKind,
        limit: u32,
        retry_after: u64,
    },
    /// The request alone has more questions than the key may ask per minute.
    OverMinuteLimit { questions: usize, limit: u32 },
    /// The key's questions for this UTC day are used up (or this request would pass it).
    DailyCap {
        limit: u64,
        used: u64,
        questions: usize,
        retry_after: u64,
    },
}

/// Why a store could not answer (logged without any key or caller content).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No answer within the bound (`--limits-timeout-ms`).
    #[error("the limit store did not answer within --limits-timeout-ms")]
    Timeout,
    #[error("the limit store is unreachable: {0}")]
    Unavailable(String),
    #[error("the limit store failed: {0}")]
    Failed(String),
}

impl StoreError {
    /// The metrics label.
    fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Failed(_) => "error",
        }
    }
}

/// Why [`Quotas`] refuses a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaError {
    /// A limit said no.
    Refused(Refusal),
    /// The shared store could not answer and the policy is `fail_closed` (or the question,
    /// like reading usage, has no local answer).
    Unavailable { retry_after: u64 },
}

/// The wall-clock time the limits are evaluated at.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Microseconds since the Unix epoch (this process's clock, or the test's).
    pub micros: u64,
    /// Whether a shared store should use its own clock for per-minute limits (so replicas
    /// with skewed clocks agree): true unless a test set the time.
    pub server_clock: bool,
}

impl Now {
    /// Whole seconds since the epoch.
    pub fn unix_secs(&self) -> u64 {
        self.micros / 1_000_000
    }
    /// The UTC day number.
    pub fn day(&self) -> u64 {
        self.unix_secs() / DAY_SECS
    }
}

/// Where [`Quotas`] reads the time: the system clock, or one a test sets.
#[derive(Debug, Clone, Default)]
pub enum LimitClock {
    /// `SystemTime::now()`, and the shared store's own clock for per-minute limits.
    #[default]
    System,
    /// Microseconds since the epoch, moved by the test that holds it.
    Manual(Arc<AtomicU64>),
}

impl LimitClock {
    /// The time now.
    pub fn now(&self) -> Now {
        match self {
            LimitClock::System => Now {
                micros: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as u64),
                server_clock: true,
            },
            LimitClock::Manual(micros) => Now {
                micros: micros.load(Ordering::SeqCst),
                server_clock: false,
            },
        }
    }
}

/// Counters of one key on one UTC day: the answered requests and what they used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsageCounts {
    /// Requests answered (200).
    pub requests: u64,
    /// Their questions (documents, for rerank).
    pub questions: u64,
    /// Their `usage.input_tokens`.
    pub input_tokens: u64,
    /// Their `usage.cached_tokens`.
    pub cached_tokens: u64,
    /// Their `usage.upstream_requests`.
    pub upstream_requests: u64,
}

impl UsageCounts {
    /// Adds another record's counts.
    pub fn add(&mut self, other: &UsageCounts) {
        self.requests += other.requests;
        self.questions += other.questions;
        self.input_tokens += other.input_tokens;
        self.cached_tokens += other.cached_tokens;
        self.upstream_requests += other.upstream_requests;
    }

    /// The five counters in the stores' order.
    pub fn to_array(self) -> [u64; 5] {
        [
            self.requests,
            self.questions,
            self.input_tokens,
            self.cached_tokens,
            self.upstream_requests,
        ]
    }

    /// From [`UsageCounts::to_array`]'s order.
    pub fn from_array(a: [u64; 5]) -> Self {
        UsageCounts {
            requests: a[0],
            questions: a[1],
            input_tokens: a[2],
            cached_tokens: a[3],
            upstream_requests: a[4],
        }
    }

    /// Whether every counter is zero.
    pub fn is_empty(&self) -> bool {
        self.to_array() == [0; 5]
    }
}

/// One key's usage on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// The key's configured name.
    pub key: String,
    /// The UTC day number.
    pub day: u64,
    /// What it used.
    pub counts: UsageCounts,
}

/// What a successful question admission took, so that it can be given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The UTC day the questions were counted on.
    pub day: u64,
    /// How many.
    pub questions: u64,
    /// Whether they were counted in this process only (`fail_open`), not in the store.
    pub local: bool,
}

/// A store's answer to a limit check: the store failed, or the limit's verdict.
pub type Checked = Result<Result<(), Refusal>, StoreError>;

/// Where per-key counts live. Object-safe: [`Quotas`] holds one as `Arc<dyn LimitStore>`.
pub trait LimitStore: Send + Sync + fmt::Debug {
    /// `memory`, `embedded` or `redis` (metrics label, `/readyz`).
    fn kind(&self) -> &'static str;
    /// Whether calls leave the process (then [`Quotas`] bounds each by its timeout and
    /// applies the failure policy).
    fn remote(&self) -> bool;
    /// Counts one request against the key's requests per minute.
    fn take_request<'a>(&'a self, key: &'a Arc<KeyQuota>, now: Now) -> BoxFuture<'a, Checked>;
    /// Counts `questions` against the key's questions per minute and daily cap, taking
    /// nothing from either when one refuses.
    fn take_questions<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        questions: usize,
        now: Now,
    ) -> BoxFuture<'a, Checked>;
    /// Gives back `questions` of `day`'s count.
    fn refund<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
        questions: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Adds `counts` to `name`'s usage on `day`.
    fn record<'a>(
        &'a self,
        name: &'a str,
        day: u64,
        counts: UsageCounts,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Usage of `names` on the days `from..=to` (days with no usage left out).
    fn usage<'a>(
        &'a self,
        names: &'a [String],
        from: u64,
        to: u64,
    ) -> BoxFuture<'a, Result<Vec<UsageRow>, StoreError>>;
    /// Questions counted for the key on `day` (tests, the operator).
    fn daily_used<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
    /// Checks that the store answers (`/readyz`).
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// The store's state as `/readyz` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StoreStatus {
    /// `memory`, `embedded` or `redis`.
    pub store: &'static str,
    /// `fail_open` or `fail_closed`.
    pub policy: &'static str,
    /// Whether the store answered its last call (always true in memory).
    pub connected: bool,
    /// Whether requests can be served: connected, or `fail_open`.
    pub ready: bool,
}

/// The limit store behind the policy: what the handlers call.
pub struct Quotas {
    /// Where the counts live.
    store: Arc<dyn LimitStore>,
    /// What to do when a remote store fails.
    policy: FailurePolicy,
    /// Bound on one remote call.
    timeout: Duration,
    /// Where "now" comes from.
    clock: LimitClock,
    /// Store latency, errors and policy decisions.
    metrics: Arc<Metrics>,
    /// Whether the last remote call succeeded.
    connected: std::sync::atomic::AtomicBool,
    /// Time zero of [`Quotas::next_probe_ms`].
    origin: Instant,
    /// Milliseconds after `origin` before which calls fail at once (0: no failure to back
    /// off from).
    next_probe_ms: AtomicU64,
    /// Unix seconds of the last "store unavailable" warning (one a minute at most).
    last_warning: AtomicU64,
    /// Usage that could not be written while the store was down, summed by (key, day)
    /// (so it stays as small as the key list) and written with the next record that
    /// succeeds.
    pending: Mutex<HashMap<(String, u64), UsageCounts>>,
}

impl fmt::Debug for Quotas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quotas")
            .field("store", &self.store.kind())
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Quotas {
    /// The store the settings name: Redis (`--redis-url`, or the registry's `redis_url`),
    /// the embedded file (`--state-dir`), else memory.
    pub fn from_settings(
        settings: &LimitStoreSettings,
        redis_url: Option<&crate::secret::Secret>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ConfigError> {
        let store: Arc<dyn LimitStore> =
            match (redis_url, &settings.state_dir) {
                (Some(_), Some(_)) => return Err(ConfigError::Invalid(
                    "give --redis-url (shared by replicas) or --state-dir (one instance), not both"
                        .into(),
                )),
                (Some(url), None) => Arc::new(redis::RedisStore::open(
                    url,
                    &settings.redis_prefix,
                    settings.timeout(),
                )?),
                (None, Some(dir)) => Arc::new(embedded::EmbeddedStore::open(dir)?),
                (None, None) => Arc::new(memory::MemoryStore::default()),
            };
        Ok(Quotas::new(store, settings, metrics))
    }

    /// Wraps `store` with the settings' policy and timeout.
    pub fn new(
        store: Arc<dyn LimitStore>,
        settings: &LimitStoreSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Quotas {
            store,
            policy: settings.limits_policy,
            timeout: settings.timeout(),
            clock: LimitClock::System,
            metrics,
            connected: std::sync::atomic::AtomicBool::new(true),
            origin: Instant::now(),
            next_probe_ms: AtomicU64::new(0),
            last_warning: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The same, reading the time from `clock` (tests pin the window edges with it).
    pub fn with_clock(mut self, clock: LimitClock) -> Self {
        self.clock = clock;
        self
    }

    /// The time the limits are evaluated at.
    pub fn now(&self) -> Now {
        self.clock.now()
    }

    /// The store's name.
    pub fn store_kind(&self) -> &'static str {
        self.store.kind()
    }

    /// Runs one store call: bounded by the timeout when the store is remote, timed and
    /// counted in the metrics, the store's state updated.
    async fn call<T>(
        &self,
        op: &'static str,
        fut: BoxFuture<'_, Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let kind = self.store.kind();
        if kind == "memory" {
            // Nothing to wait for and nothing that can fail: not worth two histogram
            // observations per request.
            return fut.await;
        }
        if self.store.remote() && op != "ping" && !self.may_call() {
            self.metrics.count_limit_store_error(kind, op, "skipped");
            return Err(StoreError::Unavailable(
                "backing off after a failure".into(),
            ));
        }
        let started = Instant::now();
        let result = if self.store.remote() {
            tokio::time::timeout(self.timeout, fut)
                .await
                .unwrap_or(Err(StoreError::Timeout))
        } else {
            fut.await
        };
        self.metrics
            .observe_limit_store(kind, op, started.elapsed());
        match &result {
            Ok(_) => {
                self.connected.store(true, Ordering::Relaxed);
                self.next_probe_ms.store(0, Ordering::Relaxed);
            }
            Err(e) => {
                self.connected.store(false, Ordering::Relaxed);
                self.next_probe_ms.store(
                    self.millis() + BACKOFF.as_millis() as u64,
                    Ordering::Relaxed,
                );
                self.metrics.count_limit_store_error(kind, op, e.kind());
                self.warn(op, e);
            }
        }
        result
    }

    fn millis(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Whether a call may go to the remote store now: always while it answers; after a
    /// failure, only the first call once [`BACKOFF`] has passed (the probe).
    fn may_call(&self) -> bool {
        let next = self.next_probe_ms.load(Ordering::Relaxed);
        if next == 0 {
            return true;
        }
        let now = self.millis();
        now >= next
            && self
                .next_probe_ms
                .compare_exchange(
                    next,
                    now + BACKOFF.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Logs a store failure at most once a minute (a failing store fails every request).
    fn warn(&self, op: &'static str, e: &StoreError) {
        let now = self.now().unix_secs();
        let last = self.last_warning.load(Ordering::Relaxed);
        if now >= last + 60
            && self
                .last_warning
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                store = self.store.kind(),
                op,
                error = %e,
                policy = self.policy.as_str(),
                "the limit store failed; applying the failure policy (logged once a minute)"
            );
        }
    }

    /// The policy's answer to a failed call: count locally with `local` (fail_open), or
    /// refuse (fail_closed). Counted in the metrics either way.
    fn fall_back<T>(&self, local: impl FnOnce() -> Result<T, Refusal>) -> Result<T, QuotaError> {
        self.metrics
            .count_limit_decision(self.store.kind(), self.policy.as_str());
        match self.policy {
            FailurePolicy::FailOpen => local().map_err(QuotaError::Refused),
            FailurePolicy::FailClosed => Err(QuotaError::Unavailable {
                retry_after: UNAVAILABLE_RETRY_SECS,
            }),
        }
    }

    /// Counts one request against the key's requests per minute.
    pub async fn admit_request(&self, key: &Arc<KeyQuota>) -> Result<(), QuotaError> {
        if key.limits().requests_per_minute.is_none() {
            return Ok(());
        }
        let now = self.now();
        match self
            .call("take_request", self.store.take_request(key, now))
            .await
        {
            Ok(verdict) => verdict.map_err(QuotaError::Refused),
            Err(_) => self.fall_back(|| key.local.take_request()),
        }
    }

    /// Counts a validated request's questions against the key's questions per minute and
    /// daily cap; what was taken can be given back with [`Quotas::refund`].
    pub async fn admit_questions(
        &self,
        key: &Arc<KeyQuota>,
        questions: usize,
    ) -> Result<Admission, QuotaError> {
        let now = self.now();
        let mut admission = Admission {
            day: now.day(),
            questions: questions as u64,
            local: false,
        };
        let limits = key.limits();
        if limits.questions_per_minute.is_none() && limits.daily_questions.is_none() {
            admission.questions = 0;
            return Ok(admission);
        }
        match self
            .call(
                "take_questions",
                self.store.take_questions(key, questions, now),
            )
            .await
        {
            Ok(verdict) => verdict.map(|()| admission).map_err(QuotaError::Refused),
            Err(_) => self.fall_back(|| {
                admission.local = true;
                key.local
                    .take_questions_at(questions, now.unix_secs())
                    .map(|()| admission)
            }),
        }
    }

    /// Gives back an admission's questions: the request was refused before any upstream
    /// call. A failed refund is logged (the key loses those questions for the day).
    pub async fn refund(&self, key: &Arc<KeyQuota>, admission: Admission) {
        if admission.questions == 0 {
            return;
        }
        if admission.local {
            key.local.refund(admission.day, admission.questions);
            return;
        }
        let refund = self.store.refund(key, admission.day, admission.questions);
        let _ = self.call("refund", refund).await;
    }

    /// Adds one answered request's counts to `name`'s usage today. While the store is
    /// down they are kept here and written with the next record that succeeds.
    pub async fn record(&self, name: &str, counts: UsageCounts) {
        let day = self.now().day();
        if self
            .call("record", self.store.record(name, day, counts))
            .await
            .is_err()
        {
            self.keep_pending(name.to_string(), day, counts);
            return;
        }
        let pending = std::mem::take(&mut *self.lock_pending());
        for ((name, day), counts) in pending {
            if self
                .call("record", self.store.record(&name, day, counts))
                .await
                .is_err()
            {
                self.keep_pending(name, day, counts);
            }
        }
    }

    fn keep_pending(&self, name: String, day: u64, counts: UsageCounts) {
        self.lock_pending()
            .entry((name, day))
            .or_default()
            .add(&counts);
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u64), UsageCounts>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Usage of `names` on the days `from..=to`, by key then day.
    pub async fn usage(
        &self,
        names: &[String],
        from: u64,
        to: u64,
    ) -> Result<Vec<UsageRow>, StoreError> {
        self.call("usage", self.store.usage(names, from, to)).await
    }

    /// Questions counted for the key today, by the store.
    pub async fn used_today(&self, key: &Arc<KeyQuota>) -> Result<u64, StoreError> {
        let day = self.now().day();
        self.call("daily_used", self.store.daily_used(key, day))
            .await
    }

    /// The store's state; a remote store is pinged first, so the answer is the store's
    /// state now (and a lost connection is re-established) without waiting for traffic.
    pub async fn status(&self) -> StoreStatus {
        if self.store.remote() {
            let _ = self.call("ping", self.store.ping()).await;
        }
        let connected = self.connected.load(Ordering::Relaxed);
        StoreStatus {
            store: self.store.kind(),
            policy: self.policy.as_str(),
            connected,
            ready: connected || self.policy == FailurePolicy::FailOpen,
        }
    }

    /// Connects a remote store now (at startup) rather than on the first request; the
    /// error, if it cannot, for the startup log (the policy applies until it can).
    pub async fn connect(&self) -> Result<(), StoreError> {
        self.call("ping", self.store.ping()).await
    }

    /// Whether the last call succeeded (`/metrics`).
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }
}

/// `YYYY-MM-DD` of a UTC day number (days since 1970-01-01).
pub fn date_of(day: u64) -> String {
    // Howard Hinnant's civil_from_days, for days ≥ 0.
    let z = day as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// An instant written as Unix milliseconds or a UTC date `YYYY-MM-DD` (its midnight), in
/// Unix milliseconds.
pub fn instant_ms(text: &str) -> Option<i64> {
    text.parse::<i64>()
        .ok()
        .or_else(|| day_of(text).map(|day| day as i64 * (DAY_SECS as i64) * 1000))
}

/// The UTC day number of `YYYY-MM-DD`, or `None` when it is not a real date from 1970 on.
pub fn day_of(date: &str) -> Option<u64> {
    let b = date.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = &date[r];
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // days_from_civil.
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let day = u64::try_from(days).ok()?;
    // 2026-02-31 would roll into March: refuse it.
    (date_of(day) == date).then_some(day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_day_numbers_round_trip() {
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(day_of("1970-01-01"), Some(0));
        assert_eq!(date_of(20_000), "2024-10-04");
        for day in [0, 59, 365, 11_016, 19_782, 20_423, 30_000] {
            assert_eq!(day_of(&date_of(day)), Some(day), "{day}");
        }
        assert_eq!(day_of("2024-02-29"), Some(19_782));
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-1-01",
            "1969-12-31",
            "today",
            "",
        ] {
            assert_eq!(day_of(bad), None, "{bad}");
        }
    }

    /// Errors of `op` by kind, read from the metrics text.
    fn errors(metrics: &Metrics, kind: &str) -> u64 {
        let text = metrics.render(std::iter::empty(), 0);
        let line = format!(
            "systemone_limit_store_errors_total{{kind=\"{kind}\",op=\"take_request\",store=\"redis\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&line)?.parse().ok())
            .unwrap_or(0)
    }

    /// Redis on a port where nothing listens: the first call fails (and `fail_open` counts
    /// locally), the calls right after it are not sent at all (`skipped`), and once the
    /// back-off has passed one call probes Redis again.
    #[tokio::test]
    async fn after_a_failure_calls_back_off_and_one_probes() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a port")
            .port();
        let url = crate::secret::Secret::new(format!("redis://127.0.0.1:{port}"));
        let settings = LimitStoreSettings::default();
        let metrics = Arc::new(Metrics::new());
        let store = redis::RedisStore::open(&url, "t", settings.timeout()).expect("a URL");
        let quotas = Quotas::new(Arc::new(store), &settings, metrics.clone());
        let limits = KeyLimits {
            requests_per_minute: NonZeroU32::new(2),
            ..KeyLimits::default()
        };
        let key = Arc::new(KeyQuota::new("k".into(), limits));
        assert_eq!(quotas.admit_request(&key).await, Ok(()));
        let sent = errors(&metrics, "unavailable") + errors(&metrics, "timeout");
        assert_eq!(sent, 1, "the first call went to Redis");
        assert_eq!(quotas.admit_request(&key).await, Ok(()));
        assert_eq!(errors(&metrics, "skipped"), 1, "the second was not sent");
        // Counted locally meanwhile: the third request of a 2-per-minute key is refused.
        assert!(matches!(
            quotas.admit_request(&key).await,
            Err(QuotaError::Refused(Refusal::RateLimited { .. }))
        ));
        let deadline = Instant::now() + Duration::from_secs(10);
        while errors(&metrics, "unavailable") + errors(&metrics, "timeout") == 1 {
            assert!(Instant::now() < deadline, "no probe after the back-off");
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = quotas.admit_request(&key).await;
        }
        assert!(!quotas.status().await.connected);
    }

    #[test]
    fn usage_counts_add_and_keep_their_order() {
        let mut a = UsageCounts::from_array([1, 2, 3, 4, 5]);
        a.add(&UsageCounts::from_array([10, 20, 30, 40, 50]));
        assert_eq!(a.to_array(), [11, 22, 33, 44, 55]);
        assert!(!a.is_empty());
        assert!(UsageCounts::default().is_empty());
    }
}
