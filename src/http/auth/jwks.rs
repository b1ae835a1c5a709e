//! [`Jwks`]: the signing keys tokens are verified with, from a URL (fetched, cached, fetched
//! again) or a file.
//!
//! * Keys are trusted for `jwks_ttl_secs` (600 s unless set) after the fetch that brought
//!   them. Past half of that a request starts a refresh in the background; a failed refresh
//!   keeps the cached keys working until they expire, and `/readyz` says so (`"tokens"`:
//!   `stale`, then not ready once they expire).
//! * A token whose `kid` is not cached makes one refetch, awaited, at most once every
//!   `jwks_refetch_secs` (5 s unless set) for the whole process, so that a flood of tokens
//!   with made-up key ids cannot make the service hammer the identity provider; a key
//!   rotated in (a new `kid`) is found without a restart.
//! * Only public keys are kept: a set's `oct` (HMAC) keys and keys marked `use: enc` are
//!   skipped, so an HMAC signature can never be checked against a public key's bytes.
//! * One fetch at a time (a single-flight lock); a fetch is bounded in time (5 s) and in
//!   size (1 MiB).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::{JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde::Serialize;
use tokio::time::Instant;

/// Most bytes a JWKS may have.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// Longest a JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the keys come from.
#[derive(Debug, Clone)]
pub(super) enum Source {
    /// `jwks_url`: fetched over HTTP(S).
    Url(String),
    /// `jwks_file`: read from disk (and read again as a URL would be fetched).
    File(PathBuf),
}

/// One usable public key.
pub(super) struct KeyEntry {
    /// The key, ready to verify.
    pub(super) key: DecodingKey,
    /// The algorithm the JWK pins (`alg`), if it names one.
    pub(super) alg: Option<Algorithm>,
}

/// What a lookup found.
pub(super) enum Lookup {
    /// The key for the `kid`.
    Found(Arc<KeyEntry>),
    /// Fresh keys are cached (after at most one refetch) and none has this `kid`.
    Unknown,
    /// No fresh keys: never fetched, or expired and the source cannot be reached.
    Unavailable,
}

/// The cache's state.
#[derive(Default)]
struct Cached {
    /// By `kid` (`""` for a key without one).
    keys: HashMap<String, Arc<KeyEntry>>,
    /// When the keys were fetched; `None`: never.
    fetched: Option<Instant>,
    /// When a fetch was last started.
    attempted: Option<Instant>,
    /// Whether the last fetch failed.
    failed: bool,
}

/// The JWKS cache. Shared (`Arc`) so that a background refresh can hold it.
pub(super) struct Jwks {
    source: Source,
    client: reqwest::Client,
    /// How long fetched keys are trusted.
    ttl: Duration,
    /// Least time between two fetches.
    refetch: Duration,
    cached: RwLock<Cached>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
}

/// `/readyz`'s line about the token keys.
#[derive(Debug, Serialize)]
pub struct JwksStatus {
    /// Whether fresh keys are cached (else tokens are refused with 503).
    pub ready: bool,
    /// How many keys are cached.
    pub keys: usize,
    /// Seconds since the keys were fetched; `null`: never.
    pub age_secs: Option<u64>,
    /// Whether the last fetch failed (the cached keys serve until they expire).
    pub stale: bool,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks")
            .field("source", &self.source)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl Jwks {
    /// An empty cache of `source`'s keys.
    pub(super) fn new(source: Source, ttl: Duration, refetch: Duration) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the JWKS client: {e}"))?;
        Ok(Jwks {
            source,
            client,
            ttl,
            refetch,
            cached: RwLock::default(),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// The key for `kid` (a token without one uses the set's only key).
    pub(super) async fn lookup(self: &Arc<Self>, kid: Option<&str>) -> Lookup {
        let (fresh, found, refresh_due) = self.peek(kid);
        if refresh_due {
            let me = self.clone();
            tokio::spawn(async move { me.refresh().await });
        }
        if let (true, Some(key)) = (fresh, found) {
            return Lookup::Found(key);
        }
        // Not cached, or the cache expired: one fetch, if one may be made now.
        if self.may_fetch() {
            self.refresh().await;
        }
        match self.peek(kid) {
            (true, Some(key), _) => Lookup::Found(key),
            (true, None, _) => Lookup::Unknown,
            (false, _, _) => Lookup::Unavailable,
        }
    }

    /// Whether fresh keys are cached (starting the background refresh when it is due): a
    /// token verified before is taken from the verified-token cache only while they are.
    pub(super) fn fresh(self: &Arc<Self>) -> bool {
        let (fresh, _, due) = self.peek(None);
        if due {
            let me = self.clone();
            tokio::spawn(async move { me.refresh().await });
        }
        fresh
    }

    /// Whether the cache is fresh, the key for `kid`, and whether a background refresh is due.
    fn peek(&self, kid: Option<&str>) -> (bool, Option<Arc<KeyEntry>>, bool) {
        let cached = self.cached.read().unwrap_or_else(|p| p.into_inner());
        let age = cached.fetched.map(|t| t.elapsed());
        let fresh = age.is_some_and(|a| a <= self.ttl);
        let key = match kid {
            Some(kid) => cached.keys.get(kid).cloned(),
            None if cached.keys.len() == 1 => cached.keys.values().next().cloned(),
            None => None,
        };
        let due = fresh
            && age.is_some_and(|a| a > self.ttl / 2)
            && cached.attempted.is_none_or(|t| t.elapsed() >= self.refetch);
        (fresh, key, due)
    }

    /// Whether the last fetch started at least `refetch` ago (or none has).
    fn may_fetch(&self) -> bool {
        let cached = self.cached.read().unwrap_or_else(|p| p.into_inner());
        cached.attempted.is_none_or(|t| t.elapsed() >= self.refetch)
    }

    /// Fetches the keys once (waiting for a fetch under way instead of starting another).
    pub(super) async fn refresh(&self) {
        let started = Instant::now();
        let _one = self.fetching.lock().await;
        {
            let cached = self.cached.read().unwrap_or_else(|p| p.into_inner());
            // Another fetch began while this one waited: its result stands.
            if cached.attempted.is_some_and(|t| t >= started) {
                return;
            }
        }
        self.cached
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .attempted = Some(Instant::now());
        let fetched = self.fetch().await;
        let mut cached = self.cached.write().unwrap_or_else(|p| p.into_inner());
        match fetched {
            Ok(keys) => {
                cached.keys = keys;
                cached.fetched = Some(Instant::now());
                cached.failed = false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "the token keys (JWKS) could not be fetched");
                cached.failed = true;
            }
        }
    }

    /// The source's keys, or why not (a message with no secret: the JWKS is public).
    async fn fetch(&self) -> Result<HashMap<String, Arc<KeyEntry>>, String> {
        let bytes = match &self.source {
            Source::File(path) => tokio::fs::read(path)
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?,
            Source::Url(url) => self.get(url).await?,
        };
        if bytes.len() > MAX_JWKS_BYTES {
            return Err(format!(
                "the JWKS has {} bytes, more than {MAX_JWKS_BYTES}",
                bytes.len()
            ));
        }
        let set: JwkSet = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the JWKS is not a key set: {e}"))?;
        Ok(entries(&set))
    }

    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET the JWKS: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("GET the JWKS answered {}", response.status()));
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("reading the JWKS: {e}"))?;
        Ok(bytes.to_vec())
    }

    /// `/readyz`'s line.
    pub(super) fn status(&self) -> JwksStatus {
        let cached = self.cached.read().unwrap_or_else(|p| p.into_inner());
        let age = cached.fetched.map(|t| t.elapsed());
        JwksStatus {
            ready: age.is_some_and(|a| a <= self.ttl),
            keys: cached.keys.len(),
            age_secs: age.map(|a| a.as_secs()),
            stale: cached.failed,
        }
    }
}

/// The set's usable public keys by `kid`.
fn entries(set: &JwkSet) -> HashMap<String, Arc<KeyEntry>> {
    let mut out = HashMap::new();
    for jwk in &set.keys {
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        if key.family() == AlgorithmFamily::Hmac {
            continue;
        }
        let alg = jwk
            .common
            .key_algorithm
            .and_then(|a| a.to_string().parse::<Algorithm>().ok());
        let kid = jwk.common.key_id.clone().unwrap_or_default();
        out.insert(kid, Arc::new(KeyEntry { key, alg }));
    }
    out
}
