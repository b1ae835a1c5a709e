//! A small recording HTTP proxy for the llama.cpp end-to-end tests: between the service and
//! llama-server where a test must see upstream traffic (the in-flight cap, "no upstream call
//! for a 422"), and between the SDK and the service where the test must see what the SDK put
//! on the wire (zstd bodies).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// One request the proxy forwarded.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The caller's `x-scenario` header (the SDK script tags its calls).
    pub scenario: Option<String>,
    pub path: String,
    pub content_encoding: Option<String>,
    /// The first bytes of the body as received (compressed bodies stay compressed).
    pub head: Vec<u8>,
    pub len: usize,
    pub status: u16,
}

#[derive(Debug, Default)]
struct ProxyLog {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
}

/// A pass-through HTTP proxy on 127.0.0.1:0 that forwards every request to `target` as is
/// (body bytes and headers untouched) and records what it saw and the most requests it had
/// in flight at once. A request counts from when its body has arrived until the upstream
/// answer has been read, which lies inside the caller's own wait for that answer.
pub struct Proxy {
    addr: SocketAddr,
    log: Arc<ProxyLog>,
}

#[derive(Clone)]
struct ProxyState {
    target: String,
    client: reqwest::Client,
    log: Arc<ProxyLog>,
}

/// Decrements the in-flight count however the forwarding ends (also when the caller hangs up).
struct InFlightGuard(Arc<ProxyLog>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Proxy {
    /// Starts a proxy to `target` (scheme, host and port, no path).
    pub async fn start(target: String) -> Proxy {
        let log = Arc::new(ProxyLog::default());
        let state = ProxyState {
            target,
            client: reqwest::Client::new(),
            log: log.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { addr, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.log.seen.lock().expect("proxy log").clone()
    }

    pub fn max_in_flight(&self) -> usize {
        self.log.max_in_flight.load(Ordering::SeqCst)
    }
}

const HOP_BY_HOP: [header::HeaderName; 4] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::CONTENT_LENGTH,
    header::HOST,
];

async fn forward(State(state): State<ProxyState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("proxy: {e}")).into_response(),
    };
    let now = state.log.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let guard = InFlightGuard(state.log.clone());
    state.log.max_in_flight.fetch_max(now, Ordering::SeqCst);

    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let text_header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut upstream = state
        .client
        .request(parts.method.clone(), format!("{}{path}", state.target));
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(name) {
            upstream = upstream.header(name, value);
        }
    }
    let answer = match upstream.body(bytes.clone()).send().await {
        Ok(r) => {
            let status = r.status();
            let headers = r.headers().clone();
            r.bytes().await.map(|b| (status, headers, b))
        }
        Err(e) => Err(e),
    };
    drop(guard);
    let (status, headers, body) = match answer {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("proxy: {e}")).into_response(),
    };
    state.log.seen.lock().expect("proxy log").push(Seen {
        scenario: text_header("x-scenario"),
        path: parts.uri.path().to_string(),
        content_encoding: text_header("content-encoding"),
        head: bytes.iter().take(4).copied().collect(),
        len: bytes.len(),
        status: status.as_u16(),
    });
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if !HOP_BY_HOP.contains(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}

/// The one request a recording proxy saw for an SDK scenario.
pub fn seen_for(seen: &[Seen], name: &str) -> Seen {
    let hits: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.scenario.as_deref() == Some(name))
        .collect();
    assert_eq!(hits.len(), 1, "one wire request for {name}: {seen:?}");
    hits[0].clone()
}
