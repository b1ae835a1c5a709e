//! The keys file (`--keys-file`) and `SYSTEMONE_API_KEYS`, read into [`Keys`]: each key
//! by its digest with its name, limits, tier and scopes; the `[[tier]]`s; the `[jwt]`
//! section. Every mistake is a start-up error naming the key or the field, never a key.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use super::jwt::{JwtSpec, JwtVerifier};
use super::names::{valid_key_name, valid_name};
use super::scope::Scopes;
use super::tier::{Tier, TierSpec};
use super::{digest, limits_of, words, ApiKey, Identity, Keys, ANONYMOUS};
use crate::config::ConfigError;
use crate::quota::{KeyLimits, KeyQuota};
use crate::secret::Secret;

/// One `[[key]]` of the keys file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeySpec {
    /// For logs and metrics.
    pub(super) name: String,
    /// Hex sha256 of the key.
    pub(super) sha256: Option<String>,
    /// Env variable holding the plaintext key.
    pub(super) key_env: Option<String>,
    pub(super) requests_per_minute: Option<u32>,
    pub(super) questions_per_minute: Option<u32>,
    pub(super) daily_questions: Option<u64>,
    /// A `[[tier]]`'s name: its limits (where the key sets none of its own) and models.
    pub(super) tier: Option<String>,
    /// What the key may do; absent: [`Scopes::KEY_DEFAULT`].
    pub(super) scopes: Option<Vec<String>>,
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

    pub(super) fn key_of(&self, spec: KeySpec) -> Result<ApiKey, String> {
        if !valid_key_name(&spec.name) {
            return Err(format!(
                "the name must be 1 to 64 of A-Z a-z 0-9 - _ ., not {ANONYMOUS:?} and not sub-<32 hex> (a token caller's form)"
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
}
