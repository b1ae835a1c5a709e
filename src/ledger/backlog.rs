//! The records a writer keeps after their commit failed, to write them again once the store
//! is back: a refusal or an answer is on record late rather than never (the promise of
//! docs/operations/ledger.md). Bounded ([`BACKLOG`] records a writer): past it, or after
//! [`MAX_STRIKES`] failures while the store took other writes (a record the store refuses
//! for itself), a record is given up and counted `lost`, the only records that never reach
//! the store.

use std::collections::VecDeque;
use std::sync::Arc;

use super::health::Health;
use super::pending::Pending;
use crate::metrics::Metrics;

/// Most records one writer keeps to write again.
pub(super) const BACKLOG: usize = 4_096;
/// Failures of one record, each right after the store took a write, before it is given up.
pub(super) const MAX_STRIKES: u8 = 3;

/// One writer's backlog.
pub(super) struct Backlog {
    kept: VecDeque<Pending>,
    /// Shares the count with `/readyz`.
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    /// The store's kind (a metrics label).
    store: &'static str,
}

impl Backlog {
    pub(super) fn new(health: Arc<Health>, metrics: Arc<Metrics>, store: &'static str) -> Self {
        Backlog {
            kept: VecDeque::new(),
            health,
            metrics,
            store,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Keeps `pending` to write again, unless it struck out or the backlog is full.
    pub(super) fn keep(&mut self, pending: Pending) {
        if pending.strikes >= MAX_STRIKES || self.kept.len() >= BACKLOG {
            self.lose(1);
            return;
        }
        self.kept.push_back(pending);
        self.health.backlog_grew(1);
    }

    /// The oldest `most` records, to write again.
    pub(super) fn take(&mut self, most: usize) -> Vec<Pending> {
        let n = most.min(self.kept.len());
        self.health.backlog_shrank(n);
        self.kept.drain(..n).collect()
    }

    /// Gives up every record kept (the writer is ending).
    pub(super) fn give_up(&mut self) {
        let n = self.kept.len();
        self.health.backlog_shrank(n);
        self.kept.clear();
        self.lose(n);
    }

    fn lose(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.health.lost_more(n);
        self.metrics.count_ledger_records(self.store, "lost", n);
        tracing::error!(
            store = self.store,
            records = n,
            "decision records given up: never on record (systemone_ledger_records_total{{result=\"lost\"}})"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::pending::tests::pending;

    fn lost(metrics: &Metrics) -> usize {
        let text = metrics.render(std::iter::empty(), 0);
        let prefix = "systemone_ledger_records_total{result=\"lost\",store=\"sqlite\"} ";
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map_or(0, |n| n.parse().expect("a count"))
    }

    #[test]
    fn kept_records_come_back_oldest_first_and_readiness_counts_them() {
        let (health, metrics) = (Arc::new(Health::default()), Arc::new(Metrics::new()));
        let mut backlog = Backlog::new(health.clone(), metrics.clone(), "sqlite");
        for n in 0..3 {
            backlog.keep(pending(n).0);
        }
        assert_eq!(health.backlog(), 3);
        let again: Vec<String> = backlog
            .take(2)
            .iter()
            .map(|p| p.row.request_id().to_owned())
            .collect();
        assert_eq!(again, ["req_0", "req_1"]);
        assert_eq!(health.backlog(), 1);
        assert_eq!(lost(&metrics), 0);
        backlog.give_up();
        assert_eq!((health.backlog(), lost(&metrics)), (0, 1));
        assert_eq!(health.lost(), 1);
    }

    #[test]
    fn a_record_that_struck_out_or_finds_the_backlog_full_is_lost() {
        let (health, metrics) = (Arc::new(Health::default()), Arc::new(Metrics::new()));
        let mut backlog = Backlog::new(health.clone(), metrics.clone(), "sqlite");
        let mut struck = pending(0).0;
        struck.strikes = MAX_STRIKES;
        backlog.keep(struck);
        assert_eq!((health.backlog(), lost(&metrics)), (0, 1));
        for n in 0..=BACKLOG {
            backlog.keep(pending(n).0);
        }
        assert_eq!((health.backlog(), lost(&metrics)), (BACKLOG, 2));
        assert_eq!(health.lost(), 2, "readiness counts them too");
    }
}
