//! HTTP plumbing every dialect shares: transport errors, capped bodies, status mapping.

use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use super::BackendError;

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
pub(crate) async fn read_success(
    response: &mut reqwest::Response,
) -> Result<Vec<u8>, BackendError> {
    let status = response.status();
    if status.is_success() {
        return read_capped(response).await;
    }
    let retry_after = retry_after_secs(response.headers());
    let text = read_capped(response).await.unwrap_or_default();
    // By status, length and a hash (to tell repeated errors apart), never the text.
    let digest = Sha256::digest(&text);
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    tracing::warn!(
        status = status.as_u16(),
        body_bytes = text.len(),
        body_sha256_prefix = %hash,
        "backend answered an error"
    );
    if LOG_ERROR_TEXT.load(Ordering::Relaxed) {
        tracing::trace!(
            status = status.as_u16(),
            body = %String::from_utf8_lossy(&text[..text.len().min(200)]),
            "backend error text (--log-backend-error-text: may hold the caller's content)"
        );
    }
    Err(match status.as_u16() {
        429 => BackendError::RateLimited { retry_after },
        503 => BackendError::Overloaded { retry_after },
        s @ 400..=499 => BackendError::Rejected { status: s },
        s => BackendError::ServerError { status: s },
    })
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
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if out.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(BackendError::Protocol(format!(
                "answer larger than {MAX_RESPONSE_BYTES} bytes"
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
