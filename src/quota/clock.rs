//! [`LimitClock`]: where the limits read the time, and the [`Now`] they are evaluated at.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::days::DAY_SECS;

#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Microseconds since the Unix epoch (this process's clock, or the test's).
    pub micros: u64,
    /// Whether a shared store should use its own clock for per-minute limits (so replicas
    /// with skewed clocks agree): true unless a test set the time.
    pub server_clock: bool,
}

impl Now {
    /// Whole seconds since the epoch.
    pub fn unix_secs(&self) -> u64 {
        self.micros / 1_000_000
    }
    /// The UTC day number.
    pub fn day(&self) -> u64 {
        self.unix_secs() / DAY_SECS
    }
}

/// Where [`super::Quotas`] reads the time: the system clock, or one a test sets.
#[derive(Debug, Clone, Default)]
pub enum LimitClock {
    /// `SystemTime::now()`, and the shared store's own clock for per-minute limits.
    #[default]
    System,
    /// Microseconds since the epoch, moved by the test that holds it.
    Manual(Arc<AtomicU64>),
}

impl LimitClock {
    /// The time now.
    pub fn now(&self) -> Now {
        match self {
            LimitClock::System => Now {
                micros: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as u64),
                server_clock: true,
            },
            LimitClock::Manual(micros) => Now {
                micros: micros.load(Ordering::SeqCst),
                server_clock: false,
            },
        }
    }
}
