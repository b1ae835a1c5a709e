//! [`BackendError`]: how a read failed, in terms of the contract's outcomes, and the
//! caller's error each one maps to (details for the log stay here).

use crate::error::{ApiError, Code, MAX_RETRY_AFTER_SECS};

/// How a read failed, in terms of the contract's outcomes. Details for the log stay here;
/// the caller only ever sees the mapped code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// The backend said 429.
    #[error("backend rate limited the request")]
    RateLimited { retry_after: Option<u64> },
    /// The backend said 503.
    #[error("backend is overloaded")]
    Overloaded { retry_after: Option<u64> },
    /// The backend refused the request with another 4xx.
    #[error("backend rejected the request with status {status}")]
    Rejected { status: u16 },
    /// The backend answered 5xx (other than 503).
    #[error("backend failed with status {status}")]
    ServerError { status: u16 },
    /// No connection could be made.
    #[error("backend is unreachable")]
    Unreachable,
    /// The read ran out of time.
    #[error("backend read timed out")]
    Timeout,
    /// No connection was made within the connect timeout: for the caller a timeout like
    /// [`BackendError::Timeout`], but nothing was sent, so a fleet tries the next replica.
    #[error("backend did not accept a connection within the connect timeout")]
    ConnectTimeout,
    /// The connection broke before an answer arrived (a pooled connection the backend had
    /// closed, a reset): for the caller a broken protocol like [`BackendError::Protocol`],
    /// but no answer was read, so a fleet tries the next replica. The text is for the log.
    #[error("the backend's connection broke before an answer: {0}")]
    Dropped(String),
    /// The answer breaks the protocol (malformed, no logprobs, a requested id missing,
    /// non-finite numbers). The text is for the log only.
    #[error("backend answer breaks the protocol: {0}")]
    Protocol(String),
    /// Options were absent from the backend's top-K log-probabilities, so the masked
    /// distribution cannot be read exactly (an absent option is not probability 0).
    #[error("{missing} of {options} options missing from the backend's top-{top_k} logprobs")]
    Missing {
        missing: usize,
        options: usize,
        top_k: usize,
    },
    /// A native upstream's answer breaks the contract's types: the field (named by question
    /// position, never by the caller's ids) and what is wrong with it, in this service's
    /// words, so the caller may see it.
    #[error("the native upstream's answer breaks the contract: {0}")]
    Contract(String),
    /// The backend cannot be read exactly at all (its probe found what is missing): the
    /// model stays disabled. The text names what is missing, never the backend's own words.
    #[error("the backend cannot be served: {0}")]
    Unsupported(String),
}

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        let retry = |s: Option<u64>| s.unwrap_or(1).clamp(1, MAX_RETRY_AFTER_SECS);
        match e {
            BackendError::RateLimited { retry_after } => ApiError::new(
                Code::UpstreamRateLimited,
                "the backend is rate limiting; retry later",
            )
            .retry_after(retry(retry_after)),
            BackendError::Overloaded { retry_after } => ApiError::new(
                Code::UpstreamOverloaded,
                "the backend is overloaded; retry later",
            )
            .retry_after(retry(retry_after)),
            BackendError::Rejected { status } if status == 401 || status == 403 => ApiError::new(
                Code::UpstreamError,
                "the backend refused this service's credentials",
            ),
            BackendError::Rejected { status } => ApiError::new(
                Code::UpstreamRejected,
                format!("the backend rejected the request with status {status}"),
            ),
            BackendError::ServerError { status } => ApiError::new(
                Code::UpstreamError,
                format!("the backend failed with status {status}"),
            ),
            BackendError::Unreachable => ApiError::new(
                Code::UpstreamUnavailable,
                "the backend is unreachable; retry later",
            )
            .retry_after(5),
            BackendError::Timeout | BackendError::ConnectTimeout => ApiError::new(
                Code::UpstreamTimeout,
                "a backend read did not finish within the read timeout",
            ),
            BackendError::Missing {
                missing,
                options,
                top_k,
            } => missing_options(missing, options, top_k),
            BackendError::Unsupported(what) => ApiError::new(
                Code::BackendUnsupported,
                format!("the model is disabled: {what}"),
            )
            .retry_after(MAX_RETRY_AFTER_SECS),
            BackendError::Protocol(detail) | BackendError::Dropped(detail) => {
                protocol_broken(&detail)
            }
            BackendError::Contract(what) => {
                tracing::warn!(reason = %what, "native upstream answer breaks the contract");
                ApiError::new(
                    Code::UpstreamProtocol,
                    format!("the upstream's answer broke the contract: {what}"),
                )
            }
        }
    }
}

/// The 502 for options absent from the backend's top-K (logged with the counts).
fn missing_options(missing: usize, options: usize, top_k: usize) -> ApiError {
    tracing::warn!(
        missing,
        options,
        top_k,
        "options missing from the backend's top-K"
    );
    ApiError::new(
        Code::UpstreamProtocol,
        format!(
            "{missing} of the {options} options were not among the backend's top-{top_k} log-probabilities, so their masked distribution cannot be read exactly"
        ),
    )
}

/// The 502 for a backend answer that breaks the protocol: the detail goes to the log
/// (with the request id), never to the caller.
pub fn protocol_broken(detail: &dyn std::fmt::Display) -> ApiError {
    tracing::warn!(reason = %detail, "backend answer breaks the protocol");
    ApiError::new(
        Code::UpstreamProtocol,
        "the backend's answer broke the protocol (see the service log for this request id)",
    )
}
