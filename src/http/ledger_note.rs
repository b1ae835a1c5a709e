//! What the ledger step notes about a request as the steps learn it: who asked, which
//! model served, and whether its record is made. The middleware reads it when a door's
//! refusal leaves, to record that refusal once. The ledger's own note, apart from the
//! summary line's ([`super::summary`]), which is written for the log and may say more or
//! less without changing what is recorded.

use std::sync::{Mutex, MutexGuard};

/// The note of one request (its [`super::context::RequestContext`] carries it).
#[derive(Debug, Default)]
pub(super) struct LedgerNote {
    noted: Mutex<Noted>,
}

/// What was noted, as plain values.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Noted {
    /// The caller's key name (never the key).
    pub key: Option<String>,
    /// The configured model that serves.
    pub model: Option<String>,
    /// The ledger holds this request's record (or its miss was counted).
    pub recorded: bool,
}

impl LedgerNote {
    /// What was noted so far.
    pub(super) fn noted(&self) -> Noted {
        self.lock().clone()
    }

    /// Notes the caller's key name.
    pub(super) fn note_key(&self, name: &str) {
        self.lock().key = Some(name.to_owned());
    }

    /// Notes the model that serves.
    pub(super) fn note_model(&self, name: &str) {
        self.lock().model = Some(name.to_owned());
    }

    /// Notes that the ledger holds the request's record.
    pub(super) fn note_recorded(&self) {
        self.lock().recorded = true;
    }

    fn lock(&self) -> MutexGuard<'_, Noted> {
        // Plain values: still usable after a panic elsewhere.
        self.noted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_keep_what_the_ledger_records() {
        let note = LedgerNote::default();
        assert_eq!(note.noted(), Noted::default());
        note.note_key("acme");
        note.note_model("gemma");
        note.note_recorded();
        let want = Noted {
            key: Some("acme".into()),
            model: Some("gemma".into()),
            recorded: true,
        };
        assert_eq!(note.noted(), want);
    }
}
