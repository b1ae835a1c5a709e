//! HTTP plumbing every dialect shares: the exchange under its in-flight permit, transport
//! errors, capped bodies, status mapping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Uri};
use sha2::{Digest, Sha256};

use super::pool::{Pool, RequestBody, Share};
use super::BackendError;
use crate::in_flight::InFlightPermit;
use crate::secret::Secret;

/// One request to a backend, built before it is sent: method, URL, headers, body.
pub(crate) struct Call {
    pool: Pool,
    method: Method,
    /// `None` when the URL is not a valid URI (reported on sending).
    uri: Option<Uri>,
    headers: HeaderMap,
    body: Bytes,
    /// Why the request cannot be sent (a body that did not serialize), reported on sending.
    broken: Option<String>,
}

impl Call {
    fn new<U: TryInto<Uri>>(pool: &Pool, method: Method, url: U, key: Option<&Secret>) -> Self {
        let mut call = Call {
            pool: pool.clone(),
            method,
            uri: url.try_into().ok(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            broken: None,
        };
        call.headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
        if let Some(key) = key {
            match HeaderValue::try_from(format!("Bearer {}", key.expose())) {
                Ok(mut value) => {
                    value.set_sensitive(true);
                    call.headers.insert(AUTHORIZATION, value);
                }
                // Never the key itself: only that it cannot be a header.
                Err(_) => call.broken = Some("the backend key cannot be sent as a header".into()),
            }
        }
        call
    }

    /// `value` as a JSON body.
    pub(crate) fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => {
                self.headers
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                self.body = body.into();
            }
            Err(e) => self.broken = Some(format!("the request body did not serialize: {e}")),
        }
        self
    }

    /// The header `name: value`.
    pub(crate) fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// The routing key's headers, when the read carries one.
    pub(crate) fn routed(mut self, routing: Option<&super::Routing>) -> Self {
        for (name, value) in routing.map_or(&[][..], |r| r.headers()) {
            self.headers.insert(name.clone(), value.clone());
        }
        self
    }

    /// `body` as the request body, as it is.
    pub(crate) fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// The request for the pool, or why there is none; with the current span's
    /// `traceparent` when traces are on, so a model server that traces puts its spans under
    /// the read that caused them.
    fn into_request(mut self) -> Result<(Pool, Request<RequestBody>), BackendError> {
        crate::telemetry::inject_current(&mut self.headers);
        if let Some(why) = self.broken {
            return Err(BackendError::Protocol(why));
        }
        let Some(uri) = self.uri else {
            return Err(BackendError::Protocol(
                "the backend URL is not a valid URI".into(),
            ));
        };
        let mut request = Request::new(RequestBody::new(self.body));
        *request.method_mut() = self.method;
        *request.uri_mut() = uri;
        *request.headers_mut() = self.headers;
        Ok((self.pool, request))
    }
}

/// A POST to `url` on the shared pool, with the backend's bearer key when it has one: how
/// every dialect starts a request.
pub(crate) fn post<U: TryInto<Uri>>(pool: &Pool, url: U, key: Option<&Secret>) -> Call {
    Call::new(pool, Method::POST, url, key)
}

/// A GET of `url`, with the backend's bearer key when it has one.
pub(crate) fn get<U: TryInto<Uri>>(pool: &Pool, url: U, key: Option<&Secret>) -> Call {
    Call::new(pool, Method::GET, url, key)
}

/// Sends `call` and reads its answer whole (a 2xx body, or the error its status stands
/// for), holding a share of the read's in-flight slot until the backend can no longer be
/// working on it (the slot is free once every share is gone: a read of several exchanges
/// holds one share throughout, each exchange another).
///
/// If the caller stops waiting (a sibling read failed, the read timed out, the client
/// left), the exchange is dropped and its connection closed; the share goes with the
/// connection and is let go once its socket is closed ([`super::pool`]), not when the
/// backend would have answered.
pub(crate) async fn exchange(
    call: Call,
    slot: &Arc<InFlightPermit>,
) -> Result<Vec<u8>, BackendError> {
    exchange_up_to(call, slot, MAX_RESPONSE_BYTES).await
}

/// [`exchange`] for an answer that may be up to `max_bytes` (llama.cpp's whole-vocabulary
/// read is ~26 MB for Gemma 3's 262,144 tokens).
pub(crate) async fn exchange_up_to(
    call: Call,
    slot: &Arc<InFlightPermit>,
    max_bytes: usize,
) -> Result<Vec<u8>, BackendError> {
    let answer = exchange_raw_up_to(call, slot, max_bytes).await?;
    if (200..300).contains(&answer.status) {
        return Ok(answer.body);
    }
    let retry_after = retry_after_secs(&answer.headers);
    Err(match answer.status {
        429 => BackendError::RateLimited { retry_after },
        503 => BackendError::Overloaded { retry_after },
        s @ 400..=499 => BackendError::Rejected { status: s },
        s => BackendError::ServerError { status: s },
    })
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

/// A whole answer, whatever its status: what a dialect with its own status rules reads.
#[derive(Debug)]
pub(crate) struct RawAnswer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// [`exchange`], but the answer comes back whole whatever its status (an error status is
/// logged here), for a dialect that maps statuses itself.
pub(crate) async fn exchange_raw(
    call: Call,
    slot: &Arc<InFlightPermit>,
) -> Result<RawAnswer, BackendError> {
    exchange_raw_up_to(call, slot, MAX_RESPONSE_BYTES).await
}

/// Sends `call` under a [`Share`] of `slot` and reads the answer: a 2xx body up to
/// `max_bytes` (more is a protocol error), an error body up to [`MAX_RESPONSE_BYTES`]
/// (unreadable or longer: empty; the status says what matters), logged once.
async fn exchange_raw_up_to(
    call: Call,
    slot: &Arc<InFlightPermit>,
    max_bytes: usize,
) -> Result<RawAnswer, BackendError> {
    let (pool, mut request) = call.into_request()?;
    let mut share = Share::new(slot, &mut request);
    let response = match pool.request(request).await {
        Ok(response) => response,
        Err(e) => {
            share.answered();
            return Err(transport_error(e));
        }
    };
    let (parts, body) = response.into_parts();
    let status = parts.status.as_u16();
    let body = if parts.status.is_success() {
        read_capped(body, max_bytes).await?
    } else {
        let text = read_capped(body, MAX_RESPONSE_BYTES)
            .await
            .unwrap_or_default();
        log_error_answer(status, &text);
        text
    };
    share.answered();
    Ok(RawAnswer {
        status,
        headers: parts.headers,
        body,
    })
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

/// What a failed send means: no connection (refused, or not accepted within the connect
/// timeout: a timeout for the caller, but nothing was sent), or a connection that broke
/// before the answer's head arrived.
fn transport_error(e: hyper_util::client::legacy::Error) -> BackendError {
    let timed_out = std::iter::successors(std::error::Error::source(&e), |e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::TimedOut);
    if timed_out && e.is_connect() {
        BackendError::ConnectTimeout
    } else if timed_out {
        BackendError::Timeout
    } else if e.is_connect() {
        BackendError::Unreachable
    } else {
        BackendError::Dropped(format!("transport: {e}"))
    }
}

/// A body read whole, up to `max_bytes` (more is a protocol error).
async fn read_capped(
    mut body: hyper::body::Incoming,
    max_bytes: usize,
) -> Result<Vec<u8>, BackendError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BackendError::Protocol(format!("transport: {e}")))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
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
pub(crate) fn retry_after_secs(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(hyper::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| s.ceil() as u64)
}
