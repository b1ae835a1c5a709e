//! Why a caller is refused, and the contract error each refusal becomes: 401 for a missing
//! or unknown key and for each way a token fails, 403 for what a tier or a scope does not
//! allow, 429 for a limit, 503 when the limit store or the token keys are unavailable.
//! Messages name the key by its configured name and never carry the key or the token.

use super::jwt::TokenError;
use super::scope::Scope;
use crate::error::{ApiError, Code};
use crate::quota::{LimitKind, QuotaError, Refusal, MAX_RATE_RETRY_SECS};

/// Why a caller is refused. Never carries the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer …` (403).
    #[error("missing API key")]
    Missing,
    /// A bearer that matches no configured key (401).
    #[error("invalid API key")]
    Invalid,
    /// A per-minute limit is used up; free again in `retry_after` seconds.
    #[error("{kind:?} per minute limit of {limit} reached")]
    RateLimited {
        kind: LimitKind,
        limit: u32,
        retry_after: u64,
    },
    /// The request alone has more questions than the key may ask per minute.
    #[error("{questions} questions is more than the limit of {limit} per minute")]
    OverMinuteLimit { questions: usize, limit: u32 },
    /// The key's questions for this UTC day are used up (or this request would pass the cap).
    #[error("daily cap of {limit} questions reached")]
    DailyCap {
        limit: u64,
        used: u64,
        questions: usize,
        retry_after: u64,
    },
    /// The shared limit store cannot answer and the policy is `fail_closed`.
    #[error("the limit store is unavailable")]
    LimitsUnavailable { retry_after: u64 },
    /// A bearer with a JWT's shape that does not verify (401), or no fresh keys (503).
    #[error("token refused: {0:?}")]
    Token(TokenError),
    /// A token's tier claim names no configured tier.
    #[error("unknown tier")]
    UnknownTier { claim: String },
    /// The caller's tier may not be served by the model.
    #[error("tier {tier:?} may not use model {model:?}")]
    TierModel { tier: String, model: String },
    /// The caller's tier may not call the route.
    #[error("tier {tier:?} may not call {route}")]
    TierRoute { tier: String, route: String },
    /// The caller lacks the scope the route needs.
    #[error("missing scope {}", scope.as_str())]
    Scope { scope: Scope },
}

impl From<Refusal> for AuthError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::RateLimited {
                kind,
                limit,
                retry_after,
            } => AuthError::RateLimited {
                kind,
                limit,
                retry_after,
            },
            Refusal::OverMinuteLimit { questions, limit } => {
                AuthError::OverMinuteLimit { questions, limit }
            }
            Refusal::DailyCap {
                limit,
                used,
                questions,
                retry_after,
            } => AuthError::DailyCap {
                limit,
                used,
                questions,
                retry_after,
            },
        }
    }
}

impl From<QuotaError> for AuthError {
    fn from(e: QuotaError) -> Self {
        match e {
            QuotaError::Refused(r) => r.into(),
            QuotaError::Unavailable { retry_after } => AuthError::LimitsUnavailable { retry_after },
        }
    }
}

impl AuthError {
    /// The limit that refused the request, for the rejection counter.
    pub fn limit_kind(&self) -> Option<LimitKind> {
        match self {
            AuthError::Missing
            | AuthError::Invalid
            | AuthError::LimitsUnavailable { .. }
            | AuthError::Token(_)
            | AuthError::UnknownTier { .. }
            | AuthError::TierModel { .. }
            | AuthError::TierRoute { .. }
            | AuthError::Scope { .. } => None,
            AuthError::RateLimited { kind, .. } => Some(*kind),
            AuthError::OverMinuteLimit { .. } => Some(LimitKind::Questions),
            AuthError::DailyCap { .. } => Some(LimitKind::Daily),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Missing => ApiError::new(
                Code::MissingKey,
                "missing API key: send it as `Authorization: Bearer <key>`",
            ),
            AuthError::Invalid => ApiError::new(Code::InvalidKey, "invalid API key"),
            AuthError::RateLimited {
                kind,
                limit,
                retry_after,
            } => ApiError::new(
                Code::RateLimited,
                format!(
                    "this API key's limit of {limit} {} per minute is used up; retry after {retry_after} s",
                    kind.as_str()
                ),
            )
            .retry_after(retry_after),
            AuthError::OverMinuteLimit { questions, limit } => ApiError::new(
                Code::RateLimited,
                format!(
                    "this request has {questions} questions, more than this API key's limit of {limit} questions per minute; split it"
                ),
            )
            .retry_after(MAX_RATE_RETRY_SECS),
            AuthError::DailyCap {
                limit,
                used,
                questions,
                retry_after,
            } => ApiError::new(
                Code::DailyCap,
                format!(
                    "this API key's daily cap of {limit} questions is reached ({used} used today, this request has {questions}); it resets at 00:00 UTC, in {retry_after} s"
                ),
            )
            .retry_after(retry_after),
            AuthError::LimitsUnavailable { retry_after } => ApiError::new(
                Code::LimitsUnavailable,
                format!(
                    "this service cannot check its API key limits right now (the limit store is unavailable); retry after {retry_after} s"
                ),
            )
            .retry_after(retry_after),
            AuthError::Token(e) => token_refusal(e),
            e @ (AuthError::UnknownTier { .. }
            | AuthError::TierModel { .. }
            | AuthError::TierRoute { .. }
            | AuthError::Scope { .. }) => access_refusal(e),
        }
    }
}

/// The answer to a caller its tier or scopes refuse (or whose token names no tier).
fn access_refusal(e: AuthError) -> ApiError {
    match e {
        AuthError::UnknownTier { claim } => ApiError::new(
            Code::TokenBadClaims,
            format!("the token's {claim:?} claim names no configured tier"),
        ),
        AuthError::TierModel { tier, model } => ApiError::new(
            Code::TierModelRefused,
            format!("tier {tier:?} may not use model {model:?}; its models are set in the keys file's [[tier]]"),
        ),
        AuthError::TierRoute { tier, route } => ApiError::new(
            Code::TierRouteRefused,
            format!("tier {tier:?} may not call {route}; its routes are set in the keys file's [[tier]]"),
        ),
        AuthError::Scope { scope } => ApiError::new(
            Code::ScopeMissing,
            format!("this caller lacks the scope {:?} that this route needs", scope.as_str()),
        ),
        _ => ApiError::new(Code::Internal, "internal error"),
    }
}

/// The answer to a refused token: its own code, a message without the token.
fn token_refusal(e: TokenError) -> ApiError {
    match e {
        TokenError::Malformed => ApiError::new(
            Code::TokenInvalid,
            "the bearer token is not a well-formed JWT (three base64url parts, JSON header and payload)",
        ),
        TokenError::Signature => {
            ApiError::new(Code::TokenInvalid, "the token's signature does not verify")
        }
        TokenError::Expired => ApiError::new(
            Code::TokenExpired,
            "the token has expired (exp is past, beyond the allowed clock skew)",
        ),
        TokenError::NotYetValid => ApiError::new(
            Code::TokenNotYetValid,
            "the token is not valid yet (nbf is ahead, beyond the allowed clock skew)",
        ),
        TokenError::Issuer => ApiError::new(
            Code::TokenWrongIssuer,
            "the token's issuer (iss) is missing or not one this service accepts",
        ),
        TokenError::Audience => ApiError::new(
            Code::TokenWrongAudience,
            "the token's audience (aud) is missing or names no audience of this service",
        ),
        TokenError::UnknownKey => ApiError::new(
            Code::TokenUnknownKey,
            "the token's key id (kid) names no key of the configured JWKS",
        ),
        TokenError::Algorithm(alg) => ApiError::new(
            Code::TokenAlgorithmRefused,
            format!("the token's algorithm {alg:?} is not allowed for this service or its key"),
        ),
        TokenError::Claims(claim) => ApiError::new(
            Code::TokenBadClaims,
            format!("the token's {claim:?} claim is missing or malformed"),
        ),
        TokenError::KeysUnavailable => ApiError::new(
            Code::TokenKeysUnavailable,
            "the keys that verify tokens (JWKS) cannot be fetched right now",
        )
        .retry_after(crate::quota::UNAVAILABLE_RETRY_SECS),
    }
}
