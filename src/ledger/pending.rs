//! A record on its way to the store, and who waits for it: what the writer, its backlog
//! and a request's send share.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::fate::Fate;
use super::store::{StoreError, StoredRow};

/// A record and who waits for its commit.
pub(super) struct Pending {
    /// What to write: the request's record, or, once it withdrew its answer ([`Fate`]),
    /// the refusal it got under `fail_closed`.
    pub(super) row: StoredRow,
    /// Whether `row` is that refusal.
    pub(super) refusal: bool,
    pub(super) fate: Arc<Fate>,
    /// Who waits for the commit; `None` once told (a record kept to write again).
    pub(super) done: Option<oneshot::Sender<Result<(), StoreError>>>,
    /// Failures of this record right after the store took a write ([`super::backlog`]).
    pub(super) strikes: u8,
}

impl Pending {
    /// A record its request waits for.
    pub(super) fn new(
        row: StoredRow,
        fate: Arc<Fate>,
        done: oneshot::Sender<Result<(), StoreError>>,
    ) -> Self {
        Pending {
            row,
            refusal: false,
            fate,
            done: Some(done),
            strikes: 0,
        }
    }

    /// Puts the refusal in place of the answer if the request withdrew it; whether the row
    /// is now a refusal.
    pub(super) fn take_withdrawal(&mut self) -> bool {
        if let Some(refusal) = self.fate.take_refusal() {
            self.row = refusal;
            self.refusal = true;
        }
        self.refusal
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
        (Pending::new(row, Arc::default(), done), heard)
    }
}
