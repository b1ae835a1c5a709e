//! An OTLP/HTTP trace receiver on 127.0.0.1:0, as an operator's collector is: it takes
//! `POST /v1/traces` (protobuf, as the service exports), decodes each export with the
//! `opentelemetry-proto` crate and keeps the spans, and the raw bytes for the canary test.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use tokio::sync::Notify;

/// One exported span, flattened.
#[derive(Debug, Clone)]
pub struct Span {
    /// Hex, as in a `traceparent`.
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root.
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's numbers: 2 server, 3 client, 1 internal.
    pub kind: i32,
    pub attributes: Vec<(String, String)>,
    /// Its events' names.
    pub events: Vec<String>,
    /// Its resource's attributes.
    pub resource: Vec<(String, String)>,
}

impl Span {
    /// The attribute `key`'s value as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    raw: Mutex<Vec<u8>>,
    arrived: Notify,
}

/// A running receiver.
pub struct Collector {
    pub addr: SocketAddr,
    received: Arc<Received>,
}

impl Collector {
    /// A receiver on a free port.
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// A receiver on 127.0.0.1:`port`: where a process started before the test (the live
    /// vLLM) was told to export.
    pub async fn start_on(port: u16) -> Self {
        let received = Arc::new(Received::default());
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(received.clone());
        let addr = crate::fake_server::serve_on(app, port).await;
        Collector { addr, received }
    }

    /// What `--otlp-traces-endpoint` is given.
    pub fn endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received.spans.lock().expect("lock").clone()
    }

    /// Every export's bytes so far, one after the other.
    pub fn raw(&self) -> Vec<u8> {
        self.received.raw.lock().expect("lock").clone()
    }

    /// The spans once `done` holds of them; fails after 20 s with what did arrive.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let arrived = self.received.arrived.notified();
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!("the collector never received {what}; it has {names:?}");
            }
        }
    }
}

async fn export(State(received): State<Arc<Received>>, body: Bytes) -> axum::http::StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body.clone()) else {
        return axum::http::StatusCode::BAD_REQUEST;
    };
    received.raw.lock().expect("lock").extend_from_slice(&body);
    let mut spans = received.spans.lock().expect("lock");
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| flat(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(Span {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: flat(&span.attributes),
                    events: span.events.into_iter().map(|e| e.name).collect(),
                    resource: resource.clone(),
                });
            }
        }
    }
    drop(spans);
    received.arrived.notify_waiters();
    axum::http::StatusCode::OK
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Attributes as (key, value as text).
fn flat(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                Some(Any::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}
