//! Serving a router on a listener, with graceful shutdown bounded by a grace period.

use std::future::{Future, IntoFuture};
use std::time::Duration;

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and lets
/// in-flight requests finish for at most `grace` (tokio time) before returning.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let (started, stopping) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!(
            grace_secs = grace.as_secs_f64(),
            "shutting down: no new connections, finishing in-flight requests"
        );
        let _ = started.send(());
    });
    let deadline = async move {
        if stopping.await.is_err() {
            // The server ended without a shutdown signal: nothing to bound.
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        result = server.into_future() => {
            tracing::info!("shut down: every in-flight request finished");
            result
        }
        () = deadline => {
            tracing::warn!(
                grace_secs = grace.as_secs_f64(),
                "shut down with requests still in flight: the grace period ran out"
            );
            Ok(())
        }
    }
}
