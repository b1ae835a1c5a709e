//! A service on a limit store that outlives it: a key prefix of a test's own, a service that
//! can be stopped (dropping its state, so an embedded store's file closes) and started again
//! on the same store, and the day's count a store holds for a key.

use std::time::Duration;

use systemone::AppState;

use super::Service;

/// A key prefix no other test uses.
pub fn unique_prefix() -> String {
    format!("systemone-test-{}", uuid::Uuid::new_v4().simple())
}

/// A replica that can be stopped: served by [`systemone::serve`] with a shutdown trigger,
/// so that stopping it drops its state (and closes an embedded store's file).
pub struct Stoppable {
    /// The running service.
    pub service: Service,
    /// Sends the shutdown signal.
    pub stop: tokio::sync::oneshot::Sender<()>,
    /// The server's task: done once shutdown has finished.
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Stoppable {
    /// Serves `state` until [`Stoppable::stop`], with a 5 s shutdown grace.
    pub async fn start(state: AppState) -> Self {
        Self::start_with_grace(state, Duration::from_secs(5)).await
    }

    /// Serves `state` until its `stop` is sent, letting requests in flight finish for up
    /// to `grace`.
    pub async fn start_with_grace(state: AppState, grace: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let edge = systemone::Edge::new(&state);
        let server = tokio::spawn(systemone::serve(
            listener,
            systemone::app(state.clone()),
            edge,
            async move {
                let _ = stopped.await;
            },
            grace,
        ));
        Stoppable {
            service: Service {
                addr,
                state,
                client: reqwest::Client::new(),
            },
            stop,
            server,
        }
    }

    /// Stops it and waits until it has finished; its state is dropped.
    pub async fn stop(self) {
        let Stoppable {
            service,
            stop,
            server,
        } = self;
        drop(service);
        let _ = stop.send(());
        server
            .await
            .expect("server task")
            .expect("serve ends cleanly");
    }
}

/// The count of questions `service`'s store has today for the key sent as `bearer`
/// (`None`: the store did not answer).
pub async fn used_today(service: &Service, bearer: &str) -> Option<u64> {
    let header = format!("Bearer {bearer}").parse().expect("header");
    let caller = service
        .state
        .keys
        .authenticate(Some(&header))
        .expect("a configured key");
    service
        .state
        .quotas
        .used_today(caller.quota().expect("a keyed caller"))
        .await
        .ok()
}
