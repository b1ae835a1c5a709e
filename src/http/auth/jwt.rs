//! Signed tokens: `Authorization: Bearer <JWT>` verified with [`jsonwebtoken`] against the
//! keys of a JWKS ([`super::jwks`]), configured by the keys file's `[jwt]` section.
//!
//! ```toml
//! [jwt]
//! jwks_url = "https://idp.example.com/.well-known/jwks.json"  # or jwks_file = "jwks.json"
//! issuer = "https://idp.example.com/"      # required; a string or a list
//! audience = "systemone"                   # optional; a string or a list
//! algorithms = ["RS256", "ES256"]          # default: every asymmetric one; never HS*, never none
//! leeway_secs = 30                         # clock skew allowed on exp and nbf
//! jwks_ttl_secs = 600                      # how long fetched keys are trusted
//! jwks_refetch_secs = 5                    # least time between two fetches
//! identity_claim = "sub"                   # who the caller is (hashed before it is used)
//! name_claim = "client_id"                 # optional: a readable name (`<value>@<issuer tag>`)
//! tier_claim = "tier"                      # names a [[tier]]
//! default_tier = "free"                    # for a token without the tier claim
//! scope_claim = "scope"                    # "ask usage:own" or ["ask", "usage:own"]
//! default_scopes = ["ask"]                 # for a token without the scope claim
//! ```
//!
//! The checks, in order, each refusal its own 401 code: the bearer is three base64url parts
//! whose header is JSON (`system_one_token_invalid`); its `alg` is one the operator allows
//! (`system_one_token_algorithm_refused`: `none` and every HMAC algorithm always are, so a
//! token signed with HS256 using the public key as the secret never reaches a key); its
//! `kid` names a cached key, after at most one refetch (`system_one_token_unknown_key`), of
//! the algorithm's family; the signature (`system_one_token_invalid`); `exp` (required) and
//! `nbf` with the leeway (`system_one_token_expired`, `system_one_token_not_yet_valid`);
//! `aud` (required when configured: `system_one_token_wrong_audience`); `iss`, a string
//! (RFC 7519 §4.1.1) that is a configured issuer (`system_one_token_wrong_issuer`; of
//! another JSON type, a list included, `system_one_token_bad_claims`); the identity, tier
//! and scope claims (`system_one_token_bad_claims`). Messages never hold the token or a
//! claim's value.
//!
//! A client sends one token for many requests, and checking a signature costs tens of
//! microseconds (ES256, RS256): a token that verified is remembered by its sha256
//! ([`Verified`]) until its `exp` (plus the leeway) or for [`VERIFIED_SECS`], whichever is
//! first, and only while the JWKS is fresh, so a repeat costs a hash and a lookup; a key
//! removed from the JWKS stops being accepted within [`VERIFIED_SECS`] of its removal
//! being fetched.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, AlgorithmFamily, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::Digest;

use super::jwks::{Jwks, JwksStatus, Lookup, Source};
use super::names::Subject;
use super::scope::Scopes;

/// Every asymmetric algorithm `jsonwebtoken` verifies: the default allow-list.
const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Longest identity claim value accepted, in bytes.
const MAX_IDENTITY_BYTES: usize = 1024;
/// Longest a verified token is remembered, in seconds.
pub const VERIFIED_SECS: u64 = 60;
/// Most tokens remembered; past it the cache starts again empty.
const MAX_VERIFIED: usize = 10_000;

/// Tokens that verified, by sha256: their claims and until when (Unix seconds).
#[derive(Debug, Default)]
struct Verified(std::sync::Mutex<HashMap<[u8; 32], (TokenClaims, u64)>>);

impl Verified {
    fn get(&self, digest: &[u8; 32], now: u64) -> Option<TokenClaims> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(digest)
            .filter(|(_, until)| now < *until)
            .map(|(claims, _)| claims.clone())
    }

    fn put(&self, digest: [u8; 32], claims: TokenClaims, until: u64) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_VERIFIED {
            map.clear();
        }
        map.insert(digest, (claims, until));
    }
}

/// A string or a list of strings in the TOML.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// The `[jwt]` section of the keys file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JwtSpec {
    jwks_url: Option<String>,
    jwks_file: Option<PathBuf>,
    issuer: Option<OneOrMany>,
    audience: Option<OneOrMany>,
    algorithms: Option<Vec<String>>,
    #[serde(default = "defaults::leeway")]
    leeway_secs: u64,
    #[serde(default = "defaults::ttl")]
    jwks_ttl_secs: u64,
    #[serde(default = "defaults::refetch")]
    jwks_refetch_secs: u64,
    #[serde(default = "defaults::identity")]
    identity_claim: String,
    name_claim: Option<String>,
    #[serde(default = "defaults::tier")]
    tier_claim: String,
    pub(super) default_tier: Option<String>,
    #[serde(default = "defaults::scope")]
    scope_claim: String,
    default_scopes: Option<Vec<String>>,
}

mod defaults {
    pub(super) fn leeway() -> u64 {
        30
    }
    pub(super) fn ttl() -> u64 {
        600
    }
    pub(super) fn refetch() -> u64 {
        5
    }
    pub(super) fn identity() -> String {
        "sub".into()
    }
    pub(super) fn tier() -> String {
        "tier".into()
    }
    pub(super) fn scope() -> String {
        "scope".into()
    }
}

/// Why a token is refused. Never carries the token or a claim's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Not three base64url parts with a JSON header and payload.
    Malformed,
    /// The signature does not verify (a tampered header or payload, or another key's).
    Signature,
    /// `exp` has passed (beyond the leeway).
    Expired,
    /// `nbf` is still ahead (beyond the leeway).
    NotYetValid,
    /// `iss` is missing or not a configured issuer.
    Issuer,
    /// `aud` is missing or names no configured audience.
    Audience,
    /// No cached key has the token's `kid`, after at most one refetch.
    UnknownKey,
    /// The header's algorithm is not allowed (`alg` as a known name, else `"unknown"`), or
    /// the key is of another algorithm.
    Algorithm(String),
    /// A claim this service reads is missing or malformed (the claim's name).
    Claims(String),
    /// No fresh keys: the JWKS was never fetched or has expired and cannot be fetched.
    KeysUnavailable,
}

/// What a verified token says about its caller.
#[derive(Debug, Clone)]
pub struct TokenClaims {
    /// The issuer and the identity claim's value (to be hashed, never shown).
    pub subject: Subject,
    /// The name claim's value, when configured and present (its issuer tags it).
    pub name: Option<String>,
    /// The tier claim's value (or the default tier), if any.
    pub tier: Option<String>,
    /// The scopes the token grants.
    pub scopes: Scopes,
}

/// Verifies tokens: the settings of `[jwt]` and the key cache.
#[derive(Debug)]
pub struct JwtVerifier {
    jwks: Arc<Jwks>,
    /// The configured issuers (none empty): `iss` must be one of them.
    issuers: Vec<String>,
    /// One validation per allowed algorithm (the allow-list is the map's keys).
    validations: HashMap<Algorithm, Validation>,
    identity_claim: String,
    name_claim: Option<String>,
    tier_claim: String,
    pub(super) default_tier: Option<String>,
    scope_claim: String,
    default_scopes: Scopes,
    /// The leeway on `exp` and `nbf`, in seconds.
    leeway: u64,
    /// Tokens that verified.
    verified: Verified,
}

impl JwtVerifier {
    /// The verifier of a `[jwt]` section; errors name the setting.
    pub(super) fn from_spec(spec: JwtSpec) -> Result<Self, String> {
        let source = match (spec.jwks_url, spec.jwks_file) {
            (Some(url), None) if url.starts_with("https://") || url.starts_with("http://") => {
                Source::Url(url)
            }
            (Some(_), None) => return Err("jwks_url must be an http:// or https:// URL".into()),
            (None, Some(path)) => Source::File(path),
            _ => return Err("give exactly one of jwks_url and jwks_file".into()),
        };
        let issuers = issuers_of(spec.issuer)?;
        let audiences = spec.audience.map(OneOrMany::into_vec);
        let algorithms = allowed_algorithms(spec.algorithms.as_deref())?;
        let validations = algorithms
            .into_iter()
            .map(|alg| {
                let mut v = Validation::new(alg);
                v.leeway = spec.leeway_secs;
                v.validate_nbf = true;
                // `iss` is checked by `claims`, which also refuses it of the wrong type.
                v.iss = None;
                let mut required = vec!["exp"];
                match &audiences {
                    Some(aud) => {
                        v.set_audience(aud);
                        required.push("aud");
                    }
                    None => v.validate_aud = false,
                }
                v.set_required_spec_claims(&required);
                (alg, v)
            })
            .collect();
        let default_scopes = match &spec.default_scopes {
            Some(names) => Scopes::parse_list(names).map_err(|e| format!("default_scopes: {e}"))?,
            None => Scopes::of([super::scope::Scope::Ask]),
        };
        let jwks = Jwks::new(
            source,
            Duration::from_secs(spec.jwks_ttl_secs.max(1)),
            Duration::from_secs(spec.jwks_refetch_secs),
        )?;
        Ok(JwtVerifier {
            jwks: Arc::new(jwks),
            issuers,
            validations,
            identity_claim: spec.identity_claim,
            name_claim: spec.name_claim,
            tier_claim: spec.tier_claim,
            default_tier: spec.default_tier,
            scope_claim: spec.scope_claim,
            default_scopes,
            leeway: spec.leeway_secs,
            verified: Verified::default(),
        })
    }

    /// Starts keeping the keys fetched in the background (when called in a runtime; once),
    /// so that `/readyz` and the first token need not wait for them, and keys that could not
    /// be fetched at start-up are fetched once the JWKS answers, with no token needed.
    pub fn start(&self) {
        self.jwks.start();
    }

    /// `/readyz`'s line about the keys.
    pub fn status(&self) -> JwksStatus {
        self.jwks.status()
    }

    /// Verifies `token` (or finds it verified) and reads its caller's claims.
    pub async fn verify(&self, token: &str) -> Result<TokenClaims, TokenError> {
        let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let now = jsonwebtoken::get_current_timestamp();
        if let Some(claims) = self.verified.get(&digest, now) {
            if self.jwks.fresh() {
                return Ok(claims);
            }
        }
        let (claims, exp) = self.verify_signed(token).await?;
        let until = exp
            .saturating_add(self.leeway)
            .min(now.saturating_add(VERIFIED_SECS));
        self.verified.put(digest, claims.clone(), until);
        Ok(claims)
    }

    /// Verifies `token`'s signature and claims: its caller's claims and its `exp`.
    async fn verify_signed(&self, token: &str) -> Result<(TokenClaims, u64), TokenError> {
        let header = peek_header(token)?;
        let alg = header
            .alg
            .parse::<Algorithm>()
            .ok()
            .filter(|a| self.validations.contains_key(a))
            .ok_or_else(|| TokenError::Algorithm(known_alg_name(&header.alg)))?;
        let entry = match self.jwks.lookup(header.kid.as_deref()).await {
            Lookup::Found(entry) => entry,
            Lookup::Unknown => return Err(TokenError::UnknownKey),
            Lookup::Unavailable => return Err(TokenError::KeysUnavailable),
        };
        if entry.key.family() != alg.family() || entry.alg.is_some_and(|a| a != alg) {
            return Err(TokenError::Algorithm(known_alg_name(&header.alg)));
        }
        let validation = self
            .validations
            .get(&alg)
            .ok_or_else(|| TokenError::Algorithm(known_alg_name(&header.alg)))?;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &entry.key, validation)
            .map_err(|e| refusal(e.kind()))?;
        let exp = data
            .claims
            .get("exp")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        Ok((self.claims(&data.claims)?, exp.max(0.0) as u64))
    }

    /// The caller's identity, name, tier and scopes from verified claims.
    fn claims(&self, claims: &Map<String, Value>) -> Result<TokenClaims, TokenError> {
        let text = |name: &str| claims.get(name).and_then(Value::as_str);
        let identity = text(&self.identity_claim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_IDENTITY_BYTES)
            .ok_or_else(|| TokenError::Claims(self.identity_claim.clone()))?;
        let subject = Subject::new(self.issuer(claims)?, identity)
            .ok_or_else(|| TokenError::Claims(self.identity_claim.clone()))?;
        let tier = match claims.get(&self.tier_claim) {
            None | Some(Value::Null) => self.default_tier.clone(),
            Some(Value::String(t)) => Some(t.clone()),
            Some(_) => return Err(TokenError::Claims(self.tier_claim.clone())),
        };
        let scopes = match claims.get(&self.scope_claim) {
            None | Some(Value::Null) => self.default_scopes,
            Some(claim) => Scopes::from_claim(claim)
                .ok_or_else(|| TokenError::Claims(self.scope_claim.clone()))?,
        };
        Ok(TokenClaims {
            subject,
            name: self.name_claim.as_deref().and_then(text).map(str::to_owned),
            tier,
            scopes,
        })
    }

    /// The token's `iss`: a string that is a configured issuer (so never empty). A list,
    /// which RFC 7519 does not allow and which would leave the subject without its
    /// issuer, is refused as any claim of the wrong type is.
    fn issuer<'a>(&self, claims: &'a Map<String, Value>) -> Result<&'a str, TokenError> {
        match claims.get("iss") {
            Some(Value::String(iss)) if self.issuers.contains(iss) => Ok(iss),
            None | Some(Value::String(_)) => Err(TokenError::Issuer),
            Some(_) => Err(TokenError::Claims("iss".into())),
        }
    }

    /// The tier claim's name, for messages.
    pub fn tier_claim(&self) -> &str {
        &self.tier_claim
    }
}

/// The configured issuers: at least one, none empty (an empty one would let a token's
/// subject be named without its issuer).
fn issuers_of(issuer: Option<OneOrMany>) -> Result<Vec<String>, String> {
    let issuers = issuer.map(OneOrMany::into_vec).unwrap_or_default();
    if issuers.is_empty() || issuers.iter().any(String::is_empty) {
        return Err(
            "issuer is required and may not be empty (the `iss` every token must carry)".into(),
        );
    }
    Ok(issuers)
}

/// The allowed algorithms: the configured names (asymmetric only), or all asymmetric ones.
fn allowed_algorithms(names: Option<&[String]>) -> Result<Vec<Algorithm>, String> {
    let Some(names) = names else {
        return Ok(ASYMMETRIC.to_vec());
    };
    if names.is_empty() {
        return Err("algorithms is empty; leave it out to allow every asymmetric one".into());
    }
    names
        .iter()
        .map(|name| {
            let alg = name.parse::<Algorithm>().map_err(|_| {
                format!("algorithms lists {name:?}, which is not a JWS algorithm this service verifies")
            })?;
            if alg.family() == AlgorithmFamily::Hmac {
                return Err(format!(
                    "algorithms lists {name:?}: HMAC algorithms are refused (a JWKS holds public keys, and a shared secret would let any holder mint tokens)"
                ));
            }
            Ok(alg)
        })
        .collect()
}

/// The header fields read before any key is chosen.
#[derive(Deserialize)]
struct PeekedHeader {
    alg: String,
    kid: Option<String>,
}

/// The header of a token, read without trusting it (only to choose the algorithm and key).
fn peek_header(token: &str) -> Result<PeekedHeader, TokenError> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .map_err(|_| TokenError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)
}

/// Whether `bearer` has a JWT's shape: three base64url parts whose first decodes to a JSON
/// object with an `alg`. An API key never has it (so keys keep their own path).
pub fn looks_like_jwt(bearer: &str) -> bool {
    bearer.bytes().filter(|b| *b == b'.').count() == 2 && peek_header(bearer).is_ok()
}

/// An algorithm name fit for a message: one of the JWS names, else `"unknown"` (the header
/// is the caller's text).
fn known_alg_name(alg: &str) -> String {
    const NAMES: [&str; 14] = [
        "none", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
        "ES256", "ES384", "ES512", "EdDSA",
    ];
    NAMES
        .iter()
        .find(|n| n.eq_ignore_ascii_case(alg))
        .map_or_else(|| "unknown".to_owned(), |n| (*n).to_owned())
}

/// The refusal for `jsonwebtoken`'s error.
fn refusal(kind: &ErrorKind) -> TokenError {
    match kind {
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidIssuer => TokenError::Issuer,
        ErrorKind::InvalidAudience => TokenError::Audience,
        ErrorKind::MissingRequiredClaim(c) if c == "iss" => TokenError::Issuer,
        ErrorKind::MissingRequiredClaim(c) if c == "aud" => TokenError::Audience,
        ErrorKind::MissingRequiredClaim(c) | ErrorKind::InvalidClaimFormat(c) => {
            TokenError::Claims(c.clone())
        }
        ErrorKind::InvalidAlgorithm => TokenError::Algorithm("unknown".into()),
        ErrorKind::InvalidSignature => TokenError::Signature,
        _ => TokenError::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_and_unknown_algorithms_are_refused_in_the_configuration() {
        assert_eq!(allowed_algorithms(None).expect("default").len(), 9);
        let e = allowed_algorithms(Some(&["HS256".into()])).expect_err("hmac");
        assert!(e.contains("HMAC"), "{e}");
        assert!(allowed_algorithms(Some(&["none".into()])).is_err());
        assert!(allowed_algorithms(Some(&[])).is_err());
        assert_eq!(
            allowed_algorithms(Some(&["ES256".into()])).expect("ok"),
            vec![Algorithm::ES256]
        );
    }

    fn verifier(section: &str) -> Result<JwtVerifier, String> {
        let spec: JwtSpec = toml::from_str(section).map_err(|e| e.to_string())?;
        JwtVerifier::from_spec(spec)
    }

    /// `iss` must be a configured issuer's string: a list (even of configured issuers) or
    /// another type is refused, so a subject is never hashed without its issuer.
    #[test]
    fn iss_must_be_one_configured_string() {
        let jwt = verifier("jwks_file = \"jwks.json\"\nissuer = [\"https://a/\", \"https://b/\"]")
            .expect("verifier");
        let with_iss = |iss: Option<Value>| {
            let mut claims = serde_json::json!({"sub": "alice"});
            if let Some(iss) = iss {
                claims["iss"] = iss;
            }
            jwt.claims(claims.as_object().expect("object"))
                .map(|c| c.subject.issuer().to_owned())
        };
        use serde_json::json;
        assert_eq!(with_iss(Some(json!("https://b/"))), Ok("https://b/".into()));
        for (iss, refusal) in [
            (Some(json!("https://evil/")), TokenError::Issuer),
            (Some(json!("")), TokenError::Issuer),
            (None, TokenError::Issuer),
            (
                Some(json!(["https://a/"])),
                TokenError::Claims("iss".into()),
            ),
            (
                Some(json!(["https://a/", "https://b/"])),
                TokenError::Claims("iss".into()),
            ),
            (Some(json!([])), TokenError::Claims("iss".into())),
            (Some(json!(7)), TokenError::Claims("iss".into())),
            (Some(Value::Null), TokenError::Claims("iss".into())),
        ] {
            assert_eq!(with_iss(iss.clone()), Err(refusal), "{iss:?}");
        }
        for empty in [
            "issuer = \"\"",
            "issuer = [\"https://a/\", \"\"]",
            "issuer = []",
        ] {
            let e = verifier(&format!("jwks_file = \"jwks.json\"\n{empty}")).expect_err(empty);
            assert!(e.contains("issuer"), "{e}");
        }
    }

    #[test]
    fn only_a_jwt_shape_goes_to_token_verification() {
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256"}"#);
        assert!(looks_like_jwt(&format!("{header}.e30.c2ln")));
        assert!(!looks_like_jwt("sk-live.abc.def"));
        assert!(!looks_like_jwt("sk-plain-key"));
        assert!(!looks_like_jwt(&format!("{header}.e30")));
        assert_eq!(known_alg_name("NONE"), "none");
        assert_eq!(known_alg_name("secret-text"), "unknown");
    }
}
