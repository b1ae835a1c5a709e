//! The in-memory store: each key's limits in its own [`super::LocalLimits`] (what the
//! service always did) and usage in a map. Every replica counts alone; a restart forgets.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::{self, BoxFuture, FutureExt};

use super::{Checked, KeyQuota, LimitStore, Now, StoreError, UsageCounts, UsageRow};

/// Usage by (key name, day), in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    /// (key name, UTC day) → counters; ordered so reads come out by key then day.
    usage: Mutex<BTreeMap<(String, u64), UsageCounts>>,
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, u64), UsageCounts>> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads usage rows of `names` on `from..=to` from a (key, day) map.
pub(super) fn rows_of<'a>(
    entries: impl Iterator<Item = (&'a (String, u64), &'a UsageCounts)>,
    names: &[String],
    from: u64,
    to: u64,
) -> Vec<UsageRow> {
    entries
        .filter(|((name, day), counts)| {
            (from..=to).contains(day) && names.contains(name) && !counts.is_empty()
        })
        .map(|((key, day), counts)| UsageRow {
            key: key.clone(),
            day: *day,
            counts: *counts,
        })
        .collect()
}

impl LimitStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn remote(&self) -> bool {
        false
    }

    fn take_request<'a>(&'a self, key: &'a Arc<KeyQuota>, _now: Now) -> BoxFuture<'a, Checked> {
        future::ready(Ok(key.local.take_request())).boxed()
    }

    fn take_questions<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        questions: usize,
        now: Now,
    ) -> BoxFuture<'a, Checked> {
        let verdict = key.local.take_questions_at(questions, now.unix_secs());
        future::ready(Ok(verdict)).boxed()
    }

    fn refund<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
        questions: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        key.local.refund(day, questions);
        future::ready(Ok(())).boxed()
    }

    fn record<'a>(
        &'a self,
        name: &'a str,
        day: u64,
        counts: UsageCounts,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.lock()
            .entry((name.to_string(), day))
            .or_default()
            .add(&counts);
        future::ready(Ok(())).boxed()
    }

    fn usage<'a>(
        &'a self,
        names: &'a [String],
        from: u64,
        to: u64,
    ) -> BoxFuture<'a, Result<Vec<UsageRow>, StoreError>> {
        let rows = rows_of(self.lock().iter(), names, from, to);
        future::ready(Ok(rows)).boxed()
    }

    fn daily_used<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        future::ready(Ok(key.local.used_on(day))).boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        future::ready(Ok(())).boxed()
    }
}
