//! Who is calling: a [`Caller`], and the [`Identity`] of an authenticated one.

use std::sync::Arc;

use super::scope::Scopes;
use super::tier::Tier;
use crate::quota::KeyQuota;

/// Who an authenticated caller is: what logs, limits, usage and the ledger know it by, and
/// what it may do. Never holds the key or the token.
#[derive(Debug)]
pub(super) struct Identity {
    /// The key's configured name, or a token caller's `sub-<hash>` (or `<name claim>@<tag>`):
    /// the limit store's, the usage record's and the ledger's name for it.
    pub(super) name: String,
    /// The metrics label: the key's name, or `token` / `token:<tier>` (bounded).
    pub(super) label: String,
    /// Its limits (by name, as the limit store knows it) and their local state.
    pub(super) quota: Arc<KeyQuota>,
    /// Its tier, if it names one.
    pub(super) tier: Option<Arc<Tier>>,
    /// What it may do.
    pub(super) scopes: Scopes,
}

/// Who is calling: a configured key or a verified token, or anyone when the service is
/// open.
#[derive(Debug, Clone)]
pub struct Caller(pub(super) Option<Arc<Identity>>);
