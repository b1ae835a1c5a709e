//! Group commit: one task writes every record, taking whatever requests are waiting as one
//! transaction (up to [`MAX_BATCH`] rows), and tells each request when its batch is
//! committed. Under load, one fsync (SQLite) or one round trip and WAL flush (PostgreSQL)
//! then covers many answers; alone, a request waits for its own commit only.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::store::{Store, StoreError, StoredRow};
use crate::metrics::Metrics;

/// Most rows in one transaction.
pub(super) const MAX_BATCH: usize = 256;
/// Records waiting for the writer before a request's send waits for room (bounded by the
/// request's own timeout).
pub(super) const QUEUE: usize = 4_096;

/// A record and who waits for its commit.
pub(super) struct Pending {
    pub(super) row: StoredRow,
    pub(super) done: oneshot::Sender<Result<(), StoreError>>,
}

/// Starts the writer for `store`; records sent to the returned sender are committed in
/// batches. The task ends when every sender is dropped.
pub(super) fn start(store: Store, metrics: Arc<Metrics>) -> mpsc::Sender<Pending> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(write_batches(store, rx, metrics));
    tx
}

async fn write_batches(store: Store, mut rx: mpsc::Receiver<Pending>, metrics: Arc<Metrics>) {
    let driver = store.driver().as_str();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (rows, waiting): (Vec<StoredRow>, Vec<_>) =
            batch.drain(..).map(|p| (p.row, p.done)).unzip();
        let started = Instant::now();
        let result = store.insert(&rows).await;
        metrics.observe_ledger_commit(driver, rows.len(), started.elapsed());
        if let Err(e) = &result {
            tracing::warn!(store = driver, rows = rows.len(), error = %e, "ledger commit failed");
        }
        for done in waiting {
            let _ = done.send(result.clone());
        }
    }
}
