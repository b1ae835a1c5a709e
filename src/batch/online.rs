//! [`Online`]: when a batch line may start, behind interactive traffic.
//!
//! A batch line starts only while no online request is between its arrival and its
//! answer, no sooner than `--batch-online-gap-ms` after the last online answer, and only
//! while fewer upstream reads are in flight than the batch share of the cap. Lines already
//! running are never stopped.
//!
//! Why a count over the whole request, not the upstream read's in-flight slot: measured on
//! llama-server with one slot (docs/benchmarks/batches.md), an online request holds its
//! slot only for its read, then waits for the ledger's commit before its answer leaves; a
//! batch line that started in that window took the server's one slot, and the caller's
//! next request waited for that line's whole read (online p50 1.8-2.0× alone at the
//! smallest share). Why the gap after the answer: a caller sending one request after
//! another leaves 9-30 ms between an answer and its next request (measured in that
//! server's log); a line starting there delays that next request the same way.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::in_flight::InFlight;

/// How often a line held back only by the in-flight share looks again: the cap's permits
/// say nothing when they are released, and a line takes at least this long.
const ROOM_POLL: Duration = Duration::from_millis(1);

/// The online requests of a process as a batch line sees them.
#[derive(Debug)]
pub struct Online {
    /// Online requests in progress, and when the last one was answered.
    now: Mutex<Seen>,
    /// Woken when the last online request in progress is answered.
    quiet: Notify,
    /// How long after an online answer a batch line still may not start.
    gap: Duration,
}

/// What [`Online`] has seen.
#[derive(Debug, Default)]
struct Seen {
    /// Online requests between their arrival and their answer.
    in_progress: usize,
    /// When the last online request was answered, if one was.
    answered: Option<Instant>,
}

/// One online request in progress, from its arrival until this is dropped (its answer
/// written, or its caller gone).
#[derive(Debug)]
pub struct OnlineRequest(Arc<Online>);

/// Whether a batch line may start now, as far as online traffic goes.
#[derive(Debug, PartialEq, Eq)]
enum Clear {
    /// An online request is in progress: wait until it is answered.
    Busy,
    /// The gap after the last answer ends then.
    At(Instant),
    /// Now.
    Yes,
}

impl Online {
    /// No online request yet; `gap` after each answer in which no batch line starts.
    pub fn new(gap: Duration) -> Arc<Self> {
        Arc::new(Online {
            now: Mutex::default(),
            quiet: Notify::new(),
            gap,
        })
    }

    /// An online request arrived: batch lines wait until it, and every other one in
    /// progress, is answered.
    pub fn arrive(self: &Arc<Self>) -> OnlineRequest {
        self.seen().in_progress += 1;
        OnlineRequest(self.clone())
    }

    /// Waits until a batch line may start: no online request in progress, the gap after the
    /// last answer gone by, and fewer than `room` upstream reads in `in_flight` (online and
    /// batch together). All three hold at the moment this returns.
    pub async fn room(&self, in_flight: &InFlight, room: usize) {
        loop {
            let quiet = self.quiet.notified();
            tokio::pin!(quiet);
            quiet.as_mut().enable();
            match self.clear() {
                Clear::Busy => quiet.await,
                Clear::At(at) => tokio::time::sleep_until(at).await,
                Clear::Yes if in_flight.in_use() < room => return,
                Clear::Yes => tokio::time::sleep(ROOM_POLL).await,
            }
        }
    }

    /// Online requests in progress now.
    pub fn in_progress(&self) -> usize {
        self.seen().in_progress
    }

    /// Whether a batch line may start now, online traffic alone considered.
    fn clear(&self) -> Clear {
        let seen = self.seen();
        match seen.answered.map(|at| at + self.gap) {
            _ if seen.in_progress > 0 => Clear::Busy,
            Some(at) if at > Instant::now() => Clear::At(at),
            _ => Clear::Yes,
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for OnlineRequest {
    /// The request is answered (or its caller gone): the gap starts, and when it was the last
    /// one in progress, waiting lines look again.
    fn drop(&mut self) {
        let mut seen = self.0.seen();
        seen.in_progress = seen.in_progress.saturating_sub(1);
        seen.answered = Some(Instant::now());
        let last = seen.in_progress == 0;
        drop(seen);
        if last {
            self.0.quiet.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAP: Duration = Duration::from_millis(50);

    /// A line waiting for room, as a task, and whether it started.
    fn waiting_line(online: &Arc<Online>, in_flight: &InFlight) -> tokio::task::JoinHandle<()> {
        let (online, in_flight) = (online.clone(), in_flight.clone());
        tokio::spawn(async move { online.room(&in_flight, 1).await })
    }

    /// Lets the waiting task run at the current (paused) instant.
    async fn settle() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_line_starts_only_after_the_online_request_ends_and_the_gap() {
        let (online, in_flight) = (Online::new(GAP), InFlight::new(16));
        let request = online.arrive();
        let line = waiting_line(&online, &in_flight);
        // The online request holds no read (its read ended, its ledger commit is awaited):
        // the in-flight cap is empty, and the line still waits, however long.
        tokio::time::advance(Duration::from_secs(600)).await;
        settle().await;
        assert!(
            !line.is_finished(),
            "started while an online request was in progress"
        );
        drop(request);
        tokio::time::advance(GAP - Duration::from_millis(1)).await;
        settle().await;
        assert!(
            !line.is_finished(),
            "started within the gap after the answer"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert!(line.is_finished(), "did not start once the gap had gone by");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_arrival_in_the_gap_holds_the_line_again() {
        let (online, in_flight) = (Online::new(GAP), InFlight::new(16));
        drop(online.arrive());
        let line = waiting_line(&online, &in_flight);
        tokio::time::advance(GAP / 2).await;
        let next = online.arrive();
        tokio::time::advance(GAP).await;
        settle().await;
        assert!(
            !line.is_finished(),
            "started while the next request was in progress"
        );
        drop(next);
        tokio::time::advance(GAP).await;
        settle().await;
        assert!(line.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn the_share_of_the_cap_still_holds_a_line_without_online_traffic() {
        let (online, in_flight) = (Online::new(GAP), InFlight::new(16));
        let read = in_flight.acquire().await;
        let line = waiting_line(&online, &in_flight);
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert!(
            !line.is_finished(),
            "started beside a read filling the share"
        );
        drop(read);
        tokio::time::advance(ROOM_POLL).await;
        settle().await;
        assert!(line.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_online_request_ever_a_line_starts_at_once() {
        let (online, in_flight) = (Online::new(GAP), InFlight::new(16));
        let line = waiting_line(&online, &in_flight);
        settle().await;
        assert!(line.is_finished());
    }
}
