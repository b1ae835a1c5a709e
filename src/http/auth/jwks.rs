//! [`Jwks`]: the signing keys tokens are verified with, from a URL (fetched, cached, fetched
//! again) or a file.
//!
//! * Keys are trusted for `jwks_ttl_secs` (600 s unless set) after the fetch that brought
//!   them. A background task ([`Jwks::start`]) fetches them at start-up and again at half
//!   of that; after a failed fetch it tries again after 1 s, 2 s, 4 s, … (at most
//!   [`MAX_RETRY`], never sooner than `jwks_refetch_secs`) until one succeeds, so keys
//!   that could not be fetched at start-up arrive once the JWKS answers, with no token
//!   needed (a readiness-gated balancer sends none to an unready replica). A failed
//!   refresh keeps the cached keys working until they expire, and `/readyz` says so
//!   (`"tokens"`: `stale`, then not ready once they expire; when they were fetched, how
//!   many fetches failed since, when the next try is).
//! * A token whose `kid` is not cached makes one refetch, awaited, at most once every
//!   `jwks_refetch_secs` (5 s unless set) for the whole process, so that a flood of tokens
//!   with made-up key ids cannot make the service hammer the identity provider; a key
//!   rotated in (a new `kid`) is found without a restart.
//! * Only public keys are kept: a set's `oct` (HMAC) keys and keys marked `use: enc` are
//!   skipped, so an HMAC signature can never be checked against a public key's bytes.
//! * One fetch at a time (a single-flight lock); a fetch is bounded in time (5 s) and in
//!   size (1 MiB): a declared length over it is refused before the body is read, and the
//!   body is read chunk by chunk and dropped as soon as it passes the bound, so an endless
//!   or huge JWKS costs at most 1 MiB and a chunk of memory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use jsonwebtoken::jwk::{JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde::Serialize;
use tokio::time::Instant;

/// Most bytes a JWKS may have.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// Longest a JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The background task's wait after the first failed fetch; it doubles with each failure.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The background task's longest wait between two failed fetches.
pub(super) const MAX_RETRY: Duration = Duration::from_secs(60);

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
    /// When the keys were fetched (monotonic, and on the wall clock); `None`: never.
    fetched: Option<(Instant, SystemTime)>,
    /// When a fetch was last started.
    attempted: Option<Instant>,
    /// Fetches failed since the last that succeeded (0: the last one succeeded).
    failures: u32,
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
    /// Whether the background task runs.
    started: AtomicBool,
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
    /// When the keys were fetched (Unix seconds); `null`: never.
    pub fetched_unix: Option<u64>,
    /// Whether the last fetch failed (the cached keys serve until they expire).
    pub stale: bool,
    /// Fetches failed since the last that succeeded.
    pub failures: u32,
    /// Seconds until the background task fetches again; `null`: it is not running.
    pub next_fetch_secs: Option<u64>,
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
            started: AtomicBool::new(false),
        })
    }

    /// Starts the background task that keeps the keys fetched (once; only in a runtime).
    pub(super) fn start(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.started.swap(true, Ordering::SeqCst) {
            let me = self.clone();
            runtime.spawn(async move { me.keep_fetched().await });
        }
    }

    /// Fetches the keys, then again whenever [`Jwks::next_fetch`] says, for ever.
    async fn keep_fetched(self: Arc<Self>) {
        loop {
            self.refresh().await;
            tokio::time::sleep_until(self.next_fetch()).await;
        }
    }

    /// When the background task fetches next: at half the TTL after keys were fetched, or
    /// after the backoff of a failed fetch; never sooner than `refetch` after the last one.
    fn next_fetch(&self) -> Instant {
        let cached = self.cached.read().unwrap_or_else(|p| p.into_inner());
        let attempted = cached.attempted.unwrap_or_else(Instant::now);
        let due = match (cached.failures, cached.fetched) {
            (0, Some((at, _))) => at + self.ttl / 2,
            (failures, _) => attempted + retry_after(failures),
        };
        due.max(attempted + self.refetch)
    }

    /// The key for `kid` (a token without one uses the set's only key).
    pub(super) async fn lookup(self: &Arc<Self>, kid: Option<&str>) -> Lookup {
        let (fresh, found) = self.peek(kid);
        if let (true, Some(key)) = (fresh, found) {
            return Lookup::Found(key);
        }
        // Not cached, or the cache expired: one fetch, if one may be made now.
        if self.may_fetch() {
            self.refresh().await;
        }
        match self.peek(kid) {
            (true, Some(key)) => Lookup::Found(key),
            (true, None) => Lookup::Unknown,
            (false, _) => Lookup::Unavailable,
        }
    }

    /// Whether fresh keys are cached: a token verified before is taken from the
    /// verified-token cache only while they are.
    pub(super) fn fresh(&self) -> bool {
        self.peek(None).0
    }

    /// Whether the cache is fresh, and the key for `kid`.
    fn peek(&self, kid: Option<&str>) -> (bool, Option<Arc<KeyEntry>>) {
        let cached = self.cached.read().unwrap_or_else(|p| p.into_inner());
        let fresh = cached.fetched.is_some_and(|(t, _)| t.elapsed() <= self.ttl);
        let key = match kid {
            Some(kid) => cached.keys.get(kid).cloned(),
            None if cached.keys.len() == 1 => cached.keys.values().next().cloned(),
            None => None,
        };
        (fresh, key)
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
                cached.fetched = Some((Instant::now(), SystemTime::now()));
                cached.failures = 0;
            }
            Err(e) => {
                cached.failures = cached.failures.saturating_add(1);
                tracing::warn!(error = %e, failures = cached.failures, "the token keys (JWKS) could not be fetched");
            }
        }
    }

    /// The source's keys, or why not (a message with no secret: the JWKS is public).
    async fn fetch(&self) -> Result<HashMap<String, Arc<KeyEntry>>, String> {
        let bytes = match &self.source {
            Source::File(path) => read_file(path).await?,
            Source::Url(url) => self.get(url).await?,
        };
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
        if let Some(length) = response
            .content_length()
            .filter(|n| *n > MAX_JWKS_BYTES as u64)
        {
            return Err(too_large(length));
        }
        let chunks = futures::stream::unfold(response, |mut response| async move {
            match response.chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), response)),
                Ok(None) => None,
                Err(e) => Some((Err(format!("reading the JWKS: {e}")), response)),
            }
        });
        read_capped(std::pin::pin!(chunks), MAX_JWKS_BYTES).await
    }

    /// `/readyz`'s line.
    pub(super) fn status(&self) -> JwksStatus {
        let next_fetch_secs = self.started.load(Ordering::SeqCst).then(|| {
            self.next_fetch()
                .saturating_duration_since(Instant::now())
                .as_secs()
        });
        let cached = self.cached.read().unwrap_or_else(|p| p.into_inner());
        let age = cached.fetched.map(|(t, _)| t.elapsed());
        let fetched_unix = cached.fetched.map(|(_, at)| {
            at.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
        JwksStatus {
            ready: age.is_some_and(|a| a <= self.ttl),
            keys: cached.keys.len(),
            age_secs: age.map(|a| a.as_secs()),
            fetched_unix,
            stale: cached.failures > 0,
            failures: cached.failures,
            next_fetch_secs,
        }
    }
}

/// The background task's wait after `failures` failed fetches in a row: [`FIRST_RETRY`],
/// doubled with each further failure, at most [`MAX_RETRY`].
fn retry_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST_RETRY * 2u32.pow(doublings)).min(MAX_RETRY)
}

fn too_large(bytes: u64) -> String {
    format!("the JWKS has more than {MAX_JWKS_BYTES} bytes ({bytes} or more)")
}

/// A `jwks_file`'s bytes, reading at most one byte past the bound.
async fn read_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_JWKS_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() > MAX_JWKS_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// A body's chunks gathered, refused as soon as they pass `limit` bytes: no chunk is asked
/// for once the bound is passed, so an endless body costs `limit` and one chunk.
async fn read_capped(
    mut chunks: impl Stream<Item = Result<Bytes, String>> + Unpin,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if bytes.len() + chunk.len() > limit {
            return Err(too_large((bytes.len() + chunk.len()) as u64));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// An endless body is read up to the bound and one chunk, and no further.
    #[tokio::test]
    async fn an_endless_body_is_refused_at_the_bound() {
        const CHUNK: usize = 16 * 1024;
        let handed = AtomicUsize::new(0);
        let endless = futures::stream::repeat_with(|| {
            handed.fetch_add(CHUNK, Ordering::SeqCst);
            Ok(Bytes::from(vec![b' '; CHUNK]))
        });
        let e = read_capped(std::pin::pin!(endless), MAX_JWKS_BYTES)
            .await
            .expect_err("refused");
        assert!(e.contains("more than 1048576 bytes"), "{e}");
        let read = handed.load(Ordering::SeqCst);
        assert!(read <= MAX_JWKS_BYTES + CHUNK, "{read} bytes read");

        let small = futures::stream::iter([
            Ok(Bytes::from_static(b"{\"keys\":")),
            Ok(Bytes::from_static(b"[]}")),
        ]);
        assert_eq!(
            read_capped(small, MAX_JWKS_BYTES).await.expect("read"),
            b"{\"keys\":[]}"
        );
    }

    #[tokio::test]
    async fn a_file_past_the_bound_is_refused_without_reading_it_whole() {
        let path = std::env::temp_dir().join(format!(
            "systemone-jwks-{}.json",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&path, vec![b' '; MAX_JWKS_BYTES + 1]).expect("write");
        let e = read_file(&path).await.expect_err("refused");
        std::fs::write(&path, b"{\"keys\":[]}").expect("write");
        let ok = read_file(&path).await;
        let _ = std::fs::remove_file(&path);
        assert!(e.contains("more than"), "{e}");
        assert_eq!(ok.expect("read"), b"{\"keys\":[]}");
    }

    #[test]
    fn failed_fetches_are_retried_with_a_doubling_wait_up_to_a_minute() {
        let waits: Vec<u64> = (1..=9).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_after(u32::MAX), MAX_RETRY);
    }

    /// Keys that could not be fetched at start-up are fetched by the background task once
    /// the source answers (paused time: the retries follow the backoff, no request needed).
    #[tokio::test(start_paused = true)]
    async fn keys_missing_at_start_up_arrive_without_a_request() {
        let path = std::env::temp_dir().join(format!(
            "systemone-jwks-{}.json",
            uuid::Uuid::new_v4().simple()
        ));
        let jwks = Arc::new(
            Jwks::new(
                Source::File(path.clone()),
                Duration::from_secs(600),
                Duration::ZERO,
            )
            .expect("jwks"),
        );
        jwks.start();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let status = jwks.status();
        assert!(!status.ready && status.failures >= 1, "{status:?}");
        assert_eq!(
            status.next_fetch_secs,
            Some(0),
            "retries in 1 s: {status:?}"
        );
        std::fs::write(&path, br#"{"keys":[]}"#).expect("write");
        tokio::time::sleep(Duration::from_secs(4)).await;
        let status = jwks.status();
        let _ = std::fs::remove_file(&path);
        assert!(status.ready && status.failures == 0, "{status:?}");
        assert!(status.fetched_unix.is_some(), "{status:?}");
        let next = status.next_fetch_secs.expect("running");
        assert!(
            (290..=300).contains(&next),
            "refreshed at half the TTL: {status:?}"
        );
    }
}
