//! The accept loop: each connection under the cap is served behind its guard, one over the
//! cap is refused, and shutdown is graceful.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::connection::Connection;
use super::guard::{Activity, Guarded};
use super::refusal::Refusal;
use super::Edge;
use crate::error::{ApiError, Code};

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
