//! Group commit: the records waiting are written as one transaction (one multi-row INSERT of
//! up to [`MAX_BATCH`] rows, on a connection the writer keeps), and each request is told
//! once its batch is durable:
//!
//! * **SQLite** (one writer at a time, by design): one writer task, whose connection runs
//!   `synchronous=FULL` like the pool's: SQLite fsyncs the WAL through the descriptor it
//!   writes inside each commit, so a commit that returned is on disk. Durability never
//!   comes from a file found at the WAL's path afterwards: that name may by then be
//!   another file (deleted and restored under the service) while SQLite writes on into
//!   the one it opened.
//! * **PostgreSQL**: [`PG_WRITERS`] writer tasks, each with its own connection, take turns
//!   at the queue: while one batch's COMMIT is on its way (a round trip and a WAL flush),
//!   another connection sends the next, and PostgreSQL's own group commit flushes them
//!   together. A COMMIT returns once its WAL is flushed (`synchronous_commit` on).
//!
//! Before and after each commit the writer checks that the SQLite files it writes are still
//! those at the ledger's path ([`super::live`]): a batch written into files replaced or
//! removed under the service is a failure (the request's policy applies), and the ledger is
//! opened again on its path by itself. While the store is unavailable, an idle writer
//! probes it every [`PROBE_EVERY`], so readiness comes back without traffic.
//!
//! A batch whose commit failed is not dropped: its requests are told (their policy applies
//! at once), and the writer keeps its records ([`super::backlog`]) and writes them again as
//! soon as the store takes a write (right after a fresh batch commits, or a probe passes):
//! a refusal, or an answer that went out under `fail_open`, is on record late rather than
//! never. An answer its request withdrew meanwhile (refused under `fail_closed`) is written
//! as that refusal ([`super::fate`]).
//!
//! Alone, a request waits for its own commit only. With `--ledger-commit-delay-us`, a writer
//! that finds more than one record waiting waits that long for more before it writes:
//! fewer, larger commits (each has a fixed cost: a transaction, and an fsync or a WAL flush),
//! so less CPU per answer under load (docs/benchmarks.md, "The decision ledger").

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Mutex};

use super::backlog::Backlog;
use super::health::Health;
use super::live::LiveConnection;
use super::pending::Pending;
use super::store::{Driver, Store, StoreError, StoredRow};
use crate::calibration::watch::Watch;
use crate::metrics::Metrics;

/// Most rows in one transaction.
pub(super) const MAX_BATCH: usize = 256;
/// Records waiting for the writer before a request's send waits for room (bounded by the
/// request's own timeout).
pub(super) const QUEUE: usize = 4_096;
/// PostgreSQL writer connections: two keep one batch in flight while the next is sent.
const PG_WRITERS: usize = 2;
/// SQLite takes one writer at a time: a second connection would only wait for the lock.
const SQLITE_WRITERS: usize = 1;
/// How often an idle writer probes a store it found unavailable (or, with records to
/// write again, whether the store takes writes again).
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Starts the writer for `store`; records sent to the returned sender are committed in
/// batches (`delay`: `--ledger-commit-delay-us`), and what they find of the store is kept
/// in `health`. The tasks end when every sender is dropped.
pub(super) fn start(
    store: Store,
    delay: Duration,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    watch: Option<Arc<Watch>>,
) -> mpsc::Sender<Pending> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let queue = Arc::new(Mutex::new(rx));
    let writers = match store.driver() {
        Driver::Sqlite => SQLITE_WRITERS,
        Driver::Postgres => PG_WRITERS,
    };
    for _ in 0..writers {
        let backlog = Backlog::new(health.clone(), metrics.clone(), store.driver().as_str());
        let writer = Writer {
            live: LiveConnection::new(store.clone(), health.clone()),
            statements: HashMap::new(),
            backlog,
            metrics: metrics.clone(),
            watch: watch.clone(),
        };
        tokio::spawn(writer.run(queue.clone(), delay));
    }
    tx
}

/// Takes what waits in `queue` into `batch` (at most [`MAX_BATCH`]); when that is more than
/// one record and `delay` is set, waits `delay` and takes what arrived meanwhile too.
/// Returns 0 once every sender is gone, and `None` if nothing came within `idle` (when set).
async fn take_batch(
    queue: &Mutex<mpsc::Receiver<Pending>>,
    delay: Duration,
    idle: Option<Duration>,
    batch: &mut Vec<Pending>,
) -> Option<usize> {
    let mut queue = queue.lock().await;
    // `recv_many` is cancel-safe: a timeout loses nothing.
    let taken = match idle {
        Some(idle) => tokio::time::timeout(idle, queue.recv_many(batch, MAX_BATCH))
            .await
            .ok()?,
        None => queue.recv_many(batch, MAX_BATCH).await,
    };
    if taken > 1 && !delay.is_zero() && batch.len() < MAX_BATCH {
        tokio::time::sleep(delay).await;
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(_) => break,
            }
        }
    }
    Some(batch.len())
}

/// One writer task: its connection on the live files, its statements and its backlog.
struct Writer {
    live: LiveConnection,
    /// The INSERT text per row count: built once, so the driver's statement cache finds it.
    statements: HashMap<usize, String>,
    backlog: Backlog,
    metrics: Arc<Metrics>,
    /// Told of every answer once it is on record (the calibration watch, when on).
    watch: Option<Arc<Watch>>,
}

impl Writer {
    /// Takes what waits in `queue` (its turn at it) and writes it as one transaction; then,
    /// if the store took it (or, idle, passes a probe), writes again what it kept.
    async fn run(mut self, queue: Arc<Mutex<mpsc::Receiver<Pending>>>, delay: Duration) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        // Opened before the first record comes, so its request does not wait for it (a
        // failure here is met again, and answered, by the first batch).
        let _ = self.live.connection().await;
        loop {
            let idle =
                (!self.live.health.available() || !self.backlog.is_empty()).then_some(PROBE_EVERY);
            let store_takes_writes = match take_batch(&queue, delay, idle, &mut batch).await {
                Some(0) => return self.backlog.give_up(),
                Some(_) => self.write(std::mem::take(&mut batch), false).await,
                None => {
                    let result = probe(&mut self.live).await;
                    self.live.settle(result).await.is_ok()
                }
            };
            if store_takes_writes && !self.backlog.is_empty() {
                let again = self.backlog.take(MAX_BATCH);
                self.write(again, true).await;
            }
        }
    }

    /// Writes `batch` as one transaction and tells each record's request; a failed batch is
    /// kept to write again (`again`: it was kept already, and this failure is a strike).
    /// Returns whether it committed.
    async fn write(&mut self, mut batch: Vec<Pending>, again: bool) -> bool {
        let driver = self.live.store.driver().as_str();
        let started = Instant::now();
        // A record whose request withdrew it is written as the refusal it got.
        let refusals: Vec<bool> = batch.iter_mut().map(Pending::take_withdrawal).collect();
        let rows: Vec<&StoredRow> = batch.iter().map(|p| &p.row).collect();
        let store = &self.live.store;
        let sql = self
            .statements
            .entry(rows.len())
            .or_insert_with(|| store.insert_sql(rows.len()));
        let result = commit(&mut self.live, sql, &rows).await;
        drop(rows);
        match self.live.settle(result).await {
            Ok(()) => {
                self.metrics
                    .observe_ledger_commit(driver, batch.len(), started.elapsed());
                for (pending, refusal) in batch.into_iter().zip(refusals) {
                    self.landed(pending, refusal);
                }
                true
            }
            Err(e) => {
                tracing::warn!(store = driver, rows = batch.len(), error = %e, "ledger commit failed");
                for mut pending in batch {
                    if let Some(done) = pending.done.take() {
                        let _ = done.send(Err(e.clone()));
                    }
                    pending.strikes += u8::from(again);
                    self.backlog.keep(pending);
                }
                false
            }
        }
    }

    /// `pending` is on record (as its refusal, when `refusal`): its request is told, or,
    /// if it withdrew the answer that just landed, its refusal is kept to write over it.
    fn landed(&mut self, mut pending: Pending, refusal: bool) {
        let driver = self.live.store.driver().as_str();
        if !refusal && !pending.fate.settle() {
            pending.take_withdrawal();
            pending.done = None;
            self.backlog.keep(pending);
            return;
        }
        if let Some(watch) = &self.watch {
            super::watch::record(watch, pending.row.decision());
        }
        let waited = pending
            .done
            .take()
            .is_some_and(|done| done.send(Ok(())).is_ok());
        let result = if waited && !refusal {
            "committed"
        } else {
            "late"
        };
        self.metrics.count_ledger_records(driver, result, 1);
    }
}

/// Writes `rows` with `sql` on a connection on the live files, and proves they are still
/// the files at the path after the commit: one into files replaced meanwhile is an error,
/// never an acknowledgement.
async fn commit(
    live: &mut LiveConnection,
    sql: &str,
    rows: &[&StoredRow],
) -> Result<(), StoreError> {
    Store::insert_on(live.connection().await?, sql, rows).await?;
    live.landed()
}

/// Whether the store can take a write now, on the live files.
async fn probe(live: &mut LiveConnection) -> Result<(), StoreError> {
    let driver = live.store.driver();
    Store::probe_on(live.connection().await?, driver).await?;
    live.landed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::pending::tests::pending;

    /// The batch's request ids.
    fn ids(batch: &[Pending]) -> Vec<&str> {
        batch.iter().map(|p| p.row.request_id()).collect()
    }

    /// Sends record `n` to `tx` after `after` (paused time).
    fn send_later(tx: &mpsc::Sender<Pending>, n: usize, after: Duration) {
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(pending(n).0).await;
        });
    }

    /// Case table: (records waiting, delay, a record arriving after this long, the batch
    /// taken, the time taking it took).
    #[tokio::test(start_paused = true)]
    async fn a_batch_waits_for_more_only_when_it_is_not_alone() {
        const MS: Duration = Duration::from_millis(1);
        let cases: [(usize, Duration, Duration, &[&str], Duration); 4] = [
            // A lone record never waits: the late one is not in its batch.
            (1, 4 * MS, 2 * MS, &["req_0"], Duration::ZERO),
            // Two waiting: the writer waits 4 ms, and the one that came at 2 ms joins.
            (2, 4 * MS, 2 * MS, &["req_0", "req_1", "req_9"], 4 * MS),
            // One that comes after the delay does not.
            (2, 4 * MS, 6 * MS, &["req_0", "req_1"], 4 * MS),
            // No delay: what waits is written at once.
            (
                2,
                Duration::ZERO,
                2 * MS,
                &["req_0", "req_1"],
                Duration::ZERO,
            ),
        ];
        for (waiting, delay, late, want, took) in cases {
            let (tx, rx) = mpsc::channel(QUEUE);
            let mut heard = Vec::new();
            for n in 0..waiting {
                let (p, h) = pending(n);
                tx.send(p).await.expect("room");
                heard.push(h);
            }
            send_later(&tx, 9, late);
            let queue = Mutex::new(rx);
            let started = tokio::time::Instant::now();
            let mut batch = Vec::new();
            let taken = take_batch(&queue, delay, None, &mut batch).await;
            let case = format!("{waiting} waiting, delay {delay:?}, one more at {late:?}");
            assert_eq!(ids(&batch), want, "{case}");
            assert_eq!(taken, Some(want.len()), "{case}");
            assert_eq!(started.elapsed(), took, "{case}");
        }
    }
}
