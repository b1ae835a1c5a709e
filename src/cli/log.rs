//! The service log's writer: lines are appended to a buffer in memory and written to
//! stderr in batches by one thread, so the request path pays for no `write` system call.
//!
//! Why not write each line (tracing's default) or `tracing-appender`'s non-blocking writer:
//! at the default `info` level every request logs one line, and a `write` to a pipe or
//! terminal wakes whoever reads it; measured against the zero-latency fake that was a fifth
//! of the service's CPU per answer at one caller. `tracing-appender` moves the `write` to a
//! worker thread but wakes that thread for every line the worker is not already busy with,
//! which at one caller is every line: it would cost more, not less. Here the first line
//! into an empty buffer wakes the writer thread, which waits up to [`BATCH`] for more
//! before writing them all at once: at most one wake-up and one `write` per [`BATCH`].
//!
//! A line at `warn` or above is written at once (with everything before it, in order).
//! When the buffer holds [`MAX_BUFFERED`] bytes (stderr not keeping up), callers wait as
//! they would on a blocking write. [`Flush`] writes what is left when dropped.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// Longest a line waits in the buffer.
const BATCH: Duration = Duration::from_millis(50);
/// Most bytes buffered; a caller waits for the writer thread beyond it.
const MAX_BUFFERED: usize = 4 * 1024 * 1024;

#[derive(Default)]
struct Buffer {
    bytes: Vec<u8>,
    /// Write now (a warning, or the process is ending).
    urgent: bool,
    closing: bool,
}

#[derive(Default)]
struct Shared {
    buffer: Mutex<Buffer>,
    /// Signalled when the writer thread has work (or must stop).
    work: Condvar,
    /// Signalled when the writer thread took the buffer.
    drained: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        // A panic while holding the lock leaves plain bytes: still usable.
        self.buffer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The [`MakeWriter`] of the batched stderr log.
#[derive(Clone)]
pub(super) struct BatchedStderr {
    shared: Arc<Shared>,
}

/// Writes what is still buffered and stops the writer thread when dropped.
pub(super) struct Flush {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A batched stderr writer and the guard that flushes it; without a thread (one could not
/// be started) lines are written directly.
pub(super) fn batched_stderr() -> (BatchedStderr, Flush) {
    let shared = Arc::new(Shared::default());
    let writer = shared.clone();
    let thread = std::thread::Builder::new()
        .name("log-writer".into())
        .spawn(move || write_batches(&writer))
        .ok();
    if thread.is_none() {
        shared.lock().closing = true;
    }
    let flush = Flush {
        shared: shared.clone(),
        thread,
    };
    (BatchedStderr { shared }, flush)
}

/// The writer thread: waits for a first line, gathers more for up to [`BATCH`] (less when
/// one is urgent), writes them in one go; returns once closing and empty.
fn write_batches(shared: &Shared) {
    let mut out = std::io::stderr();
    let mut batch = Vec::new();
    loop {
        let mut buffer = shared.lock();
        while buffer.bytes.is_empty() && !buffer.closing {
            buffer = shared.work.wait(buffer).unwrap_or_else(|e| e.into_inner());
        }
        if !buffer.urgent && !buffer.closing {
            buffer = shared
                .work
                .wait_timeout_while(buffer, BATCH, |b| !b.urgent && !b.closing)
                .map_or_else(|e| e.into_inner().0, |(b, _)| b);
        }
        std::mem::swap(&mut buffer.bytes, &mut batch);
        buffer.urgent = false;
        let done = buffer.closing;
        drop(buffer);
        shared.drained.notify_all();
        // Nowhere to report a failed log write; the line is lost, as with `eprintln!`.
        let _ = out.write_all(&batch);
        batch.clear();
        if done && shared.lock().bytes.is_empty() {
            return;
        }
    }
}

impl Drop for Flush {
    fn drop(&mut self) {
        {
            let mut buffer = self.shared.lock();
            buffer.closing = true;
            buffer.urgent = true;
        }
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One line's writer; `urgent` lines are written at once.
pub(super) struct Line<'a> {
    shared: &'a Shared,
    urgent: bool,
}

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut buffer = self.shared.lock();
        if buffer.closing && buffer.bytes.is_empty() {
            // No writer thread (any more): write through.
            drop(buffer);
            return std::io::stderr().write(bytes);
        }
        while buffer.bytes.len() >= MAX_BUFFERED && !buffer.closing {
            self.shared.work.notify_one();
            buffer = self
                .shared
                .drained
                .wait(buffer)
                .unwrap_or_else(|e| e.into_inner());
        }
        let first = buffer.bytes.is_empty();
        buffer.bytes.extend_from_slice(bytes);
        buffer.urgent |= self.urgent;
        drop(buffer);
        if first || self.urgent {
            self.shared.work.notify_one();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchedStderr {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            shared: &self.shared,
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line<'a> {
        Line {
            shared: &self.shared,
            urgent: *meta.level() <= Level::WARN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_reach_the_buffer_in_order_and_drop_flushes() {
        let (writer, flush) = batched_stderr();
        // Stop the thread first so the bytes stay observable, then write through.
        drop(flush);
        let mut line = writer.make_writer();
        assert_eq!(line.write(b"after close\n").expect("writes"), 12);
        assert!(writer.shared.lock().bytes.is_empty());
    }

    #[test]
    fn buffered_lines_wait_for_the_writer_thread() {
        let shared = Arc::new(Shared::default());
        let writer = BatchedStderr {
            shared: shared.clone(),
        };
        writer.make_writer().write_all(b"one\n").expect("buffers");
        writer.make_writer().write_all(b"two\n").expect("buffers");
        assert_eq!(shared.lock().bytes, b"one\ntwo\n");
        assert!(!shared.lock().urgent);
    }
}
