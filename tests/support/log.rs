//! An in-memory log for the tests that prove what never reaches the logs, or what does.
//!
//! A test binary has one global subscriber (tracing's per-callsite interest cache makes a
//! thread-local one miss the events of a service whose tasks run on other threads). It is
//! installed by the first [`capture`] and records events only while some capture is alive,
//! so the suites that never look at the log, which share the binary, do not pay for every
//! TRACE event formatted twice. Captures running at once share the sink: each test looks
//! for its own request ids and canaries.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// An in-memory log sink shared by every writer the subscriber makes.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The binary's one sink, once installed.
static SINK: OnceLock<Captured> = OnceLock::new();
/// How many captures are alive: events are recorded while this is above zero.
static CAPTURING: AtomicUsize = AtomicUsize::new(0);

/// The log, recorded from now until this is dropped.
pub struct Capture(&'static Captured);

impl Capture {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0 .0.lock().expect("lock")).into_owned()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        CAPTURING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Starts recording every event and span at TRACE, in the text and the JSON format.
pub fn capture() -> Capture {
    let sink = SINK.get_or_init(install);
    CAPTURING.fetch_add(1, Ordering::SeqCst);
    Capture(sink)
}

/// Installs the process-wide subscriber, writing into the returned sink while capturing.
fn install() -> Captured {
    use tracing_subscriber::fmt::format::FmtSpan;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let captured = Captured::default();
    let writer = {
        let captured = captured.clone();
        move || captured.clone()
    };
    tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::TRACE)
        // Dynamic: decided at every event, where a plain filter_fn's verdict is cached per
        // callsite the first time it is hit.
        .with(tracing_subscriber::filter::dynamic_filter_fn(|_, _| {
            CAPTURING.load(Ordering::SeqCst) > 0
        }))
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_span_events(FmtSpan::FULL)
                .with_writer(writer.clone()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_span_events(FmtSpan::FULL)
                .with_writer(writer),
        )
        .try_init()
        .expect("the only global subscriber of this test binary");
    captured
}
