//! Group commit of finished lines: a line's output waits a few milliseconds (or until
//! enough others are waiting) and is committed with them in one transaction, one fsync for
//! the group instead of one a line.
//!
//! Exactly once still holds: a line is pending until the commit that holds its output, and
//! a line run again after a crash is the same request (its id is derived from its batch and
//! position, [`super::ids`]), so the ledger keeps one record of it and the store one output.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::rows::LineDone;
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
    /// Starts the writer of `store`: groups of at most `lines`, each waiting at most `wait`.
    pub fn start(store: Store, lines: usize, wait: Duration) -> Self {
        let (tx, rx) = mpsc::channel(lines.max(1) * 4);
        tokio::spawn(write(store, rx, lines.max(1), wait));
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
/// `lines` lines), commits the lines, answers the flushes.
async fn write(store: Store, mut rx: mpsc::Receiver<Message>, lines: usize, wait: Duration) {
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
            if let Err(e) = store.commit_done(&group).await {
                // The lines stay pending: their batch runs them again.
                tracing::warn!(error = %e, lines = group.len(), "batch progress was not committed");
            }
        }
        for flush in flushes {
            let _ = flush.send(());
        }
    }
}

fn take(m: Message, group: &mut Vec<LineDone>, flushes: &mut Vec<oneshot::Sender<()>>) {
    match m {
        Message::Done(line) => group.push(line),
        Message::Flush(done) => flushes.push(done),
    }
}
