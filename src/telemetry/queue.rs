//! The export queue: ended spans go into a bounded queue and a task on the service's
//! runtime sends them to the collector in batches, so a request never waits on the
//! collector. A full queue (the collector slow or gone) drops the span and counts it
//! (`systemone_trace_spans_dropped_total{reason="queue_full"}`), as does a batch the
//! collector refused or that could not be sent (`export_failed`).
//!
//! It runs where the HTTP client does (the OpenTelemetry SDK's batch processor runs a thread
//! of its own and counts its drops only in a log line at shutdown) and counts each drop. Its
//! sizes are the standard `OTEL_BSP_*` variables.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout_at, Instant};

use super::client::Exporter;
use super::record::SpanRecord;
use crate::metrics::trace_spans_dropped;

/// The queue's and batches' sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sizes {
    /// Most spans waiting (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048).
    pub queue: usize,
    /// Most spans in one export (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512).
    pub batch: usize,
    /// Longest a span waits for its batch to fill (`OTEL_BSP_SCHEDULE_DELAY`, 5000 ms).
    pub delay: Duration,
}

impl Sizes {
    /// From the standard variables, read through `env`; a value that is not a positive
    /// number keeps the default.
    pub(super) fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str, default: u64| {
            env(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        let queue = number("OTEL_BSP_MAX_QUEUE_SIZE", 2048) as usize;
        Sizes {
            queue,
            batch: (number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512) as usize).min(queue),
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)),
        }
    }
}

/// Hands each sampled span that ends to the export task.
#[derive(Debug, Clone)]
pub(super) struct Queue {
    spans: mpsc::Sender<SpanRecord>,
}

/// Asks the export task to send what it holds now; answered once it has.
pub(super) type Flush = mpsc::Sender<oneshot::Sender<()>>;

/// The processor and the flush handle; the export task is spawned on `runtime`.
pub(super) fn start(
    exporter: Exporter,
    sizes: Sizes,
    runtime: &tokio::runtime::Handle,
) -> (Queue, Flush) {
    let (spans, queued) = mpsc::channel(sizes.queue);
    let (flush, flushes) = mpsc::channel(1);
    runtime.spawn(export_loop(exporter, sizes, queued, flushes));
    (Queue { spans }, flush)
}

impl Queue {
    /// Queues `span` for export, or drops and counts it when the queue is full.
    pub(super) fn push(&self, span: SpanRecord) {
        if self.spans.try_send(span).is_err() {
            trace_spans_dropped()
                .with_label_values(&["queue_full"])
                .inc();
        }
    }
}

/// Waits for a first span, gathers more until the batch is full or `delay` has passed,
/// sends them; a flush sends everything queued at once. Ends when the processor is gone.
async fn export_loop(
    exporter: Exporter,
    sizes: Sizes,
    mut queued: mpsc::Receiver<SpanRecord>,
    mut flushes: mpsc::Receiver<oneshot::Sender<()>>,
) {
    loop {
        let first = tokio::select! {
            span = queued.recv() => span,
            Some(done) = flushes.recv() => {
                while let Some(batch) = drain(&mut queued, sizes.batch) {
                    export(&exporter, batch).await;
                }
                let _ = done.send(());
                continue;
            }
        };
        let Some(first) = first else { return };
        let mut batch = Vec::with_capacity(sizes.batch);
        batch.push(first);
        let deadline = Instant::now() + sizes.delay;
        // Everything already queued at each wake-up, not one span a wake-up (a new timer each).
        while batch.len() < sizes.batch {
            let room = sizes.batch - batch.len();
            match timeout_at(deadline, queued.recv_many(&mut batch, room)).await {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        export(&exporter, batch).await;
    }
}

/// Up to `most` spans already queued, or `None` when there are none.
fn drain(queued: &mut mpsc::Receiver<SpanRecord>, most: usize) -> Option<Vec<SpanRecord>> {
    let mut batch = Vec::new();
    while batch.len() < most {
        match queued.try_recv() {
            Ok(span) => batch.push(span),
            Err(_) => break,
        }
    }
    (!batch.is_empty()).then_some(batch)
}

/// Sends one batch; a failure drops it, counted, and is logged (at most one line a minute).
async fn export(exporter: &Exporter, batch: Vec<SpanRecord>) {
    let spans = batch.len() as u64;
    if let Err(e) = exporter.export(&batch).await {
        trace_spans_dropped()
            .with_label_values(&["export_failed"])
            .inc_by(spans);
        warn_at_most_every_minute(&e.to_string());
    }
}

/// The export failure's log line, unless one was written in the last minute.
fn warn_at_most_every_minute(error: &str) {
    use std::sync::Mutex;
    static LAST: Mutex<Option<std::time::Instant>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
        return;
    }
    *last = Some(std::time::Instant::now());
    tracing::warn!(
        error,
        "trace export failed: the batch is dropped and counted in systemone_trace_spans_dropped_total"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_come_from_the_standard_variables_or_default() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let default = Sizes::from_env(env(&[]));
        assert_eq!((default.queue, default.batch), (2048, 512));
        assert_eq!(default.delay, Duration::from_secs(5));
        let set = Sizes::from_env(env(&[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100"),
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ]));
        assert_eq!((set.queue, set.batch), (8, 8));
        assert_eq!(set.delay, Duration::from_millis(20));
        let bad = Sizes::from_env(env(&[("OTEL_BSP_MAX_QUEUE_SIZE", "0")]));
        assert_eq!(bad.queue, 2048);
    }
}
