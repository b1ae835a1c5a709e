//! The refusals each kind of route may answer, every one with the error body.

#![allow(dead_code)] // Described, never built.

use utoipa::IntoResponses;

use super::schemas::ErrorBody;

/// The refusals of the contract's routes (`/v1/systemone`, `/v2/rerank`), each with the
/// contract's error body.
#[derive(IntoResponses)]
pub(super) enum ContractErrors {
    /// The body is not JSON, or a multipart body has no `request` part.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// A wrong key (when keys are configured).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A missing key (when keys are configured).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// A size rule.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// An unsupported `Content-Type` or `Content-Encoding`.
    #[response(status = 415)]
    UnsupportedMedia(ErrorBody),
    /// A schema rule, an unsupported model, more options than the model can label.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
    /// The key's rate limit or daily cap, or the backend's 429; `Retry-After`.
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// The backend answered 5xx or broke the protocol.
    #[response(status = 502)]
    BadGateway(ErrorBody),
    /// The backend is unreachable, its circuit open, or its token table unverified.
    #[response(status = 503)]
    Unavailable(ErrorBody),
    /// A read or the whole request ran out of time.
    #[response(status = 504)]
    Timeout(ErrorBody),
}

/// The refusals of `/v1/decisions`, in OpenAI's shape: every broken rule is a 400.
#[derive(IntoResponses)]
pub(super) enum DecisionErrors {
    /// Any rule the request breaks (the contract's 413s and 422s included), with `param`.
    #[response(status = 400)]
    Invalid(ErrorBody),
    /// A wrong key (when keys are configured).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A missing key (when keys are configured).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// An unsupported `Content-Type` or `Content-Encoding`.
    #[response(status = 415)]
    UnsupportedMedia(ErrorBody),
    /// The key's rate limit or daily cap, or the backend's 429; `Retry-After`.
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// The backend answered 5xx or broke the protocol.
    #[response(status = 502)]
    BadGateway(ErrorBody),
    /// The backend is unreachable, its circuit open, or its token table unverified.
    #[response(status = 503)]
    Unavailable(ErrorBody),
    /// A read or the whole request ran out of time.
    #[response(status = 504)]
    Timeout(ErrorBody),
}

/// The refusals of a key-checked route without a body.
#[derive(IntoResponses)]
pub(super) enum KeyErrors {
    /// A wrong key (when keys are configured).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A missing key (when keys are configured).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// The key's requests per minute.
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// The shared limit store cannot answer and its policy is `fail_closed`.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// The ledger's refusals shared by its three operations.
#[derive(IntoResponses)]
pub(super) enum LedgerErrors {
    /// A wrong key (when keys are configured).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A missing key (when keys are configured).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// `system_one_ledger_off` (`--ledger off`), or `system_one_decision_not_found`: no
    /// such record for this key (another key's is not told apart).
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// A bad query parameter or outcome, named.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
    /// The key's requests per minute.
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// The ledger (or the limit store) cannot answer.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}
