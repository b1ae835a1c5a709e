//! An open ledger: the writer's queue, the store for reads, the key, and the failure
//! policy's bound on a request's wait; how a record is queued and a miss is warned of.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::clock::now_ms;
use super::fate::Fate;
use super::health::Health;
use super::key::LedgerKey;
use super::pending::Pending;
use super::store::{Store, StoredRow};
use crate::config::{FailurePolicy, LedgerInputs};
use crate::metrics::Metrics;

/// An open ledger.
#[derive(Debug)]
pub(super) struct Open {
    /// The writer's queue.
    pub(super) writer: mpsc::Sender<Pending>,
    /// For reads.
    pub(super) store: Store,
    /// The calibration watch the writer and the outcome route feed (`None`:
    /// `--no-calibration-watch`).
    pub(super) watch: Option<Arc<crate::calibration::watch::Watch>>,
    /// What the writer last found of the store (`/readyz`).
    pub(super) health: Arc<Health>,
    /// The hashes' key.
    pub(super) key: LedgerKey,
    /// The bound on a request's wait for its commit.
    pub(super) timeout: Duration,
    pub(super) policy: FailurePolicy,
    pub(super) inputs: LedgerInputs,
    pub(super) metrics: Arc<Metrics>,
    /// When a miss was last logged (Unix ms): at most one warning a minute, the metric
    /// counts them all.
    pub(super) last_warning_ms: std::sync::atomic::AtomicI64,
}

/// Milliseconds between two warnings of a miss.
const WARN_EVERY_MS: i64 = 60_000;

impl Open {
    /// Logs a miss, unless one was logged in the last minute.
    pub(super) fn warn_of_miss(&self, reason: &str) {
        use std::sync::atomic::Ordering;
        let now = now_ms();
        let last = self.last_warning_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < WARN_EVERY_MS
            || self
                .last_warning_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        tracing::warn!(
            store = self.store.driver().as_str(),
            policy = self.policy.as_str(),
            reason,
            "a request stopped waiting for its decision record (at most one such line a minute; systemone_ledger_missed_waits_total counts them all, systemone_ledger_records_total what became of the records)"
        );
    }

    /// Queues `row` and waits for its batch's commit (`fate`: as in [`Pending`]). A record that never reached the queue (its request stopped
    /// waiting for room first, or the writer stopped) is counted lost here; one the writer
    /// took is its business from then on.
    pub(super) async fn send(&self, row: StoredRow, fate: Arc<Fate>) -> Result<(), String> {
        let (done, committed) = oneshot::channel();
        let lost = Lost(Some((
            &self.metrics,
            &self.health,
            self.store.driver().as_str(),
        )));
        self.writer
            .send(Pending::new(row, fate, done))
            .await
            .map_err(|_| "the ledger writer stopped".to_string())?;
        lost.defuse();
        match committed.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the ledger writer stopped".to_string()),
        }
    }
}

/// Counts a record `lost` (in the metric and `/readyz`) when dropped armed: its request
/// stopped waiting (or failed) before the record reached the writer's queue.
struct Lost<'a>(Option<(&'a Metrics, &'a Health, &'static str)>);

impl Lost<'_> {
    fn defuse(mut self) {
        self.0 = None;
    }
}

impl Drop for Lost<'_> {
    fn drop(&mut self) {
        if let Some((metrics, health, store)) = self.0 {
            health.lost_more(1);
            metrics.count_ledger_records(store, "lost", 1);
        }
    }
}
