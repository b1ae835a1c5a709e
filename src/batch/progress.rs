//! Group commit of finished lines: a line's output waits a few milliseconds (or until
//! enough others are waiting) and is committed with them in one transaction, one fsync for
//! the group instead of one a line.
//!
//! A group's usage is charged first, in one call to the limit store, then its outputs are
//! committed. Exactly once holds across a kill -9 at any point: a line is pending until the
//! commit that holds its output, and a line run again after a crash is the same request
//! (its id is derived from its batch and position, [`super::ids`]), so the ledger keeps one
//! record of it, the store one output, and the limit store one charge (a [`Charger`] that
//! keeps the ids it charged). A charge that fails leaves the group
//! pending: its lines run again and are charged then.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::rows::{Charger, LineDone};
use super::store::Store;

enum Message {
    Done(LineDone),
    /// Answered once every line sent before it is committed.
    Flush(oneshot::Sender<()>),
}

/// The writer's queue.
#[derive(Debug, Clone)]
pub struct Progress {
    tx: mpsc::Sender<Message>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Message")
    }
}

impl Progress {
    /// Starts the writer of `store`, charging usage to `charger`: groups of at most `lines`,
    /// each waiting at most `wait`. The writer holds the charger weakly: a service dropped
    /// lets its limit store go (and a restart in the same process open it) without waiting
    /// for the writer to see its queue closed.
    pub fn start(store: Store, charger: Weak<dyn Charger>, lines: usize, wait: Duration) -> Self {
        let (tx, rx) = mpsc::channel(lines.max(1) * 4);
        tokio::spawn(write(store, charger, rx, lines.max(1), wait));
        Progress { tx }
    }

    /// Queues a finished line.
    pub async fn done(&self, line: LineDone) {
        let _ = self.tx.send(Message::Done(line)).await;
    }

    /// Waits until every line queued before is committed (or the writer is gone).
    pub async fn flush(&self) {
        let (done, committed) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).await.is_ok() {
            let _ = committed.await;
        }
    }
}

/// The writer: takes a first message, then whatever else arrives within `wait` (up to
/// `lines` lines), charges and commits the lines, answers the flushes.
async fn write(
    store: Store,
    charger: Weak<dyn Charger>,
    mut rx: mpsc::Receiver<Message>,
    lines: usize,
    wait: Duration,
) {
    while let Some(first) = rx.recv().await {
        let mut group = Vec::new();
        let mut flushes = Vec::new();
        take(first, &mut group, &mut flushes);
        let deadline = tokio::time::Instant::now() + wait;
        while group.len() < lines && flushes.is_empty() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(m)) => take(m, &mut group, &mut flushes),
                _ => break,
            }
        }
        if !group.is_empty() {
            commit(&store, &charger, &mut group).await;
        }
        for flush in flushes {
            let _ = flush.send(());
        }
    }
}

/// Charges the group's usage, then commits its outputs; on an error the lines stay pending
/// (their batch runs them again).
async fn commit(store: &Store, charger: &Weak<dyn Charger>, group: &mut [LineDone]) {
    let charges: Vec<_> = group.iter_mut().filter_map(|l| l.charge.take()).collect();
    if !charges.is_empty() {
        let Some(charger) = charger.upgrade() else {
            return; // The service is gone: the lines run again when it starts.
        };
        if let Err(e) = charger.charge(&charges).await {
            tracing::warn!(error = %e, lines = group.len(), "batch usage was not charged");
            return;
        }
    }
    if let Err(e) = store.commit_done(group).await {
        tracing::warn!(error = %e, lines = group.len(), "batch progress was not committed");
    }
}

fn take(m: Message, group: &mut Vec<LineDone>, flushes: &mut Vec<oneshot::Sender<()>>) {
    match m {
        Message::Done(line) => group.push(line),
        Message::Flush(done) => flushes.push(done),
    }
}
