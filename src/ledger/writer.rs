//! Group commit: the records waiting are written as one transaction (one multi-row INSERT of
//! up to [`MAX_BATCH`] rows, on a connection the writer keeps), and each request is told
//! when its batch is durable. Batches overlap, so under load a request does not wait for a
//! whole commit that started without it to finish before its own can start:
//!
//! * **SQLite** (one writer at a time, by design): a batch is written into the WAL with
//!   `synchronous=NORMAL` on the writer's connection (SQLite's write lock is not held
//!   through an fsync), then a second stage fsyncs the WAL file (`fdatasync`) before any
//!   request of the batch hears "committed". While that fsync runs, the next batch is
//!   written; the next fsync covers every batch written before it started. Durable before
//!   the answer as with `synchronous=FULL` (which fsyncs the WAL inside each commit): an
//!   acknowledged record's WAL frames, commit frame included, reached the disk before the
//!   acknowledgement.
//! * **PostgreSQL**: [`PG_WRITERS`] writer tasks, each with its own connection, take turns
//!   at the queue: while one batch's COMMIT is on its way (a round trip and a WAL flush),
//!   another connection sends the next, and PostgreSQL's own group commit flushes them
//!   together. A COMMIT returns once its WAL is flushed (`synchronous_commit` on).
//!
//! Alone, a request waits for its own commit only. With `--ledger-commit-delay-us`, a writer
//! that finds more than one record waiting waits that long for more before it writes:
//! fewer, larger commits (each has a fixed cost: a transaction, and an fsync or a WAL flush),
//! so less CPU per answer under load (docs/benchmarks.md, "The decision ledger").

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::AnyConnection;
use tokio::sync::{mpsc, oneshot, Mutex};

use super::store::{Store, StoreError, StoredRow};
use crate::metrics::Metrics;

/// Most rows in one transaction.
pub(super) const MAX_BATCH: usize = 256;
/// Records waiting for the writer before a request's send waits for room (bounded by the
/// request's own timeout).
pub(super) const QUEUE: usize = 4_096;
/// PostgreSQL writer connections: two keep one batch in flight while the next is sent.
const PG_WRITERS: usize = 2;

/// A record and who waits for its commit.
pub(super) struct Pending {
    pub(super) row: StoredRow,
    pub(super) done: oneshot::Sender<Result<(), StoreError>>,
}

/// Who waits for one batch.
type Waiting = Vec<oneshot::Sender<Result<(), StoreError>>>;

/// A batch written into SQLite's WAL, waiting for its fsync.
struct Written {
    waiting: Waiting,
    rows: usize,
    started: Instant,
}

/// What a writer does with a batch its transaction wrote.
enum Then {
    /// Tell the waiting requests (PostgreSQL: the COMMIT is durable).
    Answer,
    /// Hand it to the fsync stage (SQLite).
    Sync(mpsc::UnboundedSender<Written>),
}

/// Starts the writer for `store`; records sent to the returned sender are committed in
/// batches (`delay`: `--ledger-commit-delay-us`). The tasks end when every sender is dropped.
pub(super) fn start(store: Store, delay: Duration, metrics: Arc<Metrics>) -> mpsc::Sender<Pending> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let queue = Arc::new(Mutex::new(rx));
    match store.wal_file() {
        Some(wal) => {
            let (written, to_sync) = mpsc::unbounded_channel();
            tokio::spawn(sync_batches(store.clone(), wal, to_sync, metrics.clone()));
            let then = Then::Sync(written);
            tokio::spawn(write_batches(store, queue, delay, metrics, then));
        }
        None => {
            for _ in 0..PG_WRITERS {
                let (store, queue, metrics) = (store.clone(), queue.clone(), metrics.clone());
                tokio::spawn(write_batches(store, queue, delay, metrics, Then::Answer));
            }
        }
    }
    tx
}

/// Takes what waits in `queue` into `batch` (at most [`MAX_BATCH`]); when that is more than
/// one record and `delay` is set, waits `delay` and takes what arrived meanwhile too.
/// Returns 0 once every sender is gone.
async fn take_batch(
    queue: &Mutex<mpsc::Receiver<Pending>>,
    delay: Duration,
    batch: &mut Vec<Pending>,
) -> usize {
    let mut queue = queue.lock().await;
    let taken = queue.recv_many(batch, MAX_BATCH).await;
    if taken > 1 && !delay.is_zero() && batch.len() < MAX_BATCH {
        tokio::time::sleep(delay).await;
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(_) => break,
            }
        }
    }
    batch.len()
}

/// One writer: takes what waits in `queue` (its turn at it), writes it as one transaction on
/// its own connection (opened again after an error), and does `then`.
async fn write_batches(
    store: Store,
    queue: Arc<Mutex<mpsc::Receiver<Pending>>>,
    delay: Duration,
    metrics: Arc<Metrics>,
    then: Then,
) {
    let driver = store.driver().as_str();
    let mut connection: Option<AnyConnection> = None;
    // The INSERT text per row count: built once, so the driver's statement cache finds it.
    let mut statements: HashMap<usize, String> = HashMap::new();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        if take_batch(&queue, delay, &mut batch).await == 0 {
            return;
        }
        let started = Instant::now();
        let (rows, waiting): (Vec<StoredRow>, Waiting) =
            batch.drain(..).map(|p| (p.row, p.done)).unzip();
        let sql = statements
            .entry(rows.len())
            .or_insert_with(|| store.insert_sql(rows.len()));
        let result = match &mut connection {
            Some(conn) => Store::insert_on(conn, sql, &rows).await,
            None => match store.writer_connection().await {
                Ok(mut conn) => {
                    let result = Store::insert_on(&mut conn, sql, &rows).await;
                    connection = Some(conn);
                    result
                }
                Err(e) => Err(e),
            },
        };
        if let Err(e) = &result {
            tracing::warn!(store = driver, rows = rows.len(), error = %e, "ledger commit failed");
            // A broken connection is replaced; a sound one is cheap to open again.
            connection = None;
        }
        match (&then, result) {
            (Then::Sync(stage), Ok(())) => {
                let written = Written {
                    waiting,
                    rows: rows.len(),
                    started,
                };
                if let Err(mpsc::error::SendError(w)) = stage.send(written) {
                    answer(
                        w.waiting,
                        Err(StoreError("the ledger's fsync stage stopped".into())),
                    );
                }
            }
            (_, result) => {
                if result.is_ok() {
                    metrics.observe_ledger_commit(driver, rows.len(), started.elapsed());
                }
                answer(waiting, result);
            }
        }
    }
}

/// The fsync stage (SQLite): one `fdatasync` of the WAL for every batch written before it
/// started, then their requests hear the result. The metrics count each fsync as one
/// commit of all the rows it made durable.
async fn sync_batches(
    store: Store,
    wal: PathBuf,
    mut written: mpsc::UnboundedReceiver<Written>,
    metrics: Arc<Metrics>,
) {
    let driver = store.driver().as_str();
    let mut batches = Vec::new();
    // The WAL's directory entry is made durable once, with the first fsync.
    let mut directory = wal.parent().map(std::path::Path::to_path_buf);
    while written.recv_many(&mut batches, usize::MAX).await > 0 {
        let (path, dir) = (wal.clone(), directory.clone());
        let result = tokio::task::spawn_blocking(move || {
            sync_file(&path)?;
            dir.filter(|d| !d.as_os_str().is_empty())
                .map_or(Ok(()), |d| sync_file(&d))
        })
        .await
        .unwrap_or_else(|e| Err(StoreError(format!("the fsync task failed: {e}"))));
        match &result {
            Ok(()) => directory = None,
            Err(e) => tracing::warn!(store = driver, error = %e, "ledger fsync failed"),
        }
        // One commit in the metrics per fsync (the point where its rows became durable),
        // timed from the start of its oldest batch.
        if let (Ok(()), Some(oldest)) = (&result, batches.first()) {
            let rows = batches.iter().map(|b| b.rows).sum();
            metrics.observe_ledger_commit(driver, rows, oldest.started.elapsed());
        }
        for batch in batches.drain(..) {
            answer(batch.waiting, result.clone());
        }
    }
}

/// `fdatasync` of the file (or directory) at `path`, through a handle of its own each time
/// (the WAL is SQLite's: the writer keeps nothing of it open).
fn sync_file(path: &std::path::Path) -> Result<(), StoreError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_data())
        .map_err(|e| StoreError(format!("fsync of {}: {e}", path.display())))
}

fn answer(waiting: Waiting, result: Result<(), StoreError>) {
    for done in waiting {
        let _ = done.send(result.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::draft::{refused, Identity};
    use crate::ledger::key::LedgerKey;
    use crate::secret::Secret;

    /// A record for request `n`, and the receiver its commit would be told on.
    fn pending(n: usize) -> (Pending, oneshot::Receiver<Result<(), StoreError>>) {
        let key = LedgerKey::new(Secret::new("0123456789abcdef")).expect("long enough");
        let who = Identity {
            request_id: format!("req_{n}"),
            at_ms: 0,
            key: "k".into(),
            route: "/v1/systemone".into(),
            latency_ms: 1.0,
        };
        let row = StoredRow::new(refused(&key, who, 503, Some("code"), None));
        let (done, heard) = oneshot::channel();
        (Pending { row, done }, heard)
    }

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
            let taken = take_batch(&queue, delay, &mut batch).await;
            let case = format!("{waiting} waiting, delay {delay:?}, one more at {late:?}");
            assert_eq!(ids(&batch), want, "{case}");
            assert_eq!(taken, want.len(), "{case}");
            assert_eq!(started.elapsed(), took, "{case}");
        }
    }
}
