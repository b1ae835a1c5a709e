//! A writer's connection, held only while the files it opened are the ones at the ledger's
//! path ([`super::files`]), and what the writer last found of the store ([`Health`]).
//!
//! Before each batch the writer asks for [`LiveConnection::connection`]: a connection whose
//! files were replaced or removed is let go, the store is opened again on the path (a new
//! pool, once the file's directory is there), and a new connection is opened, its files'
//! identity taken before and after so it is known to be the files at the path. After the
//! commit, [`LiveConnection::landed`] proves the files are still those: only then is the
//! batch acknowledged. PostgreSQL has no files: only the health applies.
//!
//! The database file changes only inside the writer's commits (its checkpoints,
//! [`super::store`]): found changed between two of them, it was written in place by
//! another process, and is taken for corrupt, as it is when a statement says so. A corrupt
//! file takes no write (nothing is acknowledged into it) until the files at the path are
//! replaced and pass `quick_check`.

use std::sync::Arc;

use sqlx::{AnyConnection, Connection};

use super::files::{FileIds, FileStamp};
use super::health::Health;
use super::store::{is_corruption, Store, StoreError};

/// One writer's connection and what it knows of the store's files.
pub(super) struct LiveConnection {
    pub(super) store: Store,
    pub(super) health: Arc<Health>,
    /// The connection the writer writes on.
    held: Option<AnyConnection>,
    /// The identity of the SQLite files the store's connections opened (`None`: not yet
    /// opened, or PostgreSQL).
    opened: Option<FileIds>,
    /// The files were found replaced or removed: the store must be opened again before
    /// another connection is.
    stale: bool,
    /// The database file's modification time and size after the last write the store took
    /// (`None`: none yet on these files).
    stamp: Option<FileStamp>,
}

impl LiveConnection {
    pub(super) fn new(store: Store, health: Arc<Health>) -> Self {
        LiveConnection {
            store,
            health,
            held: None,
            opened: None,
            stale: false,
            stamp: None,
        }
    }

    /// A connection on the files now at the ledger's path, opened (and the store opened
    /// again first) when none is held or the files the held one opened are gone.
    pub(super) async fn connection(&mut self) -> Result<&mut AnyConnection, StoreError> {
        if self.held.is_none() || self.landed().is_err() {
            self.let_go().await;
            self.held = Some(self.open().await?);
        }
        self.intact()?;
        self.held
            .as_mut()
            .ok_or_else(|| StoreError("the ledger's writer holds no connection".into()))
    }

    /// Whether the files at the path are still those the connection opened (always, on
    /// PostgreSQL): a commit is acknowledged only if they are after it.
    pub(super) fn landed(&mut self) -> Result<(), StoreError> {
        match self.store.files_now() {
            Ok(now) if now == self.opened => Ok(()),
            Ok(_) => self.found_stale("the ledger's files were replaced under the service"),
            Err(e) => self.found_stale(&e.0),
        }
    }

    /// Refuses a corrupt file, and takes the file for corrupt when it changed since the
    /// last write the store took (another process wrote it in place).
    fn intact(&mut self) -> Result<(), StoreError> {
        if self.stamp.is_some() && self.store.stamp_now() != self.stamp {
            self.stamp = None;
            self.health.set_corrupt(true);
            tracing::error!("the ledger's file was written in place by another process (a copy over the live file?): nothing is acknowledged into it until it is replaced by a sound file; back up with `systemone ledger backup`");
        }
        if self.health.corrupt() {
            return Err(StoreError(
                "the ledger's file is corrupt; nothing is written into it".into(),
            ));
        }
        Ok(())
    }

    fn found_stale(&mut self, why: &str) -> Result<(), StoreError> {
        self.stale = true;
        Err(StoreError(why.to_owned()))
    }

    /// Records `result` as the store's health; after an error lets the connection go (a
    /// broken one is replaced; a sound one is cheap to open again).
    pub(super) async fn settle(
        &mut self,
        result: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.health.set(result.is_ok());
        match &result {
            Ok(()) => self.stamp = self.store.stamp_now(),
            Err(e) if is_corruption(e) => {
                tracing::error!(error = %e, "the ledger's file is corrupt: nothing is acknowledged into it until it is replaced by a sound file");
                self.health.set_corrupt(true);
            }
            Err(_) => {}
        }
        if result.is_err() {
            self.let_go().await;
        }
        result
    }

    /// Closes the held connection, so SQLite is done with the files it opened before the
    /// store is opened again.
    async fn let_go(&mut self) {
        if let Some(conn) = self.held.take() {
            let _ = conn.close().await;
        }
    }

    /// Opens the store again when its files were found stale or are missing now, then a
    /// connection whose files are those at the path before and after it opened them.
    async fn open(&mut self) -> Result<AnyConnection, StoreError> {
        let now = self.store.files_now();
        if self.stale
            || now.is_err()
            || (self.opened.is_some() && now.ok().flatten() != self.opened)
        {
            self.stale = true;
            self.store.reopen().await?;
            self.stale = false;
            self.stamp = None;
            let problem = self.store.quick_check().await?;
            self.health.set_corrupt(problem.is_some());
        }
        let before = self.store.files_now()?;
        let conn = self.store.writer_connection().await?;
        let after = self.store.files_now()?;
        if before != after {
            self.stale = true;
            let _ = conn.close().await;
            return Err(StoreError(
                "the ledger's files changed while they were opened".into(),
            ));
        }
        self.opened = after;
        Ok(conn)
    }
}

/// Runs SQLite's `quick_check` on the file before the ledger serves: a corrupt one is
/// refused under `fail_closed` and named in `/readyz` from the start, rather than found
/// by a listing that breaks off.
pub(super) async fn check_at_start(store: &Store, health: &Health) -> Result<(), String> {
    match store.quick_check().await {
        Ok(None) => Ok(()),
        Ok(Some(problem)) => {
            tracing::error!(problem = %problem, "the ledger's file is corrupt (PRAGMA quick_check): nothing is acknowledged into it; restore a backup made with `systemone ledger backup` by moving it in place of the file");
            health.set_corrupt(true);
            Ok(())
        }
        Err(e) => Err(format!("the ledger's quick_check: {e}")),
    }
}
