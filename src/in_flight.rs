//! Backpressure: the process-wide cap on upstream requests in flight.
//!
//! Acquiring a slot returns an [`InFlightPermit`], and a backend read takes the permit as
//! an argument, so nothing reaches a backend without one. Waiters queue in FIFO order
//! (tokio's semaphore is fair) and their wait counts against their request's deadline.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The cap on upstream requests in flight, shared by every model and request.
#[derive(Debug, Clone)]
pub struct InFlight {
    /// Free slots; a permit holds one.
    slots: Arc<Semaphore>,
    /// The configured cap.
    cap: usize,
}

/// One upstream request's slot; released when dropped.
#[derive(Debug)]
pub struct InFlightPermit(#[allow(dead_code)] OwnedSemaphorePermit);

impl InFlight {
    /// A cap of `cap` (at least 1).
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        InFlight {
            slots: Arc::new(Semaphore::new(cap)),
            cap,
        }
    }

    /// Waits for a free slot.
    pub async fn acquire(&self) -> InFlightPermit {
        // The semaphore is never closed, so acquiring cannot fail.
        match self.slots.clone().acquire_owned().await {
            Ok(permit) => InFlightPermit(permit),
            Err(_) => unreachable!("the in-flight semaphore is never closed"),
        }
    }

    /// A free slot, if one is free now (never ahead of a waiter: the semaphore hands a
    /// released slot to the first waiter). Lets a caller skip the wait's span when there is
    /// no wait.
    pub fn try_acquire(&self) -> Option<InFlightPermit> {
        self.slots
            .clone()
            .try_acquire_owned()
            .ok()
            .map(InFlightPermit)
    }

    /// Upstream requests in flight right now.
    pub fn in_use(&self) -> usize {
        self.cap - self.slots.available_permits()
    }

    /// The configured cap.
    pub fn cap(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn permits_are_counted_and_released() {
        let cap = InFlight::new(2);
        let a = cap.acquire().await;
        let _b = cap.acquire().await;
        assert_eq!(cap.in_use(), 2);
        let waiting = tokio::spawn({
            let cap = cap.clone();
            async move { cap.acquire().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a);
        let _c = waiting.await.expect("gets the freed slot");
        assert_eq!(cap.in_use(), 2);
    }
}
