//! What a request and the ledger's writer agree on about one record, when the request may
//! stop waiting for it.
//!
//! A request waits for its record at most `--ledger-timeout-ms`; the writer keeps a record
//! whose commit failed and writes it again once the store is back ([`super::writer`]), so a
//! record outlives its request's wait. Under `fail_closed` a request that stopped waiting is
//! refused 503, and then its record must say so, not name the answer that was withheld:
//! the request *withdraws* its answer, and the writer records the refusal instead. The two
//! race (the answer's commit may be on its way when the request gives up), so the record's
//! fate is settled once, by whichever comes first:
//!
//! * the writer, after the answer's commit, [`Fate::settle`]s it: the answer stands, and a
//!   request that gives up afterwards learns it was on record after all (and answers);
//! * the request [`Fate::withdraw`]s it first, handing over its refusal's record (made only
//!   then: the answers that commit in time pay nothing for this): the writer writes the
//!   refusal, in place of the answer if that had already landed (a refusal's record
//!   replaces its request's answer in the store: see [`super::store::Store::insert_sql`]).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use super::store::StoredRow;

/// Nobody decided yet.
const OPEN: u8 = 0;
/// The request stopped waiting and was refused: its refusal is to be recorded.
const WITHDRAWN: u8 = 1;
/// The answer landed before the request gave up: it stands.
const SETTLED: u8 = 2;

/// One record's fate (see the module doc).
#[derive(Debug, Default)]
pub(super) struct Fate {
    state: AtomicU8,
    /// The refusal to record, put here by the request before it withdraws.
    refusal: Mutex<Option<StoredRow>>,
}

impl Fate {
    /// The request gives up on its answer's record (and refuses the call), `refusal` to be
    /// recorded instead. `false`: too late, the answer is already on record, and the
    /// request may answer after all.
    pub(super) fn withdraw(&self, refusal: StoredRow) -> bool {
        // In place before the state says so: a writer that sees `WITHDRAWN` finds it.
        *self.refusal.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal);
        match self
            .state
            .compare_exchange(OPEN, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(now) => now == WITHDRAWN,
        }
    }

    /// The writer's answer landed. `false`: the request had withdrawn it, so the refusal
    /// must be written over it.
    pub(super) fn settle(&self) -> bool {
        match self
            .state
            .compare_exchange(OPEN, SETTLED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(now) => now == SETTLED,
        }
    }

    /// The refusal to write in place of the answer, once the request withdrew it (taken:
    /// the writer keeps it from then on).
    pub(super) fn take_refusal(&self) -> Option<StoredRow> {
        if self.state.load(Ordering::Acquire) != WITHDRAWN {
            return None;
        }
        self.refusal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::pending::tests::pending;

    fn refusal() -> StoredRow {
        pending(7).0.row
    }

    #[test]
    fn a_withdrawal_first_makes_the_refusal_the_record() {
        let fate = Fate::default();
        assert!(
            fate.take_refusal().is_none(),
            "nothing to write instead yet"
        );
        assert!(fate.withdraw(refusal()), "the first withdrawal decides");
        assert!(!fate.settle(), "an answer landing later must be replaced");
        let instead = fate.take_refusal().expect("the refusal");
        assert_eq!(instead.request_id(), "req_7");
        assert!(fate.take_refusal().is_none(), "taken once");
    }

    #[test]
    fn an_answer_landing_first_stands() {
        let fate = Fate::default();
        assert!(fate.settle(), "the first settle decides");
        assert!(
            !fate.withdraw(refusal()),
            "a request giving up later answers after all"
        );
        assert!(fate.take_refusal().is_none());
        assert!(fate.settle(), "settling twice says the same");
    }
}
