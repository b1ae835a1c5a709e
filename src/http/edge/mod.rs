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
//! The cap on concurrent API requests is a router layer ([`crate::http::router`]).

mod deadline_body;
mod guard;
mod refusal;

pub use deadline_body::BodyTimedOut;

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use crate::config::EdgeSettings;
use crate::error::{ApiError, Code};
use crate::http::AppState;
use crate::metrics::Metrics;
use guard::{Activity, Guarded, Rules};
use refusal::Refusal;

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

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and lets
/// in-flight requests finish for at most `grace` (tokio time) before returning.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    edge: Edge,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let rules = edge.rules();
    let http1 = edge.http1();
    let connections = Arc::new(Semaphore::new(edge.settings.max_connections));
    let graceful = GracefulShutdown::new();
    let body_timeout = edge.settings.body_read_timeout();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, most likely: let open connections finish.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            refuse_connection(stream, &edge);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            app: app.clone(),
            body_timeout,
            metrics: edge.metrics.clone(),
            _permit: permit,
        };
        let activity = Arc::new(Activity::default());
        let io = TokioIo::new(Guarded::new(stream, rules.clone(), activity.clone()));
        let served = graceful.watch(http1.serve_connection(io, connection.service(activity)));
        tokio::spawn(connection.run(served));
    }
    drop(listener);
    tracing::info!(
        grace_secs = grace.as_secs_f64(),
        "shutting down: no new connections, finishing in-flight requests"
    );
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("shut down: every in-flight request finished"),
        () = tokio::time::sleep(grace) => tracing::warn!(
            grace_secs = grace.as_secs_f64(),
            "shut down with requests still in flight: the grace period ran out"
        ),
    }
    Ok(())
}

/// One accepted connection's share of the edge, alive while it is served.
struct Connection {
    app: axum::Router,
    body_timeout: Option<Duration>,
    metrics: Metrics,
    /// Its place under the connection cap.
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    /// The per-connection service: the router, with the body deadline on each request and
    /// the guard told when each request is over.
    fn service(
        &self,
        activity: Arc<Activity>,
    ) -> impl hyper::service::Service<
        hyper::Request<Incoming>,
        Response = axum::response::Response,
        Error = Infallible,
        Future = impl Future<Output = Result<axum::response::Response, Infallible>> + Send,
    > + Send {
        let app = self.app.clone();
        let body_timeout = self.body_timeout;
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let in_service = activity.start();
            let (app, activity) = (app.clone(), activity.clone());
            async move {
                let (head, incoming) = request.into_parts();
                let (body, read_to_end) = deadline_body::DeadlineBody::new(incoming, body_timeout);
                let request = hyper::Request::from_parts(head, axum::body::Body::new(body));
                let mut response = app.oneshot(request).await?;
                if !read_to_end.load(Ordering::SeqCst) {
                    close_after(&mut response, &activity);
                }
                Ok(response
                    .map(|b| axum::body::Body::new(deadline_body::Tracked::new(b, in_service))))
            }
        })
    }

    /// Drives the connection to its end, counted as open meanwhile.
    async fn run(self, served: impl Future<Output = Result<(), hyper::Error>>) {
        self.metrics.add_open_connections(1);
        if let Err(e) = served.await {
            // hyper's errors name what broke (a reset, a refusal), never request content.
            tracing::debug!(error = %e, "connection ended with an error");
        }
        self.metrics.add_open_connections(-1);
    }
}

/// A response given before its request's body was read to the end (a 413, a 401, a 408):
/// hyper will close the connection after it rather than read the rest, but does not say
/// so, and a keep-alive client would send its next request into a reset. The response
/// says `connection: close`, and the guard drains the rest of the body as it closes.
fn close_after(response: &mut axum::response::Response, activity: &Activity) {
    response.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    activity.cut_body();
}

/// Answers a connection over the cap with 503 and closes it, off the accept loop.
fn refuse_connection(stream: TcpStream, edge: &Edge) {
    edge.metrics.count_connection_closed("connection_cap");
    let max = edge.settings.max_connections;
    tokio::spawn(async move {
        let error = ApiError::new(
            Code::Overloaded,
            format!("the service has its limit of {max} connections open; retry later"),
        )
        .retry_after(1);
        let mut refusal = Refusal::new(error, "connection_cap");
        let mut stream = stream;
        let sent = std::future::poll_fn(|cx| refusal.poll_send(&mut stream, cx));
        let _ = tokio::time::timeout(Duration::from_secs(2), sent).await;
    });
}
