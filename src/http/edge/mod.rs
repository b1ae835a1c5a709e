//! The edge: how client connections are accepted, timed and capped before a request
//! reaches the router. hyper serves each connection (HTTP/1.1, keep-alive); around it:
//! - a cap on open connections: one beyond it is answered 503 `system_one_overloaded`
//!   (with `Retry-After`) and closed, and the open ones are served as usual;
//! - a [`guard`] on each connection's bytes: request heads are checked before hyper parses
//!   them (bad bytes, too many or too large headers get the contract's JSON error with a
//!   request id), a slow head gets a 408, an idle keep-alive connection is closed;
//! - a body read deadline on each request ([`deadline_body::DeadlineBody`]; the handler answers
//!   408 when it passes);
//! - graceful shutdown: no new connections, in-flight requests finish within the grace.
//!
//! The cap on concurrent API requests is a router layer ([`crate::http::router()`]).

mod connection;
mod deadline_body;
mod guard;
mod refusal;
mod serve;

pub use deadline_body::BodyTimedOut;
pub use serve::serve;

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;

use crate::config::EdgeSettings;
use crate::http::AppState;
use crate::metrics::Metrics;
use guard::Rules;

/// File descriptors kept back from the connection cap beyond the upstream connections: the
/// listener, the limit store, log and data files.
const RESERVED_FDS: u64 = 64;

/// How much later than the guard's deadlines hyper's own header timeout fires.
const BACKSTOP_MARGIN: Duration = Duration::from_secs(1);

/// hyper's own floor for its read buffer.
const MIN_BUF_BYTES: usize = 8192;

/// The edge's settings and the metrics it counts into.
#[derive(Debug, Clone)]
pub struct Edge {
    settings: EdgeSettings,
    metrics: Metrics,
}

impl Edge {
    /// The edge the state's settings describe, counting into its metrics.
    pub fn new(state: &AppState) -> Self {
        Edge {
            settings: (*state.edge).clone(),
            metrics: (*state.metrics).clone(),
        }
    }

    /// Fits the connection cap under the process's file-descriptor limit: raises the soft
    /// limit towards the hard one as far as the cap needs, and if that is not enough lowers
    /// the cap (with a warning), so that the cap's 503, not a failing `accept`, is what a
    /// caller beyond it meets. `upstream` is how many descriptors the backends' connections
    /// may hold.
    pub fn fit_to_fd_limit(&mut self, upstream: usize) {
        let reserved = upstream as u64 + RESERVED_FDS;
        let wanted = self.settings.max_connections as u64 + reserved;
        match rlimit::increase_nofile_limit(wanted) {
            Ok(limit) if limit < wanted => {
                let fit = usize::try_from(limit.saturating_sub(reserved))
                    .unwrap_or(usize::MAX)
                    .max(1);
                tracing::warn!(
                    max_connections = self.settings.max_connections,
                    fd_limit = limit,
                    lowered_to = fit,
                    "--max-connections does not fit the file-descriptor limit: lowered"
                );
                self.settings.max_connections = fit;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the file-descriptor limit"),
        }
    }

    fn rules(&self) -> Arc<Rules> {
        Arc::new(Rules {
            header_timeout: self.settings.header_read_timeout(),
            idle_timeout: self.settings.idle_timeout(),
            max_head_bytes: self.settings.max_header_bytes,
            max_headers: self.settings.max_headers,
            metrics: self.metrics.clone(),
        })
    }

    /// hyper's settings: its limits sit above the guard's, so every refusal is the guard's.
    /// The guard does the timing; hyper's own header timeout (which runs from when hyper
    /// starts waiting for a head, idle time included) is only a backstop that never fires
    /// before the guard's deadlines, for connections the guard passes through unchecked
    /// (after a chunked body).
    fn http1(&self) -> http1::Builder {
        let backstop = match (
            self.settings.idle_timeout(),
            self.settings.header_read_timeout(),
        ) {
            (None, None) => None,
            (idle, header) => {
                Some(idle.unwrap_or_default() + header.unwrap_or_default() + BACKSTOP_MARGIN)
            }
        };
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(backstop)
            .max_headers(self.settings.max_headers)
            .max_buf_size((self.settings.max_header_bytes + MIN_BUF_BYTES).max(400 * 1024));
        builder
    }
}
