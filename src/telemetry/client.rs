//! The exporter's HTTP client: the service's own `reqwest`, each export sent from a task on
//! the service's runtime.
//!
//! Why not the exporter's: its async reqwest client panics when called outside a runtime
//! (the SDK's batch processor calls it from a thread of its own) and the exporter then drops
//! every span with only a warning (opentelemetry-rust #2673); its blocking client is a second
//! HTTP stack with a thread of its own. Here a request is handed to the runtime by its
//! handle, whatever thread asks, and its answer awaited.

use async_trait::async_trait;
use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// Longest one export may take, the collector's answer read whole included (the OTLP
/// default).
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Most bytes of a collector's answer read (an OTLP answer is a few bytes).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Sends the exporter's requests on `client`, from tasks on `runtime`.
#[derive(Debug, Clone)]
pub(super) struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl RuntimeClient {
    /// A client of its own (no connection shared with the backends') on `runtime`.
    pub(super) fn new(runtime: tokio::runtime::Handle) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the trace exporter's HTTP client: {e}"))?;
        Ok(RuntimeClient { client, runtime })
    }
}

#[async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        self.runtime
            .spawn(async move { send(&client, request).await })
            .await?
    }
}

/// One exchange: the collector's status, headers and (capped) body.
async fn send(
    client: &reqwest::Client,
    request: reqwest::Request,
) -> Result<Response<Bytes>, HttpError> {
    let mut answer = client.execute(request).await?;
    let mut builder = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("the collector's answer is over {MAX_ANSWER_BYTES} bytes").into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(builder.body(Bytes::from(body))?)
}
