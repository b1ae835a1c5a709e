//! One key's limits held in this process: GCRA per minute via `governor` on tokio's clock
//! (paused-time tests refill it with `tokio::time::advance`) and a `Mutex` daily counter.
//!
//! This is the whole of the in-memory store, the per-minute half of the embedded store (a
//! restart forgets at most a minute of rate), and what `fail_open` counts against while
//! Redis cannot answer.

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{InsufficientCapacity, Quota, RateLimiter};

use super::key_limits::KeyLimits;
use super::refusal::{retry_secs, LimitKind, Refusal};
use crate::days::{secs_to_utc_midnight, DAY_SECS};

/// governor's clock on tokio's time: paused-time tests move it with `tokio::time::advance`.
#[derive(Debug, Clone, Copy)]
struct TokioClock {
    /// Time zero of this clock.
    origin: tokio::time::Instant,
}

impl Clock for TokioClock {
    type Instant = Nanos;
    fn now(&self) -> Nanos {
        Nanos::from(self.origin.elapsed())
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Nanos>>;

/// A per-minute limit's GCRA state.
struct PerMinute {
    /// The GCRA state.
    limiter: Limiter,
    /// The limiter's clock, to turn a refusal into a wait.
    clock: TokioClock,
}

impl PerMinute {
    fn new(limit: NonZeroU32) -> Self {
        let clock = TokioClock {
            origin: tokio::time::Instant::now(),
        };
        PerMinute {
            limiter: RateLimiter::direct_with_clock(Quota::per_minute(limit), clock),
            clock,
        }
    }

    /// Takes `n` cells, or says how many seconds until they would be free (`None`: never,
    /// `n` is above the limit).
    fn take(&self, n: NonZeroU32) -> Result<(), Option<u64>> {
        match self.limiter.check_n(n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(Some(retry_secs(wait)))
            }
            Err(InsufficientCapacity(_)) => Err(None),
        }
    }
}

/// One key's limits and their in-process state.
pub struct LocalLimits {
    /// The configured numbers.
    limits: KeyLimits,
    /// Requests per minute.
    requests: Option<PerMinute>,
    /// Questions per minute.
    questions: Option<PerMinute>,
    /// (UTC day number, questions taken that day).
    daily: Mutex<(u64, u64)>,
}

impl std::fmt::Debug for LocalLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimits")
            .field("limits", &self.limits)
            .finish()
    }
}

impl LocalLimits {
    /// Fresh state for `limits`.
    pub fn new(limits: KeyLimits) -> Self {
        LocalLimits {
            requests: limits.requests_per_minute.map(PerMinute::new),
            questions: limits.questions_per_minute.map(PerMinute::new),
            daily: Mutex::new((0, 0)),
            limits,
        }
    }

    /// The configured numbers.
    pub fn limits(&self) -> &KeyLimits {
        &self.limits
    }

    /// Counts one request against the requests per minute.
    pub fn take_request(&self) -> Result<(), Refusal> {
        let (Some(limiter), Some(limit)) = (&self.requests, self.limits.requests_per_minute) else {
            return Ok(());
        };
        limiter
            .take(NonZeroU32::MIN)
            .map_err(|retry| Refusal::RateLimited {
                kind: LimitKind::Requests,
                limit: limit.get(),
                retry_after: retry.unwrap_or(super::MAX_RATE_RETRY_SECS),
            })
    }

    /// Takes `questions` from the questions per minute only (the embedded store keeps the
    /// daily count on disk and calls this inside its write transaction).
    pub fn take_question_rate(&self, questions: usize) -> Result<(), Refusal> {
        let (Some(limiter), Some(limit)) = (&self.questions, self.limits.questions_per_minute)
        else {
            return Ok(());
        };
        let cells = NonZeroU32::new(u32::try_from(questions).unwrap_or(u32::MAX))
            .unwrap_or(NonZeroU32::MIN);
        limiter.take(cells).map_err(|retry| match retry {
            Some(retry_after) => Refusal::RateLimited {
                kind: LimitKind::Questions,
                limit: limit.get(),
                retry_after,
            },
            None => Refusal::OverMinuteLimit {
                questions,
                limit: limit.get(),
            },
        })
    }

    /// Counts `questions` against the questions per minute and the daily cap at
    /// `unix_secs`; nothing is taken from either when one of them refuses.
    pub fn take_questions_at(&self, questions: usize, unix_secs: u64) -> Result<(), Refusal> {
        let n = questions as u64;
        let today = unix_secs / DAY_SECS;
        // Held across the per-minute check so that a refusal there takes nothing from today.
        let mut used = self.daily.lock().unwrap_or_else(|p| p.into_inner());
        if used.0 != today {
            *used = (today, 0);
        }
        if let Some(cap) = self.limits.daily_questions {
            check_cap(cap, used.1, questions, unix_secs)?;
        }
        self.take_question_rate(questions)?;
        used.1 += n;
        Ok(())
    }

    /// Gives back `questions` taken on `day` (a request refused before any upstream call).
    pub fn refund(&self, day: u64, questions: u64) {
        let mut used = self.daily.lock().unwrap_or_else(|p| p.into_inner());
        if used.0 == day {
            used.1 = used.1.saturating_sub(questions);
        }
    }

    /// Questions taken on `day` in this process.
    pub fn used_on(&self, day: u64) -> u64 {
        let used = self.daily.lock().unwrap_or_else(|p| p.into_inner());
        if used.0 == day {
            used.1
        } else {
            0
        }
    }
}

/// Refuses `questions` more when `used` of `cap` leaves no room for them.
pub(super) fn check_cap(
    cap: u64,
    used: u64,
    questions: usize,
    unix_secs: u64,
) -> Result<(), Refusal> {
    if used.saturating_add(questions as u64) > cap {
        return Err(Refusal::DailyCap {
            limit: cap,
            used,
            questions,
            retry_after: secs_to_utc_midnight(unix_secs),
        });
    }
    Ok(())
}

/// A per-minute wait as whole seconds (used by the Redis store on GCRA waits in µs).
pub(super) fn wait_secs(micros: u64) -> u64 {
    retry_secs(Duration::from_micros(micros))
}
