//! What every fake backend is made of, whatever protocol it speaks: an axum app served on
//! 127.0.0.1:0 in the current runtime ([`serve`]), a [`Recorder`] of the requests it got
//! (how many, their bodies, the most in flight at once), and the transport faults any HTTP
//! backend can show: an error status ([`status`]), a slow answer (the caller sleeps in tokio
//! time, so a paused clock advances) and a 200 whose body is not JSON ([`not_json`]). Each
//! fake (`fake_vllm`, `fake_openai`, `fake_native`) keeps only its protocol: its routes, its
//! answers, its error bodies and the faults of its protocol.
//!
//! Shared by both test tiers and by the benches that include a fake.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;

/// Serves `app` on 127.0.0.1:0 in the current runtime; returns the bound address.
pub async fn serve(app: Router) -> SocketAddr {
    serve_on(app, 0).await
}

/// Serves `app` on 127.0.0.1:`port` (0: a free one) in the current runtime; returns the
/// bound address.
pub async fn serve_on(app: Router, port: u16) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:{port}: {e}"));
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// The requests of one route of a fake: their count, their bodies in arrival order (unless
/// turned off for a long load run) and the most ever handled at once.
#[derive(Debug)]
pub struct Recorder {
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    bodies: Mutex<Vec<Value>>,
    keep_bodies: AtomicBool,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            requests: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            bodies: Mutex::new(Vec::new()),
            keep_bodies: AtomicBool::new(true),
        }
    }
}

impl Recorder {
    /// Counts a request and holds its in-flight place until the guard is dropped.
    pub fn enter(&self) -> InFlight<'_> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(self)
    }

    /// Keeps `body`, unless keeping is off.
    pub fn keep(&self, body: &Value) {
        if self.keep_bodies.load(Ordering::SeqCst) {
            self.bodies.lock().expect("lock").push(body.clone());
        }
    }

    /// Keeps (true, the default) or stops keeping the bodies; either way those kept so far
    /// are forgotten.
    pub fn set_keep_bodies(&self, keep: bool) {
        let mut bodies = self.bodies.lock().expect("lock");
        bodies.clear();
        self.keep_bodies.store(keep, Ordering::SeqCst);
    }

    /// Requests received so far (faulty ones included).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The most requests ever handled at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    /// The bodies kept so far, in arrival order.
    pub fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().expect("lock").clone()
    }
}

/// One request's place in flight, given back when dropped.
pub struct InFlight<'a>(&'a Recorder);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An error answer: `status` with the protocol's error `body` and, when given, a
/// `Retry-After` header of `retry_after` (under the header name the protocol uses).
pub fn status(status: u16, body: Value, retry_after: Option<(&str, &str)>) -> Response {
    let code = StatusCode::from_u16(status).expect("a status code");
    let mut response = (code, axum::Json(body)).into_response();
    if let Some((name, value)) = retry_after {
        let name = axum::http::HeaderName::from_bytes(name.as_bytes()).expect("header name");
        response
            .headers_mut()
            .insert(name, value.parse().expect("header value"));
    }
    response
}

/// A 200 whose body, `text`, is not JSON.
pub fn not_json(text: String) -> Response {
    (StatusCode::OK, text).into_response()
}
