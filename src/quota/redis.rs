//! The shared store: one Redis every replica uses (`--redis-url`).
//!
//! Why the `redis` crate with its tokio [`ConnectionManager`]: it is the most used async
//! Redis client for Rust, its manager multiplexes every call of the process over one
//! connection (no pool to size) and reconnects by itself after Redis goes away (the next
//! call after a dropped connection starts the reconnect; calls meanwhile fail fast, which
//! is what the failure policy needs), and its [`Script`] sends `EVALSHA` and loads the
//! script only when Redis answers `NOSCRIPT` (after a restart). `fred` does as much with a
//! larger API and more features than needed here.
//!
//! Every limit check is one script call (one round trip): GCRA per minute (the theoretical
//! arrival time in µs, expiring when it no longer matters) and the daily cap (a counter per
//! key and UTC day with an expiry past midnight), checked and taken atomically; a refusal
//! by either takes nothing. Usage is one script call per request (`HINCRBY` per counter,
//! saturating at Redis's largest integer instead of failing on overflow). A batch line's
//! request id is kept as a marker beside its admission and beside each charge, set in the
//! same script as the count and kept two days, so a line run again after a crash counts and
//! is charged once, as in the embedded store. Keys are
//! `PREFIX:{NAME}:…` with the key's configured name (never the key itself; the braces keep
//! one key's entries in one cluster slot); nothing a caller sent is written.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use redis::aio::ConnectionManager;
use redis::{RedisError, Script, ScriptInvocation};
use tokio::sync::watch;

use super::local::wait_secs;
use super::{
    batch_usage_name, Charge, Checked, KeyQuota, LimitKind, LimitStore, Now, Refusal, StoreError,
    UsageCounts, UsageRow, USAGE_RETENTION_DAYS,
};
use crate::config::ConfigError;
use crate::days::{secs_to_utc_midnight, DAY_SECS};
use crate::secret::Secret;

/// GCRA over one minute plus an optional daily cap, checked and taken in one go.
///
/// KEYS: the rate's arrival time, the day's counter, and for a batch line its admission
/// marker. ARGV: now in µs (0: Redis's own clock), cells, limit per minute (0: none), period
/// in µs, daily cap (0: none), the counter's expiry in s, then for a batch line the day and
/// the marker's expiry in s. Returns {0, used today} taken (or a line admitted already:
/// its marker is there, nothing is counted again); {1, wait µs} rate limited; {2, 0} more
/// cells than the limit; {3, used today} over the cap. A line taken leaves its marker
/// holding the day it was counted on.
const TAKE: &str = r"
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then return {0, 0} end
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local used = 0
if cap > 0 then
  used = tonumber(redis.call('GET', KEYS[2]) or '0')
  if used + n > cap then return {3, used} end
end
if limit > 0 then
  if n > limit then return {2, 0} end
  local interval = math.floor(period / limit)
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  if tat < now then tat = now end
  local new_tat = tat + interval * n
  local allow_at = new_tat - period
  if allow_at > now then return {1, allow_at - now} end
  redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
end
if cap > 0 then
  used = redis.call('INCRBY', KEYS[2], n)
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
end
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[7], 'EX', tonumber(ARGV[8])) end
return {0, used}
";

/// Gives back up to `ARGV[1]` of the day's counter `KEYS[1]` (never below zero, never creating
/// it); returns what is left. For a batch line, `KEYS[2]` is its admission marker (deleted,
/// so the line counts again if it runs again) and `KEYS[3]` the day before's counter, the
/// one given back to when the marker says the line was counted then (`ARGV[2]`).
const REFUND: &str = r"
local counter = KEYS[1]
if KEYS[2] then
  if redis.call('GET', KEYS[2]) == ARGV[2] then counter = KEYS[3] end
  redis.call('DEL', KEYS[2])
end
local used = tonumber(redis.call('GET', counter) or '0')
local n = math.min(used, tonumber(ARGV[1]))
if n > 0 then redis.call('DECRBY', counter, n) end
return used - n
";

/// Adds `ARGV[1..5]` to the usage hash `KEYS[1]`'s fields named `ARGV[7..11]`, each
/// stopping at the largest integer Redis holds (2^63 − 1) where `HINCRBY` would refuse to
/// overflow (a saturated count, never a wrapped or a lost one), and sets the hash's expiry
/// to `ARGV[6]` seconds; any other error is the script's. For a batch line's charge,
/// `KEYS[2]` is its charge marker, set for `ARGV[12]` seconds: a marker already there means
/// the line was charged (before a crash), and nothing is added. Returns 1 added, 0 not.
const ADD_USAGE: &str = r"
if KEYS[2] and not redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[12])) then
  return 0
end
for i = 1, 5 do
  local field = ARGV[6 + i]
  local added = redis.pcall('HINCRBY', KEYS[1], field, ARGV[i])
  if type(added) == 'table' and added.err then
    if not string.find(added.err, 'overflow') then return added end
    redis.call('HSET', KEYS[1], field, '9223372036854775807')
  end
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
return 1
";

/// The usage hash's fields, in [`UsageCounts::to_array`]'s order.
const USAGE_FIELDS: [&str; 5] = [
    "requests",
    "questions",
    "input_tokens",
    "cached_tokens",
    "upstream_requests",
];

/// A minute in µs: the per-minute limits' period.
const MINUTE_MICROS: u64 = 60_000_000;

/// How long a batch line's admission and charge markers are kept: today and the day before,
/// as the embedded store keeps its ids, so a line run again after a crash the next day is
/// still counted once.
const LINE_MARKER_SECS: u64 = 2 * DAY_SECS;

/// The connection, once made: filled by the connecting task, read by every call.
type Slot = watch::Sender<Option<ConnectionManager>>;

/// Limits and usage in Redis.
pub struct RedisStore {
    /// Opens connections; holds the URL (and any password in it).
    client: redis::Client,
    /// Prefix of every key.
    prefix: String,
    /// The bound on one call, also the connection's response timeout.
    timeout: Duration,
    /// The managed connection, `None` until the first connect succeeds.
    slot: Arc<Slot>,
    /// Whether a connect is under way (one at a time).
    connecting: Arc<AtomicBool>,
    /// [`TAKE`].
    take: Script,
    /// [`REFUND`].
    refund: Script,
    /// [`ADD_USAGE`].
    add_usage: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: only the prefix is shown.
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn store_error(e: RedisError) -> StoreError {
    if e.is_timeout() {
        // The connection's own response timeout (set to the same bound) fired first.
        StoreError::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        StoreError::Unavailable(e.category().to_string())
    } else {
        StoreError::Failed(e.category().to_string())
    }
}

impl RedisStore {
    /// A store for `url` (checked here; connected on first use, so the service starts
    /// while Redis is down and the failure policy applies until it is up).
    pub fn open(url: &Secret, prefix: &str, timeout: Duration) -> Result<Self, ConfigError> {
        let client = crate::stores::redis::client(url)?;
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':');
        if prefix.is_empty() || prefix.len() > 64 || !prefix.chars().all(valid) {
            return Err(ConfigError::Invalid(format!(
                "--redis-prefix must be 1 to 64 of A-Z a-z 0-9 - _ . :, got {prefix:?}"
            )));
        }
        Ok(RedisStore {
            client,
            prefix: prefix.to_string(),
            timeout,
            slot: Arc::new(watch::channel(None).0),
            connecting: Arc::new(AtomicBool::new(false)),
            take: Script::new(TAKE),
            refund: Script::new(REFUND),
            add_usage: Script::new(ADD_USAGE),
        })
    }

    /// `PREFIX:{NAME}:rest`.
    fn key(&self, name: &str, rest: &str) -> String {
        format!("{}:{{{name}}}:{rest}", self.prefix)
    }

    /// Starts connecting in the background unless a connect is under way; the task fills
    /// the slot on success. Detached, so a caller's timeout does not cancel it.
    fn start_connect(&self) {
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let (client, slot, connecting) = (
            self.client.clone(),
            self.slot.clone(),
            self.connecting.clone(),
        );
        let config = crate::stores::redis::manager_config(
            Duration::from_millis(250).max(self.timeout),
            self.timeout.max(Duration::from_millis(10)),
            2,
        )
        .set_max_delay(200);
        tokio::spawn(async move {
            match ConnectionManager::new_with_config(client, config).await {
                Ok(manager) => {
                    slot.send_replace(Some(manager));
                    tracing::info!("connected to the Redis limit store");
                }
                Err(e) => tracing::debug!(error = %e.category(), "cannot connect to Redis yet"),
            }
            connecting.store(false, Ordering::Release);
        });
    }

    /// The connection; waits for a connect (bounded by the caller's timeout) when none.
    async fn conn(&self) -> Result<ConnectionManager, StoreError> {
        if let Some(manager) = self.slot.borrow().clone() {
            return Ok(manager);
        }
        let mut filled = self.slot.subscribe();
        self.start_connect();
        loop {
            if let Some(manager) = filled.borrow_and_update().clone() {
                return Ok(manager);
            }
            filled
                .changed()
                .await
                .map_err(|_| StoreError::Unavailable("connection closed".into()))?;
        }
    }

    /// `PREFIX:{NAME}:line:ID`: batch line `line`'s admission marker (the day it was counted
    /// on). The id is the service's request id, never caller text.
    fn line_key(&self, name: &str, line: &str) -> String {
        self.key(name, &format!("line:{line}"))
    }

    /// Runs [`TAKE`] (for batch line `line`, with its admission marker) and turns its answer
    /// into a verdict.
    async fn run_take(
        &self,
        key: &KeyQuota,
        kind: LimitKind,
        questions: usize,
        now: Now,
        line: Option<&str>,
    ) -> Checked {
        let limits = key.limits();
        let (per_minute, cap) = match kind {
            LimitKind::Requests => (limits.requests_per_minute, None),
            _ => (limits.questions_per_minute, limits.daily_questions),
        };
        let limit = per_minute.map_or(0, |l| u64::from(l.get()));
        let clock = if now.server_clock { 0 } else { now.micros };
        let ttl = secs_to_utc_midnight(now.unix_secs()) + 3600;
        let mut call = self.take.prepare_invoke();
        call.key(self.key(&key.name, &format!("rate:{}", kind.as_str())))
            .key(self.key(&key.name, &format!("daily:{}", now.day())))
            .arg(clock)
            .arg(questions)
            .arg(limit)
            .arg(MINUTE_MICROS)
            .arg(cap.unwrap_or(0))
            .arg(ttl);
        if let Some(line) = line {
            call.key(self.line_key(&key.name, line))
                .arg(now.day())
                .arg(LINE_MARKER_SECS);
        }
        let mut conn = self.conn().await?;
        let (status, value): (u64, u64) =
            call.invoke_async(&mut conn).await.map_err(store_error)?;
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        Ok(match status {
            0 => Ok(()),
            1 => Err(Refusal::RateLimited {
                kind,
                limit,
                retry_after: wait_secs(value),
            }),
            2 => Err(Refusal::OverMinuteLimit { questions, limit }),
            _ => Err(Refusal::DailyCap {
                limit: cap.unwrap_or(0),
                used: value,
                questions,
                retry_after: secs_to_utc_midnight(now.unix_secs()),
            }),
        })
    }

    /// Runs [`REFUND`] on `day`'s counter; for batch line `line` also forgetting its
    /// admission marker (and giving back to the day before when it was counted then).
    async fn run_refund(
        &self,
        name: &str,
        day: u64,
        questions: u64,
        line: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut call = self.refund.prepare_invoke();
        call.key(self.key(name, &format!("daily:{day}")))
            .arg(questions);
        if let Some(line) = line {
            let before = day.saturating_sub(1);
            call.key(self.line_key(name, line))
                .key(self.key(name, &format!("daily:{before}")))
                .arg(before);
        }
        let mut conn = self.conn().await?;
        call.invoke_async::<u64>(&mut conn)
            .await
            .map(|_| ())
            .map_err(store_error)
    }

    /// [`ADD_USAGE`]'s call adding `counts` to `name`'s usage on `day`; with `charge` (a batch
    /// line's request id), only if that id's charge marker for `name` is new.
    fn usage_call(
        &self,
        name: &str,
        day: u64,
        counts: UsageCounts,
        charge: Option<&str>,
    ) -> ScriptInvocation<'_> {
        let mut call = self.add_usage.prepare_invoke();
        call.key(self.key(name, &format!("usage:{day}")));
        for value in counts.to_array() {
            // Redis counts in i64: a larger increment is the saturated count already.
            call.arg(value.min(i64::MAX as u64));
        }
        call.arg(USAGE_RETENTION_DAYS * DAY_SECS)
            .arg(&USAGE_FIELDS[..]);
        if let Some(id) = charge {
            call.key(self.key(name, &format!("charged:{id}")))
                .arg(LINE_MARKER_SECS);
        }
        call
    }

    async fn write_usage(
        &self,
        name: &str,
        day: u64,
        counts: UsageCounts,
    ) -> Result<(), StoreError> {
        let call = self.usage_call(name, day, counts, None);
        let mut conn = self.conn().await?;
        call.invoke_async::<()>(&mut conn)
            .await
            .map_err(store_error)
    }

    /// Every charge added to its caller's usage and to its batch counters, each once per line
    /// id: two markers, one beside each hash (so each script touches one caller's keys), set
    /// in the same script as the addition, so a kill between the two leaves the second to the
    /// line's next run. One round trip: the script loaded, then every call, pipelined.
    async fn write_charges(&self, day: u64, charges: &[Charge]) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.load_script(&self.add_usage).ignore();
        for charge in charges {
            let id = Some(charge.id.as_str());
            for name in [charge.name.clone(), batch_usage_name(&charge.name)] {
                pipe.invoke_script(&self.usage_call(&name, day, charge.counts, id))
                    .ignore();
            }
        }
        let mut conn = self.conn().await?;
        pipe.query_async::<()>(&mut conn).await.map_err(store_error)
    }

    async fn read_usage(
        &self,
        names: &[String],
        from: u64,
        to: u64,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let ids: Vec<(&String, u64)> = names
            .iter()
            .flat_map(|n| (from..=to).map(move |d| (n, d)))
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (name, day) in &ids {
            pipe.cmd("HMGET")
                .arg(self.key(name, &format!("usage:{day}")))
                .arg(&USAGE_FIELDS[..]);
        }
        let mut conn = self.conn().await?;
        let values: Vec<Vec<Option<u64>>> =
            pipe.query_async(&mut conn).await.map_err(store_error)?;
        Ok(ids
            .into_iter()
            .zip(values)
            .filter_map(|((name, day), fields)| {
                let mut a = [0u64; 5];
                for (slot, v) in a.iter_mut().zip(fields) {
                    *slot = v.unwrap_or(0);
                }
                let counts = UsageCounts::from_array(a);
                (!counts.is_empty()).then(|| UsageRow {
                    key: name.clone(),
                    day,
                    counts,
                })
            })
            .collect())
    }
}

impl LimitStore for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn remote(&self) -> bool {
        true
    }

    fn take_request<'a>(&'a self, key: &'a Arc<KeyQuota>, now: Now) -> BoxFuture<'a, Checked> {
        self.run_take(key, LimitKind::Requests, 1, now, None)
            .boxed()
    }

    fn take_questions<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        questions: usize,
        now: Now,
    ) -> BoxFuture<'a, Checked> {
        self.run_take(key, LimitKind::Questions, questions, now, None)
            .boxed()
    }

    /// Counted once per line id: the line's admission marker is checked and set in the same
    /// script as the count.
    fn take_line_questions<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        questions: usize,
        now: Now,
        line: &'a str,
    ) -> BoxFuture<'a, Checked> {
        self.run_take(key, LimitKind::Questions, questions, now, Some(line))
            .boxed()
    }

    fn refund<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
        questions: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.run_refund(&key.name, day, questions, None).boxed()
    }

    /// The line's admission marker forgotten and its questions given back to the day it was
    /// counted on, in one script.
    fn refund_line<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
        questions: u64,
        line: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.run_refund(&key.name, day, questions, Some(line))
            .boxed()
    }

    fn record<'a>(
        &'a self,
        name: &'a str,
        day: u64,
        counts: UsageCounts,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.write_usage(name, day, counts).boxed()
    }

    fn charge<'a>(
        &'a self,
        day: u64,
        charges: &'a [Charge],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.write_charges(day, charges).boxed()
    }

    fn usage<'a>(
        &'a self,
        names: &'a [String],
        from: u64,
        to: u64,
    ) -> BoxFuture<'a, Result<Vec<UsageRow>, StoreError>> {
        self.read_usage(names, from, to).boxed()
    }

    fn daily_used<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        async move {
            let mut conn = self.conn().await?;
            redis::cmd("GET")
                .arg(self.key(&key.name, &format!("daily:{day}")))
                .query_async::<Option<u64>>(&mut conn)
                .await
                .map(Option::unwrap_or_default)
                .map_err(store_error)
        }
        .boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            let mut conn = self.conn().await?;
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .map(|_| ())
                .map_err(store_error)
        }
        .boxed()
    }
}
