//! HTTP plumbing every dialect shares: transport errors, capped bodies, status mapping.

use super::BackendError;

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
    tracing::warn!(
        status = status.as_u16(),
        body = %String::from_utf8_lossy(&text[..text.len().min(200)]),
        "backend answered an error"
    );
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
