//! [`Quotas`]: the limit store behind the policy a shared store needs (a bounded time per
//! call, fail open or closed, a back-off after a failure), with its metrics and warnings.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use futures::future::BoxFuture;

use super::clock::{LimitClock, Now};
use super::key::KeyQuota;
use super::refusal::Refusal;
use super::store::{LimitStore, StoreError};
use super::usage::{Charge, UsageCounts, UsageRow};
use super::{embedded, memory, redis};
use crate::config::{ConfigError, FailurePolicy, LimitStoreSettings};
use crate::metrics::Metrics;

/// `Retry-After` of a 503 `system_one_limits_unavailable`: about one reconnect attempt.
pub const UNAVAILABLE_RETRY_SECS: u64 = 2;

/// After a failed call to a remote store, calls fail at once for this long (one probe per
/// interval still goes through and reconnects): an outage then costs each request nothing,
/// instead of the whole timeout per call.
pub const BACKOFF: Duration = Duration::from_millis(250);

/// Why [`Quotas`] refuses a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaError {
    /// A limit said no.
    Refused(Refusal),
    /// The shared store could not answer and the policy is `fail_closed` (or the question,
    /// like reading usage, has no local answer).
    Unavailable { retry_after: u64 },
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
    /// daily cap; what was taken can be given back with [`Quotas::refund`]. `line`: a batch
    /// line's request id, so that a line run again after a crash counts once where the
    /// store keeps ids ([`LimitStore::take_line_questions`]).
    pub async fn admit_questions(
        &self,
        key: &Arc<KeyQuota>,
        questions: usize,
        line: Option<&str>,
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
        let take = match line {
            Some(line) => self.store.take_line_questions(key, questions, now, line),
            None => self.store.take_questions(key, questions, now),
        };
        match self.call("take_questions", take).await {
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
    /// call. A failed refund is logged (the key loses those questions for the day). `line`:
    /// the batch line's request id it was admitted with, forgotten with the refund.
    pub async fn refund(&self, key: &Arc<KeyQuota>, admission: Admission, line: Option<&str>) {
        if admission.questions == 0 {
            return;
        }
        if admission.local {
            key.local.refund(admission.day, admission.questions);
            return;
        }
        let (day, questions) = (admission.day, admission.questions);
        let refund = match line {
            Some(line) => self.store.refund_line(key, day, questions, line),
            None => self.store.refund(key, day, questions),
        };
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

    /// Charges batch lines' usage today (each to its caller's usage and batch counters, kept
    /// as the usage of [`super::batch_usage_name`]`(name)`: a row of the same five counters in every
    /// store, so no store's format changes and a day recorded before batches reads as all
    /// online), in one store call, each line once where the store keeps charge ids
    /// ([`LimitStore::charge`]). An error is returned, not kept for later: the lines stay
    /// pending and are charged when they run again.
    pub async fn charge(&self, charges: &[Charge]) -> Result<(), StoreError> {
        let day = self.now().day();
        self.call("record", self.store.charge(day, charges)).await
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

    /// Usage of `names` on the days `from..=to`, by key then day (a name's batch counters
    /// are the rows of [`super::batch_usage_name`]).
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::quota::{KeyLimits, QuotaError};

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
}
