//! The memory that request bodies may hold together while they are decompressed and
//! parsed (`--max-body-memory-mb`).
//!
//! A body's decoded size is unknown until it is decoded (a 23 KB gzip body can expand to
//! the 24 MiB body limit), and its parsed JSON can be larger than its text; without a
//! shared cap, many such bodies at once hold gigabytes. Every request
//! takes a [`Share`] of one byte semaphore before it holds a body and grows it as the body
//! grows; the share goes back when the [`Share`] is dropped, with the parsed body.
//!
//! Only the first share may wait (up to the body read deadline): a request that already
//! holds some budget and needs more takes it at once or is refused, so two half-decoded
//! bodies can never wait on each other. A body therefore reserves up front what it will
//! most likely need, in one wait: its text (for a compressed body, the whole body limit,
//! since the decoded size is unknown until decoded) and as much again for the value parsed
//! from it, and gives back what decoding did not use at once. Only a parsed value larger
//! than its text (many small numbers or items) grows the share, without waiting.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{ApiError, Code};

/// Budget unit: permits count KiB, so a budget of any size fits the semaphore.
const UNIT: usize = 1024;

/// Seconds a refused caller is told to wait: a burst of bodies is over in well under one.
const RETRY_AFTER_SECS: u64 = 1;

/// The process-wide body memory budget.
#[derive(Debug)]
pub struct BodyBudget {
    /// One permit per KiB of the budget still free.
    free: Arc<Semaphore>,
    /// The whole budget, in KiB: no share may ask for more.
    total: usize,
    /// How long a request may wait for its first share (`None`: as long as it takes, as
    /// a body with the body read timeout off may).
    wait: Option<Duration>,
}

/// A request's part of the [`BodyBudget`]; its bytes go back when it is dropped.
#[derive(Debug)]
pub struct Share {
    /// The permits held (`None` while nothing is).
    held: Option<OwnedSemaphorePermit>,
    /// Where more permits come from.
    free: Arc<Semaphore>,
}

impl BodyBudget {
    /// A budget of `mib` MiB; a first share waits for at most `wait`.
    pub fn new(mib: usize, wait: Option<Duration>) -> Self {
        let total = mib.saturating_mul(1024).clamp(1, Semaphore::MAX_PERMITS);
        BodyBudget {
            free: Arc::new(Semaphore::new(total)),
            total,
            wait,
        }
    }

    /// Bytes of the budget no request holds now.
    pub fn free_bytes(&self) -> usize {
        self.free.available_permits() * UNIT
    }

    /// A first share of `bytes`, waiting for it up to the deadline; 503 beyond it, or at
    /// once when `bytes` is more than the whole budget.
    pub async fn share(&self, bytes: usize) -> Result<Share, ApiError> {
        let units = units(bytes);
        if units > self.total {
            return Err(overloaded());
        }
        let acquire = self.free.clone().acquire_many_owned(units_u32(units));
        let held = match self.wait {
            Some(wait) => tokio::time::timeout(wait, acquire).await.ok(),
            None => Some(acquire.await),
        };
        match held {
            Some(Ok(permit)) => Ok(Share {
                held: Some(permit),
                free: self.free.clone(),
            }),
            _ => Err(overloaded()),
        }
    }
}

impl Share {
    /// Bytes this share covers.
    pub fn bytes(&self) -> usize {
        self.held.as_ref().map_or(0, |p| p.num_permits() * UNIT)
    }

    /// Grows the share to cover `bytes`, without waiting: `false` when the budget has not
    /// that much free now (the caller refuses its request rather than wait while holding).
    pub fn grow_to(&mut self, bytes: usize) -> bool {
        let have = self.held.as_ref().map_or(0, |p| p.num_permits());
        let want = units(bytes);
        if want <= have {
            return true;
        }
        let Ok(more) = self
            .free
            .clone()
            .try_acquire_many_owned(units_u32(want - have))
        else {
            return false;
        };
        match &mut self.held {
            Some(held) => held.merge(more),
            None => self.held = Some(more),
        }
        true
    }

    /// Shrinks the share to cover `bytes`, giving the rest back at once.
    pub fn shrink_to(&mut self, bytes: usize) {
        let keep = units(bytes);
        if let Some(held) = &mut self.held {
            let have = held.num_permits();
            if have > keep {
                drop(held.split(have - keep));
            }
        }
    }
}

/// 503 `system_one_overloaded`: the budget is taken by other bodies for now.
pub fn overloaded() -> ApiError {
    ApiError::new(
        Code::Overloaded,
        "too many request bodies are being read at once; retry shortly",
    )
    .retry_after(RETRY_AFTER_SECS)
}

/// `bytes` in budget units, rounded up.
fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

/// A unit count as the semaphore's `u32`, saturating (more than 4 TiB is refused anyway).
fn units_u32(units: usize) -> u32 {
    u32::try_from(units).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_share_grows_without_waiting_and_goes_back_when_dropped() {
        let budget = BodyBudget::new(1, Some(Duration::ZERO));
        let mut a = budget.share(600 * 1024).await.expect("fits");
        assert!(!a.grow_to(1025 * 1024), "more than the whole budget");
        assert!(a.grow_to(1024 * 1024));
        let refused = budget.share(1).await.expect_err("nothing free");
        assert_eq!(refused.code, Code::Overloaded);
        a.shrink_to(512 * 1024);
        let b = budget
            .share(512 * 1024)
            .await
            .expect("the rest was given back");
        assert_eq!(b.bytes(), 512 * 1024);
        drop((a, b));
        assert!(budget.share(1024 * 1024).await.is_ok());
    }

    #[tokio::test]
    async fn a_first_share_waits_for_a_release() {
        let budget = Arc::new(BodyBudget::new(1, Some(Duration::from_secs(3600))));
        let a = budget.share(1024 * 1024).await.expect("fits");
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.share(1024).await.map(|s| s.bytes()) }
        });
        tokio::task::yield_now().await;
        drop(a);
        assert_eq!(waiting.await.expect("joins").expect("granted"), 1024);
    }
}
