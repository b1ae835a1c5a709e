//! What the routes ask of a [`Caller`]: its names for logs and metrics, its tier and
//! scopes, and its limits counted in the configured store; and the extractor that
//! authenticates a `/v1` route's caller before its body is read.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::refusal::AuthError;
use super::scope::Scope;
use super::tier::Tier;
use super::{Caller, Keys, ANONYMOUS};
use crate::error::ApiError;
use crate::http::context::RequestContext;
use crate::metrics::Metrics;
use crate::quota::{Admission, KeyQuota, Quotas};

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
    pub(in crate::http) fn allow_route(&self, route: &str) -> Result<(), AuthError> {
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
    /// refused before any upstream call. `line`: a batch line's request id (counted once
    /// however often the line runs, where the store keeps ids).
    pub async fn admit_questions(
        &self,
        quotas: &Quotas,
        questions: usize,
        line: Option<&str>,
    ) -> Result<Option<Admission>, AuthError> {
        match self.quota() {
            Some(q) => Ok(Some(quotas.admit_questions(q, questions, line).await?)),
            None => Ok(None),
        }
    }

    /// Gives back what [`Caller::admit_questions`] took (with the same `line`).
    pub async fn refund(&self, quotas: &Quotas, admission: Option<Admission>, line: Option<&str>) {
        if let (Some(q), Some(admission)) = (self.quota(), admission) {
            quotas.refund(q, admission, line).await;
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
        context.note_key(caller.name());
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
