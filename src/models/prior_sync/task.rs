//! The background task that exchanges every model's priors with the store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::store::PriorStore;
use super::SetAside;
use crate::metrics::Metrics;
use crate::models::Model;

/// Longest one exchange may take (a store slower than this is skipped for the interval).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(2);

/// Attempts of the last exchange at shutdown.
const FINAL_TRIES: usize = 5;

/// The store, the interval, and whether the task runs.
#[derive(Debug)]
pub struct PriorSync {
    store: PriorStore,
    interval: Duration,
    metrics: Arc<Metrics>,
    started: AtomicBool,
    /// Whether the last exchange failed: the first failure is a warning, the rest debug.
    failing: AtomicBool,
    /// What `/readyz` shows.
    status: Mutex<PriorStatus>,
}

/// The store's line of `/readyz`: the service is ready whatever it says (the priors are
/// kept here while the store fails, and learn afresh after it held garbage), so an
/// operator sees there what `/metrics` counts.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PriorStatus {
    /// `file` or `redis`.
    pub store: &'static str,
    /// Whether the last exchange went through (`None`: none yet).
    pub synced: Option<bool>,
    /// Things the store held that could not be read and were set aside, since start.
    pub set_aside: u64,
    /// The last of them: its reason and what it was (a shape label or the file's name,
    /// and where it went).
    pub last_set_aside: Option<String>,
}

impl PriorSync {
    /// A sync of every model's priors with `store` each `interval`.
    pub fn new(store: PriorStore, interval: Duration, metrics: Arc<Metrics>) -> Self {
        PriorSync {
            store,
            interval: interval.max(Duration::from_millis(10)),
            metrics,
            started: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            status: Mutex::new(PriorStatus::default()),
        }
    }

    /// The store's line of `/readyz`.
    pub fn status(&self) -> PriorStatus {
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        PriorStatus {
            store: self.store.kind(),
            ..status.clone()
        }
    }

    /// Counts, logs and shows what the store set aside.
    fn note(&self, model: &str, synced: bool, set_aside: &[SetAside]) {
        let store = self.store.kind();
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        status.synced = Some(synced);
        for s in set_aside {
            tracing::warn!(%model, store, reason = s.reason, what = %s.what, "the position prior's store held what cannot be served: set aside, that shape learns afresh");
            self.metrics.prior_set_aside(store, s.reason);
            status.set_aside += 1;
            status.last_set_aside = Some(format!("{}: {}", s.reason, s.what));
        }
    }

    /// Starts the task (once, and only in a runtime). It holds the models weakly and ends
    /// when they are gone; its first exchange, at once, loads what the store kept.
    pub fn start(self: &Arc<Self>, models: &[Arc<Model>]) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let learning: Vec<Weak<Model>> = models
            .iter()
            .filter(|m| m.prior.settings().enabled)
            .map(Arc::downgrade)
            .collect();
        if !learning.is_empty() {
            runtime.spawn(keep(self.clone(), learning));
        }
    }

    /// Exchanges every learning model's book now, each retried a few times (the interval's
    /// own exchange may hold the file a moment): what `serve` does at shutdown, so a
    /// graceful restart loses none of what was learned since the last interval.
    pub async fn exchange_all(&self, models: &[Arc<Model>]) {
        for model in models.iter().filter(|m| m.prior.settings().enabled) {
            for _ in 0..FINAL_TRIES {
                if self.exchange(model).await {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// One exchange of `model`'s book: its new sums out, the merged sums in; on a
    /// failure the new sums wait for the next one. Whether it went through.
    async fn exchange(&self, model: &Model) -> bool {
        let book = &model.prior;
        let taken = book.take_pending();
        let outcome = match self
            .store
            .exchange(&model.name, &taken, EXCHANGE_TIMEOUT)
            .await
        {
            Ok(merged) => {
                book.install(merged.sums);
                self.note(&model.name, true, &merged.set_aside);
                self.failing.store(false, Ordering::Release);
                "ok"
            }
            Err(e) => {
                book.restore_pending(&taken);
                self.note(&model.name, false, &[]);
                let (model, store) = (&model.name, self.store.kind());
                if self.failing.swap(true, Ordering::AcqRel) {
                    tracing::debug!(%model, store, error = %e, "cannot sync the position prior yet");
                } else {
                    tracing::warn!(%model, store, error = %e, "cannot sync the position prior; it is kept here and sent again");
                }
                "failed"
            }
        };
        self.metrics.prior_synced(self.store.kind(), outcome);
        outcome == "ok"
    }
}

async fn keep(sync: Arc<PriorSync>, models: Vec<Weak<Model>>) {
    loop {
        let alive: Vec<Arc<Model>> = models.iter().filter_map(Weak::upgrade).collect();
        if alive.is_empty() {
            return;
        }
        for model in &alive {
            sync.exchange(model).await;
        }
        drop(alive);
        tokio::time::sleep(sync.interval).await;
    }
}
