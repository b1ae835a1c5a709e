//! API keys: who may call, and how much.
//!
//! Keys come from a TOML file (`--keys-file`) and/or `SYSTEMONE_API_KEYS` (comma-separated
//! plaintext keys, named `key-1`, `key-2`, … in order). Only their sha256 digests are kept;
//! a presented bearer is hashed and compared against every configured digest in constant
//! time (`subtle`), so neither the match nor its position shows in the timing. With no key
//! configured the service is open: any bearer value, or none, is accepted (the TypeSafe
//! SDKs refuse to start without some key, so callers always send one).
//!
//! ```toml
//! [[key]]
//! name = "acme"                 # for logs and metrics; the key itself is never printed
//! sha256 = "9f86d0…"            # hex digest of the key …
//! requests_per_minute = 600     # optional, all three
//! questions_per_minute = 6000
//! daily_questions = 1000000
//!
//! [[key]]
//! name = "ci"
//! key_env = "CI_SYSTEMONE_KEY"  # … or the env variable holding the plaintext key
//! ```
//!
//! Each key may carry limits: requests and questions per minute (GCRA; a 429
//! `system_one_rate_limited` with `Retry-After` from the GCRA wait, capped at 60 s) and a
//! cap on questions per UTC day (a 429 `system_one_daily_cap` whose `Retry-After` runs to
//! the next UTC midnight, so a client does not retry before the cap resets). Requests are
//! counted when the key is checked, before the body is read; questions after validation,
//! before any upstream call. Where they are counted (this process, a `redb` file, or a
//! Redis every replica shares) is [`crate::quota`]'s business; this file knows keys by
//! digest and hands the store their configured names only.
//!
//! The same file may hold `[[tier]]`s ([`tier`]: limits, models and routes a key or token
//! names), a `[jwt]` section ([`jwt`]: signed tokens beside the keys) and each key's
//! `tier` and `scopes` ([`scope`]). A bearer with a JWT's shape goes to token verification
//! when `[jwt]` is configured, anything else to the keys. A token caller is named by a hash
//! of its issuer and subject (`sub-<32 hex>`, or the configured name claim's value), which
//! its limits, usage and ledger records use; metrics label it `token` (or `token:<tier>`), a
//! bounded set, never per subject.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
#[cfg(test)]
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderValue;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::context::RequestContext;
use crate::config::ConfigError;
use crate::error::{ApiError, Code};
use crate::metrics::Metrics;
use crate::quota::{Admission, KeyLimits, KeyQuota, QuotaError, Quotas, Refusal};
use crate::secret::Secret;

pub use crate::days::{secs_to_utc_midnight, DAY_SECS};
pub use crate::quota::{LimitKind, MAX_RATE_RETRY_SECS};

mod jwks;
pub mod jwt;
pub mod salt;
pub mod scope;
mod subjects;
pub mod tier;

pub use jwks::JwksStatus;
use jwt::{looks_like_jwt, JwtSpec, JwtVerifier, TokenClaims, TokenError};
use scope::{Scope, Scopes};
use subjects::Subjects;
use tier::{Tier, TierSpec};

/// The name logs and metrics use for callers of an open service (no keys configured).
pub const ANONYMOUS: &str = "anonymous";

/// Who an authenticated caller is: what logs, limits, usage and the ledger know it by, and
/// what it may do. Never holds the key or the token.
#[derive(Debug)]
pub struct Identity {
    /// The key's configured name, or a token caller's `sub-<hash>` (or name claim): the
    /// limit store's, the usage record's and the ledger's name for it.
    name: String,
    /// The metrics label: the key's name, or `token` / `token:<tier>` (bounded).
    label: String,
    /// Its limits (by name, as the limit store knows it) and their local state.
    quota: Arc<KeyQuota>,
    /// Its tier, if it names one.
    tier: Option<Arc<Tier>>,
    /// What it may do.
    scopes: Scopes,
}

/// One configured key: its digest and who it is.
pub struct ApiKey {
    /// sha256 of the key.
    digest: [u8; 32],
    /// The caller it authenticates.
    identity: Arc<Identity>,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limits = self.identity.quota.limits();
        f.debug_struct("ApiKey")
            .field("name", &self.identity.name)
            .field("digest", &"[redacted]")
            .field("requests_per_minute", &limits.requests_per_minute)
            .field("questions_per_minute", &limits.questions_per_minute)
            .field("daily_questions", &limits.daily_questions)
            .field("tier", &self.identity.tier.as_ref().map(|t| &t.name))
            .field("scopes", &self.identity.scopes)
            .finish()
    }
}

/// The configured keys, tiers and token settings; with neither keys nor tokens the
/// service is open.
#[derive(Default)]
pub struct Keys {
    /// In configuration order (file first, then env).
    keys: Vec<Arc<ApiKey>>,
    /// `keys[i]`'s digest as four words, packed together so that comparing a bearer with
    /// every key is one pass over contiguous memory.
    digests: Vec<[u64; 4]>,
    /// The `[[tier]]`s by name.
    tiers: HashMap<String, Arc<Tier>>,
    /// The `[jwt]` section's verifier, when tokens are accepted.
    jwt: Option<JwtVerifier>,
    /// Token callers' limit state.
    subjects: Subjects,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names and limits only: the digests stay out of every log and panic message.
        f.debug_struct("Keys")
            .field("keys", &self.keys)
            .field("tiers", &self.tiers.keys())
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

/// A digest as four native-endian words.
fn words(digest: &[u8; 32]) -> [u64; 4] {
    let mut out = [0u64; 4];
    for (word, chunk) in out.iter_mut().zip(digest.chunks_exact(8)) {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        *word = u64::from_ne_bytes(bytes);
    }
    out
}

/// Who is calling: a configured key or a verified token, or anyone when the service is
/// open.
#[derive(Debug, Clone)]
pub struct Caller(Option<Arc<Identity>>);

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

impl Caller {
    /// The name for logs and metrics labels: the key's configured name, or
    /// [`ANONYMOUS`] when the service is open.
    pub fn name(&self) -> &str {
        self.0.as_ref().map_or(ANONYMOUS, |k| k.name.as_str())
    }

    /// The metrics label: the key's name, `token` or `token:<tier>` for token callers,
    /// [`ANONYMOUS`] when the service is open.
    pub fn label(&self) -> &str {
        self.0.as_ref().map_or(ANONYMOUS, |k| k.label.as_str())
    }

    /// The caller's limits as the store knows them (`None` when the service is open).
    pub fn quota(&self) -> Option<&Arc<KeyQuota>> {
        self.0.as_ref().map(|k| &k.quota)
    }

    /// The caller's tier, if it has one.
    pub fn tier(&self) -> Option<&Tier> {
        self.0.as_ref().and_then(|k| k.tier.as_deref())
    }

    /// Whether the caller has `scope` (every caller of an open service has every scope).
    pub fn has(&self, scope: Scope) -> bool {
        self.0.as_ref().is_none_or(|k| k.scopes.has(scope))
    }

    /// `Ok` when the caller has `scope`, else 403 `system_one_scope_missing`.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(AuthError::Scope { scope }.into())
        }
    }

    /// `Ok` when the caller's tier may be served by `model` (by its name or an alias),
    /// else 403 `system_one_tier_model_refused` naming the tier and the model.
    pub fn allow_model<'a>(
        &self,
        name: &'a str,
        aliases: impl Iterator<Item = &'a str>,
    ) -> Result<(), ApiError> {
        match self.tier() {
            Some(tier) if !tier.allows_model(std::iter::once(name).chain(aliases)) => {
                Err(AuthError::TierModel {
                    tier: tier.name.clone(),
                    model: name.to_owned(),
                }
                .into())
            }
            _ => Ok(()),
        }
    }

    /// `Ok` when the caller's tier may call `route`.
    fn allow_route(&self, route: &str) -> Result<(), AuthError> {
        match self.tier() {
            Some(tier) if !tier.allows_route(route) => Err(AuthError::TierRoute {
                tier: tier.name.clone(),
                route: route.to_owned(),
            }),
            _ => Ok(()),
        }
    }

    /// Whether this is a caller of an open service (no keys, no tokens configured): one
    /// tenant, no cache salt.
    pub fn is_anonymous(&self) -> bool {
        self.0.is_none()
    }

    /// Counts one request against the key's requests per minute in this process only (the
    /// in-memory store; [`Caller::check_request`] goes through the configured store).
    pub fn admit_request(&self) -> Result<(), AuthError> {
        match self.quota() {
            Some(q) => q.local.take_request().map_err(AuthError::from),
            None => Ok(()),
        }
    }

    /// Counts one request against the key's requests per minute in the configured store.
    pub async fn check_request(&self, quotas: &Quotas) -> Result<(), AuthError> {
        match self.quota() {
            Some(q) => Ok(quotas.admit_request(q).await?),
            None => Ok(()),
        }
    }

    /// Counts a validated request's questions against the key's questions per minute and
    /// daily cap in the configured store; nothing is taken from either when one of them
    /// refuses. The admission gives them back ([`Caller::refund`]) if the request is then
    /// refused before any upstream call.
    pub async fn admit_questions(
        &self,
        quotas: &Quotas,
        questions: usize,
    ) -> Result<Option<Admission>, AuthError> {
        match self.quota() {
            Some(q) => Ok(Some(quotas.admit_questions(q, questions).await?)),
            None => Ok(None),
        }
    }

    /// Gives back what [`Caller::admit_questions`] took.
    pub async fn refund(&self, quotas: &Quotas, admission: Option<Admission>) {
        if let (Some(q), Some(admission)) = (self.quota(), admission) {
            quotas.refund(q, admission).await;
        }
    }

    /// [`Caller::admit_questions`] in this process only, at a given wall-clock time (Unix
    /// seconds): the in-memory store's rule.
    pub fn admit_questions_at(&self, questions: usize, unix_secs: u64) -> Result<(), AuthError> {
        match self.quota() {
            Some(q) => q
                .local
                .take_questions_at(questions, unix_secs)
                .map_err(AuthError::from),
            None => Ok(()),
        }
    }
}

/// What authenticating a caller needs of the router's state. The state implements it, so
/// that the keys do not name the state that holds them.
pub trait CallerChecks: Send + Sync {
    /// The configured API keys.
    fn keys(&self) -> &Keys;
    /// Where the keys' limits are counted.
    fn quotas(&self) -> &Quotas;
    /// The per-key request and rejection counters.
    fn metrics(&self) -> &Metrics;
}

/// The caller of a `/v1` route: authenticated by its bearer and counted against its key's
/// requests per minute, before the body is read. The key's name (never the key) goes into
/// the request's summary line and the per-key metrics.
impl<S: CallerChecks> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let caller = state
            .keys()
            .identify(parts.headers.get(axum::http::header::AUTHORIZATION))
            .await?;
        let context = RequestContext::of(parts)?;
        context.summary.note_key(caller.name());
        caller.allow_route(&context.route)?;
        state.metrics().count_key_request(caller.label());
        caller
            .check_request(state.quotas())
            .await
            .inspect_err(|e| count_rejection(state.metrics(), &caller, e))?;
        Ok(caller)
    }
}

/// Counts a refusal by one of the key's limits (per key and kind).
pub(crate) fn count_rejection(metrics: &Metrics, caller: &Caller, e: &AuthError) {
    if let Some(kind) = e.limit_kind() {
        metrics.count_rejection(caller.label(), kind.as_str());
    }
}

/// One `[[key]]` of the keys file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeySpec {
    /// For logs and metrics.
    name: String,
    /// Hex sha256 of the key.
    sha256: Option<String>,
    /// Env variable holding the plaintext key.
    key_env: Option<String>,
    requests_per_minute: Option<u32>,
    questions_per_minute: Option<u32>,
    daily_questions: Option<u64>,
    /// A `[[tier]]`'s name: its limits (where the key sets none of its own) and models.
    tier: Option<String>,
    /// What the key may do; absent: [`Scopes::KEY_DEFAULT`].
    scopes: Option<Vec<String>>,
}

/// The keys file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    key: Vec<KeySpec>,
    #[serde(default)]
    tier: Vec<TierSpec>,
    jwt: Option<JwtSpec>,
}

/// Limits from their configured numbers (each optional; 0 is refused, naming the field).
fn limits_of(
    requests_per_minute: Option<u32>,
    questions_per_minute: Option<u32>,
    daily_questions: Option<u64>,
) -> Result<KeyLimits, String> {
    let per_minute = |n: Option<u32>, what: &str| -> Result<Option<NonZeroU32>, String> {
        n.map(|n| {
            NonZeroU32::new(n).ok_or(format!(
                "{what} must be at least 1 (leave it out for no limit)"
            ))
        })
        .transpose()
    };
    if daily_questions == Some(0) {
        return Err("daily_questions must be at least 1 (leave it out for no cap)".into());
    }
    Ok(KeyLimits {
        requests_per_minute: per_minute(requests_per_minute, "requests_per_minute")?,
        questions_per_minute: per_minute(questions_per_minute, "questions_per_minute")?,
        daily_questions,
    })
}

/// The bearer of an `Authorization` header: a missing header, another scheme or an empty
/// bearer is [`AuthError::Missing`].
fn bearer(authorization: Option<&HeaderValue>) -> Result<&str, AuthError> {
    authorization
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty())
        .ok_or(AuthError::Missing)
}

/// A token caller's name: `sub-` and 32 hex digits of sha256(issuer, 0, subject). Stable
/// across restarts and replicas (usage and the ledger are kept by it), and not the subject.
pub fn subject_name(issuer: &str, subject: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(issuer.as_bytes());
    hash.update([0u8]);
    hash.update(subject.as_bytes());
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("sub-{hex}")
}

/// sha256 of a key.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// 64 hex digits → 32 bytes.
fn parse_hex_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A name that is safe as a metrics label and log field.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != ANONYMOUS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl Keys {
    /// No keys: an open service.
    pub fn open() -> Self {
        Keys::default()
    }

    /// Loads the keys file (if any: its `[[tier]]`s, `[[key]]`s and `[jwt]`) and the
    /// comma-separated env keys (if any). Errors name the file, the entry and the problem,
    /// never a key.
    pub fn load(file: Option<&Path>, env_keys: Option<&Secret>) -> Result<Self, ConfigError> {
        let mut keys = Keys::default();
        if let Some(path) = file {
            let err = |reason: String| ConfigError::File {
                path: path.display().to_string(),
                reason,
            };
            let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
            let parsed: KeysFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
            keys.load_file(parsed).map_err(err)?;
        }
        if let Some(env) = env_keys {
            let plain = env
                .expose()
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty());
            for (i, key) in plain.enumerate() {
                let name = format!("key-{}", i + 1);
                keys.add(ApiKey {
                    identity: Arc::new(Identity {
                        quota: Arc::new(KeyQuota::new(name.clone(), KeyLimits::default())),
                        label: name.clone(),
                        name,
                        tier: None,
                        scopes: Scopes::KEY_DEFAULT,
                    }),
                    digest: digest(key),
                })
                .map_err(|e| ConfigError::Invalid(format!("SYSTEMONE_API_KEYS: {e}")))?;
            }
        }
        Ok(keys)
    }

    /// The file's tiers, then its keys (which name tiers), then its `[jwt]`.
    fn load_file(&mut self, parsed: KeysFile) -> Result<(), String> {
        for spec in parsed.tier {
            let name = spec.name.clone();
            if !valid_name(&name) {
                return Err(format!(
                    "tier {name:?}: the name must be 1 to 64 of A-Z a-z 0-9 - _ ."
                ));
            }
            let tier = Tier::from_spec(spec).map_err(|e| format!("tier {name:?}: {e}"))?;
            if self.tiers.insert(name.clone(), Arc::new(tier)).is_some() {
                return Err(format!("the tier name {name:?} is used twice"));
            }
        }
        for spec in parsed.key {
            let name = spec.name.clone();
            let key = self
                .key_of(spec)
                .map_err(|e| format!("key {name:?}: {e}"))?;
            self.add(key)?;
        }
        if let Some(spec) = parsed.jwt {
            let jwt = JwtVerifier::from_spec(spec).map_err(|e| format!("[jwt]: {e}"))?;
            if let Some(tier) = jwt.default_tier.as_deref() {
                if !self.tiers.contains_key(tier) {
                    return Err(format!("[jwt]: default_tier {tier:?} names no [[tier]]"));
                }
            }
            self.jwt = Some(jwt);
        }
        Ok(())
    }

    fn key_of(&self, spec: KeySpec) -> Result<ApiKey, String> {
        if !valid_name(&spec.name) {
            return Err(format!(
                "the name must be 1 to 64 of A-Z a-z 0-9 - _ . and not {ANONYMOUS:?}"
            ));
        }
        let digest = match (&spec.sha256, &spec.key_env) {
            (Some(hex), None) => parse_hex_digest(hex)
                .ok_or("sha256 must be 64 hex digits (the sha256 of the key)")?,
            (None, Some(var)) => match std::env::var(var) {
                Ok(key) if !key.trim().is_empty() => digest(key.trim()),
                _ => return Err(format!("key_env {var:?} is not set or empty")),
            },
            _ => return Err("give exactly one of sha256 and key_env".into()),
        };
        let own = limits_of(
            spec.requests_per_minute,
            spec.questions_per_minute,
            spec.daily_questions,
        )?;
        let tier = match &spec.tier {
            None => None,
            Some(name) => Some(
                self.tiers
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("tier {name:?} names no [[tier]]"))?,
            ),
        };
        // The key's own numbers win over its tier's, field by field.
        let limits = match &tier {
            None => own,
            Some(t) => KeyLimits {
                requests_per_minute: own.requests_per_minute.or(t.limits.requests_per_minute),
                questions_per_minute: own.questions_per_minute.or(t.limits.questions_per_minute),
                daily_questions: own.daily_questions.or(t.limits.daily_questions),
            },
        };
        let scopes = match &spec.scopes {
            None => Scopes::KEY_DEFAULT,
            Some(names) => Scopes::parse_list(names)?,
        };
        Ok(ApiKey {
            identity: Arc::new(Identity {
                quota: Arc::new(KeyQuota::new(spec.name.clone(), limits)),
                label: spec.name.clone(),
                name: spec.name,
                tier,
                scopes,
            }),
            digest,
        })
    }

    fn add(&mut self, key: ApiKey) -> Result<(), String> {
        let name = &key.identity.name;
        if self.keys.iter().any(|k| &k.identity.name == name) {
            return Err(format!("the key name {name:?} is used twice"));
        }
        if self.keys.iter().any(|k| k.digest == key.digest) {
            return Err(format!("key {name:?} is configured twice"));
        }
        self.digests.push(words(&key.digest));
        self.keys.push(Arc::new(key));
        Ok(())
    }

    /// Every configured key's name, in configuration order.
    pub fn names(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.identity.name.clone()).collect()
    }

    /// Whether neither keys nor tokens are configured: the service is open.
    pub fn is_open(&self) -> bool {
        self.keys.is_empty() && self.jwt.is_none()
    }

    /// The token verifier, when `[jwt]` is configured.
    pub fn jwt(&self) -> Option<&JwtVerifier> {
        self.jwt.as_ref()
    }

    /// The configured tiers' names and their models (for the start-up check that each
    /// names a served model).
    pub fn tier_models(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.tiers
            .values()
            .filter_map(|t| t.models.as_deref().map(|m| (t.name.as_str(), m)))
    }

    /// How many keys are configured.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no keys are configured.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Checks an `Authorization` header. Open: anyone. Otherwise a missing header, another
    /// scheme or an empty bearer is [`AuthError::Missing`] and a bearer that matches no key
    /// [`AuthError::Invalid`].
    ///
    /// Every configured digest is compared, whether or not one matched: each comparison is
    /// a fold-xor over the four words (no early exit), and the match is picked with
    /// `subtle`'s constant-time select, so the time taken says nothing about which key, if
    /// any, matched or how much of a digest agreed.
    pub fn authenticate(&self, authorization: Option<&HeaderValue>) -> Result<Caller, AuthError> {
        if self.is_open() {
            return Ok(Caller(None));
        }
        self.match_key(bearer(authorization)?)
    }

    /// Identifies the caller: a bearer with a JWT's shape is verified as a token when
    /// `[jwt]` is configured; any other bearer is checked against the keys
    /// ([`Keys::authenticate`]).
    pub async fn identify(&self, authorization: Option<&HeaderValue>) -> Result<Caller, AuthError> {
        if self.is_open() {
            return Ok(Caller(None));
        }
        let token = bearer(authorization)?;
        match &self.jwt {
            Some(jwt) if looks_like_jwt(token) => {
                let claims = jwt.verify(token).await.map_err(AuthError::Token)?;
                self.token_caller(claims)
            }
            _ => self.match_key(token),
        }
    }

    /// The caller a verified token names: its name (hashed subject, or the name claim), its
    /// tier and its limit state.
    fn token_caller(&self, claims: TokenClaims) -> Result<Caller, AuthError> {
        let tier = match &claims.tier {
            None => None,
            Some(name) => Some(self.tiers.get(name).cloned().ok_or_else(|| {
                AuthError::UnknownTier {
                    claim: self
                        .jwt
                        .as_ref()
                        .map_or("tier", |j| j.tier_claim())
                        .to_owned(),
                }
            })?),
        };
        let name = claims
            .name
            .filter(|n| valid_name(n) && !self.keys.iter().any(|k| &k.identity.name == n))
            .unwrap_or_else(|| subject_name(&claims.subject.0, &claims.subject.1));
        let limits = tier.as_ref().map(|t| t.limits).unwrap_or_default();
        let label = match &tier {
            Some(t) => format!("token:{}", t.name),
            None => "token".to_owned(),
        };
        Ok(Caller(Some(Arc::new(Identity {
            quota: self.subjects.quota(&name, limits),
            name,
            label,
            tier,
            scopes: claims.scopes,
        }))))
    }

    /// The key whose digest is `token`'s (see [`Keys::authenticate`]).
    fn match_key(&self, token: &str) -> Result<Caller, AuthError> {
        let presented = words(&digest(token));
        // 1-based index of the match, 0 for none, chosen without branching on the digests.
        let mut found = 0u64;
        for (i, stored) in self.digests.iter().enumerate() {
            let diff = (stored[0] ^ presented[0])
                | (stored[1] ^ presented[1])
                | (stored[2] ^ presented[2])
                | (stored[3] ^ presented[3]);
            found.conditional_assign(&(i as u64 + 1), diff.ct_eq(&0));
        }
        match found.checked_sub(1) {
            Some(i) => Ok(Caller(Some(self.keys[i as usize].identity.clone()))),
            None => Err(AuthError::Invalid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: [u8; 32]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn bearer(key: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {key}")).expect("header")
    }

    fn keys_file(text: &str) -> Result<Keys, ConfigError> {
        let dir = std::env::temp_dir().join(format!(
            "systemone-keys-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("tmp");
        let path = dir.join("keys.toml");
        std::fs::write(&path, text).expect("write");
        let keys = Keys::load(Some(&path), None);
        let _ = std::fs::remove_dir_all(&dir);
        keys
    }

    #[test]
    fn an_empty_configuration_is_open() {
        let keys = Keys::load(None, None).expect("loads");
        assert!(keys.is_open());
        let caller = keys.authenticate(None).expect("open");
        assert_eq!(caller.name(), ANONYMOUS);
        assert!(keys.authenticate(Some(&bearer("anything"))).is_ok());
    }

    #[test]
    fn env_keys_are_named_in_order_and_compared_by_digest() {
        let keys = Keys::load(None, Some(&Secret::new(" sk-one , ,sk-two"))).expect("loads");
        assert_eq!(keys.len(), 2);
        let caller = keys.authenticate(Some(&bearer("sk-two"))).expect("valid");
        assert_eq!(caller.name(), "key-2");
        assert_eq!(
            keys.authenticate(Some(&bearer("sk-three")))
                .expect_err("refused"),
            AuthError::Invalid
        );
        assert_eq!(
            keys.authenticate(None).expect_err("refused"),
            AuthError::Missing
        );
        for header in ["Basic c2stb25l", "Bearer ", "sk-one", "Bearer"] {
            let value = HeaderValue::from_str(header).expect("header");
            assert_eq!(
                keys.authenticate(Some(&value)).expect_err("refused"),
                AuthError::Missing,
                "{header}"
            );
        }
        let lower = HeaderValue::from_static("bearer sk-one");
        assert_eq!(keys.authenticate(Some(&lower)).expect("ok").name(), "key-1");
    }

    #[test]
    fn the_file_takes_digests_and_env_names_and_never_echoes_a_key() {
        std::env::set_var("SYSTEMONE_TEST_KEY_ENV_A", "sk-from-env-a");
        let keys = keys_file(&format!(
            "[[key]]\nname = \"hashed\"\nsha256 = \"{}\"\nrequests_per_minute = 2\n\n[[key]]\nname = \"env\"\nkey_env = \"SYSTEMONE_TEST_KEY_ENV_A\"\n",
            hex(digest("sk-hashed"))
        ))
        .expect("loads");
        assert_eq!(
            keys.authenticate(Some(&bearer("sk-hashed")))
                .expect("ok")
                .name(),
            "hashed"
        );
        assert_eq!(
            keys.authenticate(Some(&bearer("sk-from-env-a")))
                .expect("ok")
                .name(),
            "env"
        );
        let debug = format!("{keys:?}");
        assert!(!debug.contains("sk-"), "{debug}");
        assert!(!debug.contains(&hex(digest("sk-hashed"))), "{debug}");
        let first_word = words(&digest("sk-hashed"))[0].to_string();
        assert!(!debug.contains(&first_word), "{debug}");
        assert!(
            debug.contains("hashed") && debug.contains("[redacted]"),
            "{debug}"
        );

        for (text, why) in [
            ("[[key]]\nname = \"a\"\n", "neither"),
            ("[[key]]\nname = \"a\"\nsha256 = \"zz\"\n", "bad hex"),
            ("[[key]]\nname = \"a b\"\nkey_env = \"SYSTEMONE_TEST_KEY_ENV_A\"\n", "bad name"),
            ("[[key]]\nname = \"a\"\nkey_env = \"SYSTEMONE_TEST_KEY_UNSET\"\n", "unset env"),
            ("[[key]]\nname = \"a\"\nkey_env = \"SYSTEMONE_TEST_KEY_ENV_A\"\nrequests_per_minute = 0\n", "zero limit"),
            ("[[key]]\nname = \"a\"\nkey_env = \"SYSTEMONE_TEST_KEY_ENV_A\"\nbogus = 1\n", "unknown field"),
            ("[[key]]\nname = \"a\"\nkey_env = \"SYSTEMONE_TEST_KEY_ENV_A\"\n[[key]]\nname = \"b\"\nkey_env = \"SYSTEMONE_TEST_KEY_ENV_A\"\n", "same key twice"),
        ] {
            let e = keys_file(text).expect_err(why).to_string();
            assert!(!e.contains("sk-from-env-a"), "{why}: {e}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn per_minute_limits_refuse_and_refill_on_tokio_time() {
        let spec = KeySpec {
            name: "k".into(),
            sha256: Some(hex(digest("sk"))),
            key_env: None,
            requests_per_minute: Some(2),
            questions_per_minute: Some(5),
            daily_questions: None,
            tier: None,
            scopes: None,
        };
        let caller = Caller(Some(Keys::default().key_of(spec).expect("spec").identity));
        assert!(caller.admit_request().is_ok());
        assert!(caller.admit_request().is_ok());
        let AuthError::RateLimited { retry_after, .. } =
            caller.admit_request().expect_err("refused")
        else {
            panic!("rate limited")
        };
        assert_eq!(retry_after, 30, "one request per 30 s refills");
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(caller.admit_request().is_ok());

        assert!(caller.admit_questions_at(4, 0).is_ok());
        let e = caller.admit_questions_at(2, 0).expect_err("refused");
        assert_eq!(e.limit_kind(), Some(LimitKind::Questions));
        assert_eq!(
            caller.admit_questions_at(6, 0).expect_err("refused"),
            AuthError::OverMinuteLimit {
                questions: 6,
                limit: 5
            }
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(caller.admit_questions_at(5, 0).is_ok());
    }

    #[tokio::test]
    async fn the_daily_cap_resets_at_utc_midnight_and_says_when() {
        let spec = KeySpec {
            name: "k".into(),
            sha256: Some(hex(digest("sk"))),
            key_env: None,
            requests_per_minute: None,
            questions_per_minute: None,
            daily_questions: Some(10),
            tier: None,
            scopes: None,
        };
        let caller = Caller(Some(Keys::default().key_of(spec).expect("spec").identity));
        let day = 20_000 * DAY_SECS;
        assert!(caller.admit_questions_at(6, day + 100).is_ok());
        assert!(caller.admit_questions_at(4, day + 200).is_ok());
        let e = caller
            .admit_questions_at(1, day + 300)
            .expect_err("refused");
        assert_eq!(
            e,
            AuthError::DailyCap {
                limit: 10,
                used: 10,
                questions: 1,
                retry_after: DAY_SECS - 300
            }
        );
        let api: ApiError = e.into();
        assert_eq!(api.code, Code::DailyCap);
        assert_eq!(api.retry_after, Some(DAY_SECS - 300));
        assert!(
            caller.admit_questions_at(10, day + DAY_SECS).is_ok(),
            "next day"
        );
        assert_eq!(secs_to_utc_midnight(day + DAY_SECS - 1), 1);
        assert_eq!(secs_to_utc_midnight(day), DAY_SECS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_by_one_limit_takes_nothing_from_the_other() {
        let spec = KeySpec {
            name: "k".into(),
            sha256: Some(hex(digest("sk"))),
            key_env: None,
            requests_per_minute: None,
            questions_per_minute: Some(3),
            daily_questions: Some(5),
            tier: None,
            scopes: None,
        };
        let caller = Caller(Some(Keys::default().key_of(spec).expect("spec").identity));
        assert!(caller.admit_questions_at(3, 0).is_ok());
        // The per-minute limit refuses: the daily count stays at 3.
        assert_eq!(
            caller
                .admit_questions_at(2, 0)
                .expect_err("refused")
                .limit_kind(),
            Some(LimitKind::Questions)
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(caller.admit_questions_at(2, 0).is_ok());
        assert_eq!(
            caller
                .admit_questions_at(1, 0)
                .expect_err("refused")
                .limit_kind(),
            Some(LimitKind::Daily)
        );
    }
}
