//! HTTP plumbing every dialect shares: the exchange under its in-flight permit, transport
//! errors, capped bodies, status mapping.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::BackendError;
use crate::limits::InFlightPermit;
use crate::secret::Secret;

/// A POST to `url` on the shared pool, with the backend's bearer key when it has one: how
/// every dialect starts a request.
pub(crate) fn post(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    key: Option<&Secret>,
) -> reqwest::RequestBuilder {
    with_key(client.post(url), key)
}

/// A GET of `url`, with the backend's bearer key when it has one.
pub(crate) fn get(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    key: Option<&Secret>,
) -> reqwest::RequestBuilder {
    with_key(client.get(url), key)
}

/// `call` with the bearer key, when there is one.
fn with_key(call: reqwest::RequestBuilder, key: Option<&Secret>) -> reqwest::RequestBuilder {
    match key {
        Some(key) => call.bearer_auth(key.expose()),
        None => call,
    }
}

/// How long an exchange whose caller stopped waiting may run on in the background before
/// it is cut (a backend that never answers must not hold a slot forever).
const ABANDONED_EXCHANGE_BOUND: Duration = Duration::from_secs(60);

/// Sends `call` and reads its answer whole (a 2xx body, or the error its status stands
/// for), holding a share of the read's in-flight slot until the backend can no longer be
/// working on it (the slot is free once every share is gone: a read of several exchanges
/// holds one share throughout, each exchange another).
///
/// If the caller stops waiting (a sibling read failed, the read timed out, the client
/// left), the exchange is not cut: it runs on in a background task to its end (at most
/// [`ABANDONED_EXCHANGE_BOUND`]) and only then returns the permit. Cutting it would free
/// the slot while the backend still computes the answer (the HTTP client closes the
/// connection in its own task, after the drop), so the backend could see more requests
/// than the cap.
pub(crate) async fn exchange(
    call: reqwest::RequestBuilder,
    slot: &Arc<InFlightPermit>,
) -> Result<Vec<u8>, BackendError> {
    exchange_up_to(call, slot, MAX_RESPONSE_BYTES).await
}

/// [`exchange`] for an answer that may be up to `max_bytes` (llama.cpp's whole-vocabulary
/// read is ~26 MB for Gemma 3's 262,144 tokens).
pub(crate) async fn exchange_up_to(
    call: reqwest::RequestBuilder,
    slot: &Arc<InFlightPermit>,
    max_bytes: usize,
) -> Result<Vec<u8>, BackendError> {
    let exchange = async move {
        let mut response = call.send().await.map_err(transport_error)?;
        read_success(&mut response, max_bytes).await
    };
    ToTheEnd {
        exchange: Some(Box::pin(exchange)),
        slot: Some(slot.clone()),
    }
    .await
}

/// An exchange that, dropped before its end, finishes in the background with its permit.
struct ToTheEnd<F: Future + Send + 'static> {
    exchange: Option<Pin<Box<F>>>,
    slot: Option<Arc<InFlightPermit>>,
}

impl<F: Future + Send + 'static> Future for ToTheEnd<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(exchange) = self.exchange.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(exchange.as_mut().poll(cx));
        self.exchange = None;
        self.slot = None;
        Poll::Ready(out)
    }
}

impl<F: Future + Send + 'static> Drop for ToTheEnd<F> {
    fn drop(&mut self) {
        let (Some(exchange), slot) = (self.exchange.take(), self.slot.take()) else {
            return;
        };
        // Without a runtime (the process is ending) there is nothing to finish it on.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(ABANDONED_EXCHANGE_BOUND, exchange).await;
                drop(slot);
            });
        }
    }
}

/// Whether a backend's error text may be logged (at `trace`): off unless the operator
/// passes `--log-backend-error-text`. A backend may repeat the prompt in an error (some do
/// for a context-length error), and the prompt holds the caller's state and questions,
/// which no log line may carry; process-wide, like the log level itself.
static LOG_ERROR_TEXT: AtomicBool = AtomicBool::new(false);

/// Turns logging of backends' error text on or off (`--log-backend-error-text`).
pub fn set_log_error_text(on: bool) {
    LOG_ERROR_TEXT.store(on, Ordering::Relaxed);
}

/// Largest backend answer read into memory; anything bigger is a protocol error.
const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// The body of a 2xx answer, or the error its status stands for (logged once here).
async fn read_success(
    response: &mut reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, BackendError> {
    let status = response.status();
    if status.is_success() {
        return read_capped_up_to(response, max_bytes).await;
    }
    let retry_after = retry_after_secs(response.headers());
    let text = read_capped(response).await.unwrap_or_default();
    log_error_answer(status.as_u16(), &text);
    Err(match status.as_u16() {
        429 => BackendError::RateLimited { retry_after },
        503 => BackendError::Overloaded { retry_after },
        s @ 400..=499 => BackendError::Rejected { status: s },
        s => BackendError::ServerError { status: s },
    })
}

/// A whole answer, whatever its status: what a dialect with its own status rules reads.
#[derive(Debug)]
pub(crate) struct RawAnswer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

/// [`exchange`], but the answer comes back whole whatever its status (an error status is
/// logged here, as [`read_success`] logs it), for a dialect that maps statuses itself.
pub(crate) async fn exchange_raw(
    call: reqwest::RequestBuilder,
    slot: &Arc<InFlightPermit>,
) -> Result<RawAnswer, BackendError> {
    let exchange = async move {
        let mut response = call.send().await.map_err(transport_error)?;
        let (status, headers) = (response.status().as_u16(), response.headers().clone());
        let body = read_capped(&mut response).await?;
        if !(200..300).contains(&status) {
            log_error_answer(status, &body);
        }
        Ok(RawAnswer {
            status,
            headers,
            body,
        })
    };
    ToTheEnd {
        exchange: Some(Box::pin(exchange)),
        slot: Some(slot.clone()),
    }
    .await
}

/// Logs a backend's error answer once, at `warn`: by status, length and a hash (to tell
/// repeated errors apart), never the text (at `trace` only with `--log-backend-error-text`).
fn log_error_answer(status: u16, text: &[u8]) {
    let digest = Sha256::digest(text);
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    tracing::warn!(
        status,
        body_bytes = text.len(),
        body_sha256_prefix = %hash,
        "backend answered an error"
    );
    if LOG_ERROR_TEXT.load(Ordering::Relaxed) {
        tracing::trace!(
            status,
            body = %String::from_utf8_lossy(&text[..text.len().min(200)]),
            "backend error text (--log-backend-error-text: may hold the caller's content)"
        );
    }
}

pub(crate) fn transport_error(e: reqwest::Error) -> BackendError {
    if e.is_timeout() {
        BackendError::Timeout
    } else if e.is_connect() {
        BackendError::Unreachable
    } else {
        BackendError::Protocol(format!("transport: {e}"))
    }
}

pub(crate) async fn read_capped(response: &mut reqwest::Response) -> Result<Vec<u8>, BackendError> {
    read_capped_up_to(response, MAX_RESPONSE_BYTES).await
}

async fn read_capped_up_to(
    response: &mut reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, BackendError> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if out.len() + chunk.len() > max_bytes {
            return Err(BackendError::Protocol(format!(
                "answer larger than {max_bytes} bytes"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Retry-After in whole seconds from a response header (delta-seconds form only).
pub(crate) fn retry_after_secs(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| s.ceil() as u64)
}
