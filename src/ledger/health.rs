//! What the ledger last found of its store, kept in memory so `/readyz` answers without
//! waiting on the database: the writer sets it after each batch (and after each probe
//! while the store is unavailable), a request whose commit timed out clears it.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

/// Whether the store took the last write.
#[derive(Debug)]
pub(super) struct Health {
    available: AtomicBool,
}

impl Default for Health {
    /// A store just opened (and migrated) is available.
    fn default() -> Self {
        Health {
            available: AtomicBool::new(true),
        }
    }
}

impl Health {
    pub(super) fn set(&self, available: bool) {
        self.available.store(available, Ordering::Relaxed);
    }

    pub(super) fn available(&self) -> bool {
        self.available.load(Ordering::Relaxed)
    }
}

/// The ledger's line of `/readyz`, as the limit store's.
#[derive(Debug, Clone, Serialize)]
pub struct LedgerStatus {
    /// `sqlite` or `postgres`.
    pub store: &'static str,
    /// `fail_open` or `fail_closed`.
    pub policy: &'static str,
    /// Whether the store took the last write (or probe): its files are those at the
    /// path and it committed.
    pub available: bool,
    /// Whether requests can be served: available, or `fail_open`.
    pub ready: bool,
}
