//! [`Subjects`]: the limit state of token callers, one [`KeyQuota`] per subject, kept
//! across requests so that a subject's per-minute limits are counted in this process as a
//! key's are (the shared stores count by name anyway).
//!
//! Bounded: past [`MAX_SUBJECTS`] subjects the map starts again empty, which forgets the
//! in-process per-minute state (never the daily counts of a `redb` or Redis store).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::quota::{KeyLimits, KeyQuota};

/// Most subjects whose limit state is kept.
pub(super) const MAX_SUBJECTS: usize = 100_000;

/// Token callers' limit state by name.
#[derive(Debug, Default)]
pub(super) struct Subjects {
    quotas: Mutex<HashMap<String, Arc<KeyQuota>>>,
}

impl Subjects {
    /// The quota of the caller named `name` with `limits` (a fresh one when its limits
    /// changed, e.g. when its token names another tier).
    pub(super) fn quota(&self, name: &str, limits: KeyLimits) -> Arc<KeyQuota> {
        let mut quotas = self.quotas.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = quotas.get(name).filter(|q| *q.limits() == limits) {
            return q.clone();
        }
        if quotas.len() >= MAX_SUBJECTS {
            quotas.clear();
        }
        let q = Arc::new(KeyQuota::new(name.to_owned(), limits));
        quotas.insert(name.to_owned(), q.clone());
        q
    }
}
