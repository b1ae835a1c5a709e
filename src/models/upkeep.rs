//! Model upkeep in the background: one task per model runs its token-table check and its
//! dialect's host probe (the `openai` dialect's) on their intervals, so that requests and
//! `/readyz` only ever read the last verdict and never wait on a backend (a readiness probe
//! times out after 1 s; a check against a cold vLLM can take tens of seconds).
//!
//! A cold backend, whose first check or probe cannot conclude (a timeout, a 503), is retried
//! with backoff from [`RETRY_FIRST`] doubling to [`RETRY_MAX`] until it concludes; after
//! that, the check's own interval applies. The task holds its model weakly and ends when
//! the registry that owns the model is dropped.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::Model;
use crate::backend::Due;
use crate::in_flight::InFlight;

/// The first retry of an attempt that could not conclude.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between retries of attempts that could not conclude.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// Starts `model`'s upkeep task, once per model (later calls do nothing). Started where
/// models start serving: the service's router starts every model's
/// ([`super::Models::start_upkeep`]); code that runs a pipeline on a model of its own (a
/// test) calls this first. A request never starts it. Needs a tokio runtime; without one,
/// nothing starts (a later call from inside one will).
pub fn start(model: &Arc<Model>, in_flight: &InFlight) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if model.upkeep_started.swap(true, Ordering::AcqRel) {
        return;
    }
    runtime.spawn(keep(Arc::downgrade(model), in_flight.clone()));
}

/// One kind of upkeep of a model, with its schedule.
struct Chore {
    /// For the log.
    name: &'static str,
    /// When it runs next.
    at: Option<Instant>,
    /// Attempts in a row that could not conclude.
    failures: u32,
}

impl Chore {
    fn new(name: &'static str) -> Self {
        Chore {
            name,
            at: Some(Instant::now()),
            failures: 0,
        }
    }

    fn is_due(&self, now: Instant) -> bool {
        self.at.is_some_and(|at| at <= now)
    }

    /// Schedules the next run from what the one that finished said.
    fn schedule(&mut self, model: &str, due: Due) {
        let now = Instant::now();
        self.at = match due {
            Due::In(after) => {
                self.failures = 0;
                Some(now + after)
            }
            Due::Never => None,
            Due::Retry => {
                let wait = backoff(self.failures);
                self.failures += 1;
                tracing::warn!(
                    model,
                    chore = self.name,
                    attempts = self.failures,
                    retry_in_secs = wait.as_secs(),
                    "the backend did not answer this check yet; retrying with backoff"
                );
                Some(now + wait)
            }
        };
    }
}

/// The wait after `failures` earlier attempts that could not conclude.
fn backoff(failures: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << failures.min(16))
        .min(RETRY_MAX)
}

/// The task: the dialect's host upkeep (the `openai` probe, the context window) and the
/// token-table check, each when due and side by side (the one dialect whose probe must
/// come first, `openai`, has no token check), then sleep to the next due time.
async fn keep(model: Weak<Model>, in_flight: InFlight) {
    let mut probe = Chore::new("host probe");
    let mut check = Chore::new("token-table check");
    loop {
        let Some(m) = model.upgrade() else { return };
        let now = Instant::now();
        let probe_due = probe.is_due(now);
        let check_due = check.is_due(now);
        let (probed, checked) = tokio::join!(
            async {
                match probe_due {
                    true => Some(m.serving.upkeep(&in_flight).await),
                    false => None,
                }
            },
            async {
                match (check_due, m.serving.reads()) {
                    (true, Some(backend)) => {
                        let due = m.verifier.check(backend, &m.table, &in_flight).await;
                        // Each replica of a fleet checks the table against its own tokenizer.
                        Some(match m.serving.fleet() {
                            Some(fleet) => {
                                due.sooner(fleet.check_tables(&m.table, &in_flight).await)
                            }
                            None => due,
                        })
                    }
                    // A model that forwards has no token table of its own to check.
                    (true, None) => Some(Due::Never),
                    (false, _) => None,
                }
            },
        );
        if let Some(due) = probed {
            probe.schedule(&m.name, due);
        }
        if let Some(due) = checked {
            check.schedule(&m.name, due);
        }
        drop(m);
        let Some(next) = [probe.at, check.at].into_iter().flatten().min() else {
            return;
        };
        tokio::time::sleep_until(next).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_one_second_to_thirty() {
        let waits: Vec<u64> = (0..8).map(|f| backoff(f).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
    }
}
