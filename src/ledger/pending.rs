//! A record on its way to the store, and who waits for it: what the writer, its backlog
//! and a request's send share.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::fate::Fate;
use super::store::{StoreError, StoredRow};

/// A record and who waits for its commit.
pub(super) struct Pending {
    pub(super) row: StoredRow,
    /// Written in place of `row` once the request withdrew it ([`Fate`]): the refusal the
    /// request got under `fail_closed`. `None`: `row` stands whatever the request does.
    pub(super) instead: Option<StoredRow>,
    pub(super) fate: Arc<Fate>,
    /// Who waits for the commit; `None` once told (a record kept to write again).
    pub(super) done: Option<oneshot::Sender<Result<(), StoreError>>>,
    /// Failures of this record right after the store took a write ([`super::backlog`]).
    pub(super) strikes: u8,
}

impl Pending {
    /// A record its request waits for; `instead` as in [`Pending::instead`].
    pub(super) fn new(
        row: StoredRow,
        instead: Option<StoredRow>,
        fate: Arc<Fate>,
        done: oneshot::Sender<Result<(), StoreError>>,
    ) -> Self {
        Pending {
            row,
            instead,
            fate,
            done: Some(done),
            strikes: 0,
        }
    }

    /// What to write now: the refusal its request withdrew the answer for, else the row.
    pub(super) fn current(&self) -> &StoredRow {
        match &self.instead {
            Some(refusal) if self.fate.withdrawn() => refusal,
            _ => &self.row,
        }
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A record may hold hashes of the caller's text: never printed.
        f.write_str("Pending")
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ledger::draft::{refused, Identity};
    use crate::ledger::key::LedgerKey;
    use crate::secret::Secret;

    /// A record for request `n`, and the receiver its commit would be told on.
    pub(in crate::ledger) fn pending(
        n: usize,
    ) -> (Pending, oneshot::Receiver<Result<(), StoreError>>) {
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
        (Pending::new(row, None, Arc::default(), done), heard)
    }
}
