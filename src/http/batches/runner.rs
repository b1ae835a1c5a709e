//! Runs batches: each in its own task, its pending lines those of one state together (so
//! their reads reuse the model server's prefix cache, and the routing key sends them to one
//! replica), at most `--batch-concurrency` of them at once (`--batch-max-concurrency` with
//! every batch's), each starting only while no online request is in progress nor was answered
//! within `--batch-online-gap-ms`, and the upstream reads in flight are fewer than the batch
//! share of the in-flight cap (`batch/online.rs`). A batch ends `completed` when every line
//! is finished, `expired` when its `completion_window` ends first, `cancelled` when asked;
//! the lines an ending leaves go to the error file (`batch_expired`, `batch_cancelled`),
//! the finished ones are kept.
//!
//! A service started on a store with unfinished batches runs them on ([`resume`]): their
//! finished lines stay as they are, the others run again with the same request ids.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;

use super::line;
use crate::batch::progress::Progress;
use crate::batch::rows::BatchRow;
use crate::batch::store::Store;
use crate::http::auth::Caller;
use crate::http::AppState;

/// Rounds of a batch's pending lines before it waits for a restart: a line stays pending
/// only when the commit of its output failed.
const ROUNDS: usize = 3;

/// How a batch ended.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Completed,
    Expired,
    Cancelled,
}

/// Runs on every unfinished batch of the store, when the service starts in a runtime with a
/// state directory (a store in memory has none).
pub(in crate::http) fn resume(state: &AppState) {
    if tokio::runtime::Handle::try_current().is_err() || !state.batches.durable() {
        return;
    }
    let state = state.clone();
    tokio::spawn(async move {
        let store = match state.batches.open().await {
            Ok((store, _)) => store.clone(),
            Err(e) => return tracing::warn!(error = %e, "the batch store did not open"),
        };
        let unfinished = match store.unfinished().await {
            Ok(batches) => batches,
            Err(e) => return tracing::warn!(error = %e, "the batch store could not be read"),
        };
        for batch in unfinished {
            match state
                .keys
                .caller_named(&batch.owner, batch.owner_tier.as_deref())
            {
                Some(caller) => launch(&state, caller, batch),
                None => tracing::warn!(
                    "a batch's caller is no longer configured: it waits until it expires"
                ),
            }
        }
    });
}

/// Runs `batch` as `caller` in the background, unless it runs here already.
pub(super) fn launch(state: &AppState, caller: Caller, batch: BatchRow) {
    let Some(lever) = state.batches.start_running(&batch.id) else {
        return;
    };
    let state = state.clone();
    tokio::spawn(async move {
        let id = batch.id.clone();
        if let Err(e) = run(&state, &caller, &batch, lever).await {
            tracing::warn!(error = %e, "a batch stopped; it goes on when the service restarts");
        }
        state.batches.stop_running(&id);
    });
}

/// The batch's lines until they are done, its window ends or it is cancelled; then its end.
async fn run(
    state: &AppState,
    caller: &Caller,
    batch: &BatchRow,
    lever: Arc<Notify>,
) -> Result<(), String> {
    let (store, progress) = state.batches.open().await?;
    let ending = if batch.status == "cancelling" {
        Ending::Cancelled
    } else {
        let left = u64::try_from(batch.expires_at - now_secs()).unwrap_or(0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(left);
        tokio::select! {
            ran = run_lines(state, caller, batch, store, progress) => ran.map(|()| Ending::Completed)?,
            () = tokio::time::sleep_until(deadline) => Ending::Expired,
            () = lever.notified() => Ending::Cancelled,
        }
    };
    progress.flush().await;
    end(state, store, &batch.id, ending).await
}

/// Every pending line, by state, within the batch's and the service's limits; again while
/// some stay pending (a commit that failed), at most [`ROUNDS`] times.
async fn run_lines(
    state: &AppState,
    caller: &Caller,
    batch: &BatchRow,
    store: &Store,
    progress: &Progress,
) -> Result<(), String> {
    let per_batch = state.batches.settings.batch_concurrency as usize;
    for _ in 0..ROUNDS {
        let pending = store.pending_lines(&batch.id).await?;
        if pending.is_empty() {
            return Ok(());
        }
        futures::stream::iter(pending)
            .for_each_concurrent(per_batch, |pending| async move {
                let _slot = state.batches.lines.acquire().await;
                room(state).await;
                progress
                    .done(line::run(state, caller, batch, pending).await)
                    .await;
            })
            .await;
        progress.flush().await;
    }
    Err("some lines' progress was not committed".into())
}

/// Waits until a line may start behind online traffic ([`crate::batch::Online::room`]): no
/// online request in progress, none answered within the gap, and fewer upstream reads in
/// flight than the batch share of the cap.
async fn room(state: &AppState) {
    let batches = &state.batches;
    batches
        .online
        .room(state.pipeline.in_flight(), batches.room)
        .await;
}

/// Records how batch `id` ended: its remaining lines to the error file, its status.
async fn end(state: &AppState, store: &Store, id: &str, ending: Ending) -> Result<(), String> {
    let now = now_secs();
    let status = match ending {
        Ending::Completed => {
            store.set_status(id, "finalizing", now).await?;
            "completed"
        }
        Ending::Expired => {
            let why = "the batch's completion_window ended before this line ran";
            store.close_remaining(id, "batch_expired", why).await?;
            "expired"
        }
        Ending::Cancelled => {
            let why = "the batch was cancelled before this line ran";
            store.close_remaining(id, "batch_cancelled", why).await?;
            "cancelled"
        }
    };
    store.set_status(id, status, now).await?;
    state.metrics.count_batch(status);
    Ok(())
}

/// Unix seconds now.
pub(super) fn now_secs() -> i64 {
    crate::ledger::now_ms() / 1000
}
