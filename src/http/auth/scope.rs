//! [`Scope`]s: what a caller may do beyond being who it is. Keys and tokens carry the same
//! six; the doors and the ops routes each ask for theirs.
//!
//! A key without `scopes` has [`Scopes::KEY_DEFAULT`] (every scope but `usage:all`: a key
//! configured with none may do everything but read other keys' usage); the admin key
//! (`--admin-key`) reads every key's usage and records. A token's scopes come from
//! its scope claim (`scope`, space-separated as OAuth 2 writes it, or an array), names this
//! service does not know being ignored; a token without the claim has the `[jwt]` section's
//! `default_scopes` (`["ask"]` unless set). Callers of an open service (no keys, no tokens)
//! may do everything.

use std::fmt;

/// One thing a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Ask questions through any door (`/v1/systemone`, `/v1/decisions`, `/v2/rerank`).
    Ask,
    /// Read its ledger records (`GET /v1/ledger/decisions…`).
    LedgerRead,
    /// Post outcomes to its records (`POST /v1/ledger/decisions/{id}/outcomes`).
    OutcomesWrite,
    /// Read its own usage (`GET /v1/usage`).
    UsageOwn,
    /// Read every caller's usage (`GET /v1/usage` without or with another `key`).
    UsageAll,
    /// Upload batch files and run, read and cancel its own batches (`/v1/files`,
    /// `/v1/batches`); each line still needs `ask`.
    Batches,
}

impl Scope {
    /// Every scope, in the order the docs list them.
    pub const ALL: [Scope; 6] = [
        Scope::Ask,
        Scope::LedgerRead,
        Scope::OutcomesWrite,
        Scope::UsageOwn,
        Scope::UsageAll,
        Scope::Batches,
    ];

    /// The name in the keys file and in a token's scope claim.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Ask => "ask",
            Scope::LedgerRead => "ledger:read",
            Scope::OutcomesWrite => "outcomes:write",
            Scope::UsageOwn => "usage:own",
            Scope::UsageAll => "usage:all",
            Scope::Batches => "batches",
        }
    }

    /// The scope named `name`, if any.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of scopes (a bit set: checking one is a mask, on every request).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    /// Every scope (an open service's callers).
    pub const ALL: Scopes = Scopes(0b11_1111);
    /// A key without `scopes`: everything but `usage:all`.
    pub const KEY_DEFAULT: Scopes = Scopes(0b10_1111);

    /// The set of `scopes`.
    pub fn of(scopes: impl IntoIterator<Item = Scope>) -> Self {
        Scopes(scopes.into_iter().fold(0, |bits, s| bits | s.bit()))
    }

    /// The scopes named in a configured list; an unknown name is an error naming it.
    pub fn parse_list(names: &[String]) -> Result<Self, String> {
        names
            .iter()
            .map(|n| {
                Scope::parse(n).ok_or_else(|| {
                    format!(
                        "unknown scope {n:?}; the scopes are {}",
                        Scope::ALL.map(Scope::as_str).join(", ")
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Scopes::of)
    }

    /// The scopes a token's claim names: a space-separated string or an array of strings;
    /// names this service does not know are ignored (an identity provider's tokens carry
    /// scopes for other services too).
    pub fn from_claim(claim: &serde_json::Value) -> Option<Self> {
        let names: Vec<&str> = match claim {
            serde_json::Value::String(s) => s.split_ascii_whitespace().collect(),
            serde_json::Value::Array(items) => items.iter().filter_map(|v| v.as_str()).collect(),
            _ => return None,
        };
        Some(Scopes::of(names.into_iter().filter_map(Scope::parse)))
    }

    /// Whether `scope` is in the set.
    pub fn has(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }
}

impl fmt::Debug for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Scope::ALL
            .into_iter()
            .filter(|s| self.has(*s))
            .map(Scope::as_str)
            .collect();
        f.debug_list().entries(names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_from_config_and_claims() {
        let set = Scopes::parse_list(&["ask".into(), "usage:all".into()]).expect("known");
        assert!(set.has(Scope::Ask) && set.has(Scope::UsageAll) && !set.has(Scope::UsageOwn));
        let e = Scopes::parse_list(&["admin".into()]).expect_err("unknown");
        assert!(e.contains("\"admin\"") && e.contains("ledger:read"), "{e}");
        let claim = serde_json::json!("openid ask ledger:read");
        let from = Scopes::from_claim(&claim).expect("a string");
        assert_eq!(from, Scopes::of([Scope::Ask, Scope::LedgerRead]));
        let array = serde_json::json!(["usage:own", 3]);
        assert_eq!(
            Scopes::from_claim(&array),
            Some(Scopes::of([Scope::UsageOwn]))
        );
        assert_eq!(Scopes::from_claim(&serde_json::json!(7)), None);
        assert!(!Scopes::KEY_DEFAULT.has(Scope::UsageAll));
        assert!(Scope::ALL.into_iter().all(|s| Scopes::ALL.has(s)));
    }
}
