//! One accepted connection while it is served: its service (the router, with the body
//! deadline and the guard told when each request is over) and its count of open connections.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use tokio::sync::OwnedSemaphorePermit;
use tower::ServiceExt;

use super::deadline_body;
use super::guard::Activity;
use crate::metrics::Metrics;

/// One accepted connection's share of the edge, alive while it is served.
pub(super) struct Connection {
    pub(super) app: axum::Router,
    pub(super) body_timeout: Option<Duration>,
    pub(super) metrics: Metrics,
    /// Its place under the connection cap.
    pub(super) _permit: OwnedSemaphorePermit,
}

impl Connection {
    /// The per-connection service: the router, with the body deadline on each request and
    /// the guard told when each request is over.
    pub(super) fn service(
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
    pub(super) async fn run(self, served: impl Future<Output = Result<(), hyper::Error>>) {
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
