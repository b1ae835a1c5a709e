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
//! * the request [`Fate::withdraw`]s it first: the writer writes the refusal, in place of
//!   the answer if that had already landed (a refusal's record replaces its request's
//!   answer in the store: see [`super::store::Store::insert_sql`]).

use std::sync::atomic::{AtomicU8, Ordering};

/// Nobody decided yet.
const OPEN: u8 = 0;
/// The request stopped waiting and was refused: its refusal is to be recorded.
const WITHDRAWN: u8 = 1;
/// The answer landed before the request gave up: it stands.
const SETTLED: u8 = 2;

/// One record's fate (see the module doc).
#[derive(Debug, Default)]
pub(super) struct Fate(AtomicU8);

impl Fate {
    /// The request gives up on its answer's record (and refuses the call). `false`: too
    /// late, the answer is already on record, and the request may answer after all.
    pub(super) fn withdraw(&self) -> bool {
        match self
            .0
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
            .0
            .compare_exchange(OPEN, SETTLED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(now) => now == SETTLED,
        }
    }

    /// Whether the request withdrew its answer (the writer then writes the refusal).
    pub(super) fn withdrawn(&self) -> bool {
        self.0.load(Ordering::Acquire) == WITHDRAWN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_withdrawal_first_makes_the_refusal_the_record() {
        let fate = Fate::default();
        assert!(fate.withdraw(), "the first withdrawal decides");
        assert!(!fate.settle(), "an answer landing later must be replaced");
        assert!(fate.withdrawn());
        assert!(fate.withdraw(), "withdrawing twice says the same");
    }

    #[test]
    fn an_answer_landing_first_stands() {
        let fate = Fate::default();
        assert!(fate.settle(), "the first settle decides");
        assert!(
            !fate.withdraw(),
            "a request giving up later answers after all"
        );
        assert!(!fate.withdrawn());
        assert!(fate.settle(), "settling twice says the same");
    }
}
