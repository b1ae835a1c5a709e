//! The configured keys, and the match of a bearer to a caller: a key by its digest in
//! constant time, or a signed token by its verifier.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use axum::http::HeaderValue;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::jwt::{looks_like_jwt, JwtVerifier, TokenClaims};
use super::names::{claim_name, subject_name};
use super::subjects::Subjects;
use super::tier::Tier;
use super::{AuthError, Caller, Identity};

/// One configured key: its digest and who it is.
pub(super) struct ApiKey {
    /// sha256 of the key.
    pub(super) digest: [u8; 32],
    /// The caller it authenticates.
    pub(super) identity: Arc<Identity>,
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
    pub(super) keys: Vec<Arc<ApiKey>>,
    /// `keys[i]`'s digest as four words, packed together so that comparing a bearer with
    /// every key is one pass over contiguous memory.
    pub(super) digests: Vec<[u64; 4]>,
    /// The `[[tier]]`s by name.
    pub(super) tiers: HashMap<String, Arc<Tier>>,
    /// The `[jwt]` section's verifier, when tokens are accepted.
    pub(super) jwt: Option<JwtVerifier>,
    /// Token callers' limit state.
    pub(super) subjects: Subjects,
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
pub(super) fn words(digest: &[u8; 32]) -> [u64; 4] {
    let mut out = [0u64; 4];
    for (word, chunk) in out.iter_mut().zip(digest.chunks_exact(8)) {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        *word = u64::from_ne_bytes(bytes);
    }
    out
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

/// sha256 of a key.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

impl Keys {
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

    /// The caller named `name` as it was when it made a batch that outlived the process:
    /// the configured key of that name, or else a token caller of that name and `tier`
    /// (with the scope to ask and its tier's limits); `None` for a name neither can be
    /// (a key since removed, a tier since renamed), whose batch then cannot run.
    pub fn caller_named(&self, name: &str, tier: Option<&str>) -> Option<Caller> {
        if self.is_open() {
            return Some(Caller(None));
        }
        if let Some(key) = self.keys.iter().find(|k| k.identity.name == name) {
            return Some(Caller(Some(key.identity.clone())));
        }
        self.jwt.as_ref()?;
        let tier = match tier {
            Some(t) => Some(self.tiers.get(t).cloned()?),
            None => None,
        };
        let limits = tier.as_ref().map(|t| t.limits).unwrap_or_default();
        Some(Caller(Some(Arc::new(Identity {
            quota: self.subjects.quota(name, limits),
            name: name.to_owned(),
            label: tier
                .as_ref()
                .map_or_else(|| "token".to_owned(), |t| format!("token:{}", t.name)),
            tier,
            scopes: super::scope::Scopes::of([super::scope::Scope::Ask]),
        }))))
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
        // The forms of `names` keep these apart from each other and from every key's name.
        let name = claims
            .name
            .and_then(|value| claim_name(claims.subject.issuer(), &value))
            .unwrap_or_else(|| subject_name(&claims.subject));
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
    use std::time::Duration;

    use super::super::keys_file::KeySpec;
    use super::super::ANONYMOUS;
    use super::*;
    use crate::config::ConfigError;
    use crate::days::{secs_to_utc_midnight, DAY_SECS};
    use crate::error::{ApiError, Code};
    use crate::quota::LimitKind;
    use crate::secret::Secret;

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
