//! An in-memory log for the tests that prove what never reaches the logs.

use std::io;
use std::sync::{Arc, Mutex};

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

impl Captured {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
    }
}

/// Installs the process-wide subscriber of this test binary: every event and span at TRACE,
/// in the text and the JSON format, written into the returned sink.
pub fn install() -> Captured {
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
