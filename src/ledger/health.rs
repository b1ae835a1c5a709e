//! What the ledger last found of its store, kept in memory so `/readyz` answers without
//! waiting on the database: the writer sets it after each batch (and after each probe
//! while the store is unavailable), a request whose commit timed out clears it; how many
//! records wait to be written again once the store is back; and how many were given up.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;

/// Whether the store took the last write.
#[derive(Debug)]
pub(super) struct Health {
    available: AtomicBool,
    /// Records whose commit failed, kept by the writers to be written again.
    backlog: AtomicUsize,
    /// Records given up since the ledger opened (never on record): most of what a store
    /// away for long loses never reaches the backlog (its requests stop waiting for room
    /// in the writer's queue first), so the backlog alone understates it.
    lost: AtomicU64,
    /// The SQLite file was found corrupt (by `quick_check`, a statement, or written in place
    /// by another process): nothing is acknowledged until the files at the path are
    /// replaced by sound ones.
    corrupt: AtomicBool,
}

impl Default for Health {
    /// A store just opened (and migrated) is available.
    fn default() -> Self {
        Health {
            available: AtomicBool::new(true),
            backlog: AtomicUsize::new(0),
            lost: AtomicU64::new(0),
            corrupt: AtomicBool::new(false),
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

    /// A writer kept `n` more records to write again.
    pub(super) fn backlog_grew(&self, n: usize) {
        self.backlog.fetch_add(n, Ordering::Relaxed);
    }

    /// A writer took `n` records of its backlog (to write them, or to give them up).
    pub(super) fn backlog_shrank(&self, n: usize) {
        self.backlog.fetch_sub(n, Ordering::Relaxed);
    }

    pub(super) fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }

    /// `n` more records were given up.
    pub(super) fn lost_more(&self, n: usize) {
        self.lost.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(super) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    pub(super) fn set_corrupt(&self, corrupt: bool) {
        self.corrupt.store(corrupt, Ordering::Relaxed);
    }

    pub(super) fn corrupt(&self) -> bool {
        self.corrupt.load(Ordering::Relaxed)
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
    /// Whether requests can be served: available and sound, or `fail_open`.
    pub ready: bool,
    /// `ok`, or `corrupt`: the SQLite file failed `quick_check`, a statement found it
    /// malformed, or another process wrote it in place; restore a backup by moving a new
    /// file in (`systemone ledger backup` makes one), never by copying over the live file.
    pub integrity: &'static str,
    /// Records whose commit failed, waiting to be written again once the store is back.
    pub backlog: usize,
    /// Records in the writer's queue, not yet taken into a batch.
    pub queued: usize,
    /// Records given up since the ledger opened, never on record (the count of
    /// `systemone_ledger_records_total{result="lost"}`): what `fail_open` answered off
    /// the record while the store was away.
    pub lost: u64,
}
