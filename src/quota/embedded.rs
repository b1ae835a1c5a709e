//! The embedded store for a single instance: `limits.redb` under `--state-dir`.
//!
//! Why `redb`: pure Rust (no C library to build or link, unlike SQLite through
//! `rusqlite`), ACID with copy-on-write pages, so a crash or kill mid-write leaves the last
//! committed count; typed tables, one writer at a time (which makes "check the cap, take
//! the rate, add" one transaction without any locking of ours); and its file lock refuses a
//! second process on the same directory instead of letting two count apart.
//!
//! Daily counts and usage are on disk (each admission one durable commit); the per-minute
//! limits stay in the key's [`super::LocalLimits`] (a restart forgets at most a minute of
//! rate). Calls run on tokio's blocking pool: a commit waits for the disk.

use std::path::Path;
use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt};
use redb::{Database, ReadableTable, Table, TableDefinition};

use super::local::check_cap;
use super::{
    batch_usage_name, Charge, Checked, KeyQuota, LimitStore, Now, StoreError, UsageCounts, UsageRow,
};
use crate::config::ConfigError;

/// (key name, UTC day) → questions counted.
const DAILY: TableDefinition<(&str, u64), u64> = TableDefinition::new("daily");
/// (key name, UTC day) → (requests, questions, input tokens, cached tokens, upstream
/// requests).
const USAGE: TableDefinition<(&str, u64), UsageTuple> = TableDefinition::new("usage");
/// (UTC day, request id) of every batch line charged ([`LimitStore::charge`]): a line runs
/// again only within its batch's 24 h window, so the ids of today and yesterday are all a
/// charge is looked up in, and older ones are dropped.
const CHARGED: TableDefinition<(u64, &str), ()> = TableDefinition::new("charged");

/// (UTC day, request id) of every batch line admitted ([`LimitStore::take_line_questions`]):
/// a line run again after a crash, within its batch's 24 h window, is found here (today's
/// or yesterday's) and not counted against the daily cap again; older ones are dropped.
const ADMITTED: TableDefinition<(u64, &str), ()> = TableDefinition::new("admitted");

/// The file's name under the state directory.
pub const FILE_NAME: &str = "limits.redb";

/// Daily counts and usage in a `redb` file.
#[derive(Clone)]
pub struct EmbeddedStore {
    /// The open database (its file is locked while this process runs).
    db: Arc<Database>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmbeddedStore")
    }
}

fn failed(e: impl std::fmt::Display) -> StoreError {
    StoreError::Failed(e.to_string())
}

impl EmbeddedStore {
    /// Opens (or creates) `dir/limits.redb`, creating `dir` when missing. Errors name the
    /// directory and the reason (another process holding the file, permissions).
    pub fn open(dir: &Path) -> Result<Self, ConfigError> {
        let err = |reason: String| {
            ConfigError::Invalid(format!("--state-dir {}: {reason}", dir.display()))
        };
        let db = crate::stores::redb::open(&dir.join(FILE_NAME)).map_err(|e| err(e.to_string()))?;
        let txn = db.begin_write().map_err(|e| err(e.to_string()))?;
        txn.open_table(DAILY).map_err(|e| err(e.to_string()))?;
        txn.open_table(USAGE).map_err(|e| err(e.to_string()))?;
        txn.commit().map_err(|e| err(e.to_string()))?;
        Ok(EmbeddedStore { db: Arc::new(db) })
    }

    /// Runs `f` with the database on the blocking pool.
    fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let db = self.db.clone();
        async move {
            tokio::task::spawn_blocking(move || f(&db))
                .await
                .map_err(failed)?
        }
        .boxed()
    }
}

/// In one write transaction: the cap checked, the per-minute rate taken, the count added
/// (and a batch line's id kept, or, when it is kept already, nothing taken: the line was
/// counted when it first ran); a refusal aborts it, so nothing is taken.
fn take_questions(
    db: &Database,
    key: &KeyQuota,
    questions: usize,
    now: Now,
    line: Option<&str>,
) -> Checked {
    let txn = db.begin_write().map_err(failed)?;
    if let Some(line) = line {
        if !keep_line(&txn, now.day(), line)? {
            txn.abort().map_err(failed)?;
            return Ok(Ok(()));
        }
    }
    let verdict = {
        let mut table = txn.open_table(DAILY).map_err(failed)?;
        let id = (key.name.as_str(), now.day());
        let used = table.get(id).map_err(failed)?.map_or(0, |v| v.value());
        let verdict = key
            .limits()
            .daily_questions
            .map_or(Ok(()), |cap| {
                check_cap(cap, used, questions, now.unix_secs())
            })
            .and_then(|()| key.local.take_question_rate(questions));
        if verdict.is_ok() {
            table.insert(id, used + questions as u64).map_err(failed)?;
        }
        verdict
    };
    match verdict {
        Ok(()) => txn.commit().map_err(failed)?,
        Err(_) => txn.abort().map_err(failed)?,
    }
    Ok(verdict)
}

/// Keeps batch line `line`'s id as admitted on `day` (and drops ids older than the day
/// before), in `txn`; false when it was admitted already (today or the day before).
fn keep_line(txn: &redb::WriteTransaction, day: u64, line: &str) -> Result<bool, StoreError> {
    let mut admitted = txn.open_table(ADMITTED).map_err(failed)?;
    if admitted_on(&admitted, day, line)?.is_some() {
        return Ok(false);
    }
    admitted.insert((day, line), ()).map_err(failed)?;
    admitted
        .retain_in(..(day.saturating_sub(1), ""), |_, ()| false)
        .map_err(failed)?;
    Ok(true)
}

/// The day (`day` or the one before) batch line `line` was admitted on, if it was.
fn admitted_on(
    admitted: &Table<'_, (u64, &'static str), ()>,
    day: u64,
    line: &str,
) -> Result<Option<u64>, StoreError> {
    for day in [day, day.saturating_sub(1)] {
        if admitted.get((day, line)).map_err(failed)?.is_some() {
            return Ok(Some(day));
        }
    }
    Ok(None)
}

/// Gives `questions` of `day`'s count back to `name`, in `txn`.
fn give_back(
    txn: &redb::WriteTransaction,
    name: &str,
    day: u64,
    questions: u64,
) -> Result<(), StoreError> {
    let mut table = txn.open_table(DAILY).map_err(failed)?;
    let used = table
        .get((name, day))
        .map_err(failed)?
        .map_or(0, |v| v.value());
    table
        .insert((name, day), used.saturating_sub(questions))
        .map_err(failed)?;
    Ok(())
}

impl LimitStore for EmbeddedStore {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    fn remote(&self) -> bool {
        false
    }

    fn take_request<'a>(&'a self, key: &'a Arc<KeyQuota>, _now: Now) -> BoxFuture<'a, Checked> {
        futures::future::ready(Ok(key.local.take_request())).boxed()
    }

    fn take_questions<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        questions: usize,
        now: Now,
    ) -> BoxFuture<'a, Checked> {
        let key = key.clone();
        self.blocking(move |db| take_questions(db, &key, questions, now, None))
    }

    fn take_line_questions<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        questions: usize,
        now: Now,
        line: &'a str,
    ) -> BoxFuture<'a, Checked> {
        let key = key.clone();
        let line = line.to_string();
        self.blocking(move |db| take_questions(db, &key, questions, now, Some(&line)))
    }

    fn refund<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
        questions: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let name = key.name.clone();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(failed)?;
            give_back(&txn, &name, day, questions)?;
            txn.commit().map_err(failed)
        })
    }

    /// The line's id forgotten and its questions given back to the day it was counted on
    /// (`day`, or the day before when it was first admitted then), in one transaction.
    fn refund_line<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
        questions: u64,
        line: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let name = key.name.clone();
        let line = line.to_string();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(failed)?;
            let counted_on = {
                let mut admitted = txn.open_table(ADMITTED).map_err(failed)?;
                let counted_on = admitted_on(&admitted, day, &line)?;
                if let Some(on) = counted_on {
                    admitted.remove((on, line.as_str())).map_err(failed)?;
                }
                counted_on.unwrap_or(day)
            };
            give_back(&txn, &name, counted_on, questions)?;
            txn.commit().map_err(failed)
        })
    }

    fn record<'a>(
        &'a self,
        name: &'a str,
        day: u64,
        counts: UsageCounts,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let name = name.to_string();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(failed)?;
            add_usage(
                &mut txn.open_table(USAGE).map_err(failed)?,
                &name,
                day,
                &counts,
            )?;
            txn.commit().map_err(failed)
        })
    }

    /// In one write transaction (one commit for a group of lines): each charge whose id is
    /// not held yet, added to its caller's usage and batch counters, its id kept.
    fn charge<'a>(
        &'a self,
        day: u64,
        charges: &'a [Charge],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let charges = charges.to_vec();
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(failed)?;
            {
                let mut charged = txn.open_table(CHARGED).map_err(failed)?;
                let mut usage = txn.open_table(USAGE).map_err(failed)?;
                let yesterday = day.saturating_sub(1);
                for charge in &charges {
                    let id = charge.id.as_str();
                    if charged.get((day, id)).map_err(failed)?.is_some()
                        || charged.get((yesterday, id)).map_err(failed)?.is_some()
                    {
                        continue;
                    }
                    charged.insert((day, id), ()).map_err(failed)?;
                    add_usage(&mut usage, &charge.name, day, &charge.counts)?;
                    let batch = batch_usage_name(&charge.name);
                    add_usage(&mut usage, &batch, day, &charge.counts)?;
                }
                charged
                    .retain_in(..(yesterday, ""), |_, ()| false)
                    .map_err(failed)?;
            }
            txn.commit().map_err(failed)
        })
    }

    fn usage<'a>(
        &'a self,
        names: &'a [String],
        from: u64,
        to: u64,
    ) -> BoxFuture<'a, Result<Vec<UsageRow>, StoreError>> {
        let names = names.to_vec();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(failed)?;
            let table = txn.open_table(USAGE).map_err(failed)?;
            let mut rows = Vec::new();
            for name in &names {
                for entry in table
                    .range((name.as_str(), from)..=(name.as_str(), to))
                    .map_err(failed)?
                {
                    let (id, value) = entry.map_err(failed)?;
                    let counts = from_tuple(value.value());
                    if !counts.is_empty() {
                        rows.push(UsageRow {
                            key: name.clone(),
                            day: id.value().1,
                            counts,
                        });
                    }
                }
            }
            Ok(rows)
        })
    }

    fn daily_used<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let name = key.name.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(failed)?;
            let table = txn.open_table(DAILY).map_err(failed)?;
            let used = table
                .get((name.as_str(), day))
                .map_err(failed)?
                .map_or(0, |v| v.value());
            Ok(used)
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        futures::future::ready(Ok(())).boxed()
    }
}

type UsageTuple = (u64, u64, u64, u64, u64);

/// `counts` added to `name`'s usage on `day`, in `table`'s transaction.
fn add_usage(
    table: &mut Table<'_, (&'static str, u64), UsageTuple>,
    name: &str,
    day: u64,
    counts: &UsageCounts,
) -> Result<(), StoreError> {
    let id = (name, day);
    let mut total = table
        .get(id)
        .map_err(failed)?
        .map_or_else(UsageCounts::default, |v| from_tuple(v.value()));
    total.add(counts);
    table.insert(id, to_tuple(total)).map_err(failed)?;
    Ok(())
}

fn to_tuple(c: UsageCounts) -> UsageTuple {
    let [a, b, c2, d, e] = c.to_array();
    (a, b, c2, d, e)
}

fn from_tuple((a, b, c, d, e): UsageTuple) -> UsageCounts {
    UsageCounts::from_array([a, b, c, d, e])
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::days::DAY_SECS;
    use crate::quota::{KeyLimits, Refusal};

    fn temp_dir() -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "systemone-redb-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ))
    }

    fn at(day: u64) -> Now {
        Now {
            micros: (day * DAY_SECS + 10) * 1_000_000,
            server_clock: false,
        }
    }

    /// The cap holds across a reopen (what a restart is), a refusal takes nothing, a
    /// refund gives back, usage adds up by day, and a second open of the same directory is
    /// refused while the first holds it.
    #[tokio::test]
    async fn counts_survive_a_reopen_and_a_refusal_takes_nothing() {
        let dir = temp_dir();
        let limits = KeyLimits {
            daily_questions: Some(10),
            questions_per_minute: NonZeroU32::new(1000),
            ..KeyLimits::default()
        };
        let key = Arc::new(KeyQuota::new("acme".into(), limits));
        {
            let store = EmbeddedStore::open(&dir).expect("opens");
            let second = EmbeddedStore::open(&dir).expect_err("locked");
            assert!(second.to_string().contains("--state-dir"), "{second}");
            assert_eq!(
                store.take_questions(&key, 6, at(5)).await.ok(),
                Some(Ok(()))
            );
            store
                .record("acme", 5, UsageCounts::from_array([1, 6, 100, 10, 6]))
                .await
                .expect("records");
        }
        let store = EmbeddedStore::open(&dir).expect("reopens");
        assert_eq!(store.daily_used(&key, 5).await.expect("reads"), 6);
        let refused = store.take_questions(&key, 5, at(5)).await.expect("answers");
        assert!(
            matches!(
                refused,
                Err(Refusal::DailyCap {
                    used: 6,
                    limit: 10,
                    ..
                })
            ),
            "{refused:?}"
        );
        assert_eq!(store.daily_used(&key, 5).await.expect("reads"), 6);
        store.refund(&key, 5, 2).await.expect("refunds");
        assert_eq!(store.daily_used(&key, 5).await.expect("reads"), 4);
        assert_eq!(
            store.take_questions(&key, 6, at(5)).await.ok(),
            Some(Ok(()))
        );
        assert_eq!(
            store.daily_used(&key, 6).await.expect("reads"),
            0,
            "next day"
        );
        store
            .record("acme", 5, UsageCounts::from_array([1, 4, 50, 0, 4]))
            .await
            .expect("records");
        store
            .record("other", 5, UsageCounts::from_array([1, 1, 1, 1, 1]))
            .await
            .expect("records");
        let rows = store
            .usage(&["acme".to_string()], 0, 10)
            .await
            .expect("reads");
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].counts.to_array(), [2, 10, 150, 10, 10]);
        assert_eq!(rows[0].day, 5);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A batch line's questions count once across a reopen (a crash and a restart), also
    /// when it runs again the next day; a refund forgets the line (its questions go back to
    /// the day it was counted on), which then counts anew; a line refused is not kept.
    #[tokio::test]
    async fn a_line_run_again_counts_once_against_the_daily_cap() {
        let dir = temp_dir();
        let limits = KeyLimits {
            daily_questions: Some(10),
            ..KeyLimits::default()
        };
        let key = Arc::new(KeyQuota::new("acme".into(), limits));
        let take = |store: &EmbeddedStore, day, line| {
            let (store, key) = (store.clone(), key.clone());
            async move { store.take_line_questions(&key, 4, at(day), line).await }
        };
        {
            let store = EmbeddedStore::open(&dir).expect("opens");
            assert_eq!(take(&store, 5, "req_a").await.ok(), Some(Ok(())));
        }
        let store = EmbeddedStore::open(&dir).expect("reopens");
        assert_eq!(take(&store, 5, "req_a").await.ok(), Some(Ok(())));
        assert_eq!(take(&store, 6, "req_a").await.ok(), Some(Ok(())));
        assert_eq!(store.daily_used(&key, 5).await.expect("reads"), 4);
        assert_eq!(store.daily_used(&key, 6).await.expect("reads"), 0);
        store
            .refund_line(&key, 6, 4, "req_a")
            .await
            .expect("refunds");
        assert_eq!(
            store.daily_used(&key, 5).await.expect("reads"),
            0,
            "its day"
        );
        assert_eq!(take(&store, 6, "req_a").await.ok(), Some(Ok(())));
        assert_eq!(take(&store, 6, "req_b").await.ok(), Some(Ok(())));
        let over = take(&store, 6, "req_c").await.expect("answers");
        assert!(matches!(over, Err(Refusal::DailyCap { .. })), "{over:?}");
        assert_eq!(
            take(&store, 6, "req_c").await.ok().map(|v| v.is_err()),
            Some(true)
        );
        assert_eq!(store.daily_used(&key, 6).await.expect("reads"), 8);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
