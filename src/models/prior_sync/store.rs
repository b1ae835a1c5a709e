//! The two stores behind one call: add these sums, give back the merged ones.

use std::path::Path;
use std::time::Duration;

use super::embedded::EmbeddedStore;
use super::redis::RedisStore;
use super::{Exchanged, Sums};
use crate::config::ConfigError;
use crate::secret::Secret;

/// Where the position priors outlive the process.
pub enum PriorStore {
    /// `prior.redb` in the state directory.
    Embedded(EmbeddedStore),
    /// Redis, shared by replicas.
    Redis(RedisStore),
}

impl std::fmt::Debug for PriorStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The Redis URL may hold a password: only the kind is shown.
        f.write_str(self.kind())
    }
}

impl PriorStore {
    /// The file store under `dir`.
    pub fn embedded(dir: &Path) -> Self {
        PriorStore::Embedded(EmbeddedStore::new(dir))
    }

    /// The Redis store at `url`, its keys under `prefix`.
    pub fn redis(url: &Secret, prefix: &str) -> Result<Self, ConfigError> {
        RedisStore::open(url, prefix).map(PriorStore::Redis)
    }

    /// `file` or `redis`: the metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            PriorStore::Embedded(_) => "file",
            PriorStore::Redis(_) => "redis",
        }
    }

    /// Adds `added` to `model`'s sums and returns every shape's merged sums (and what the
    /// store held that could not be read, set aside), within `timeout`. On an error nothing is known to be added (a timed-out Redis write may
    /// still land: its samples then count once more, which a sum of hundreds shrugs off).
    pub async fn exchange(
        &self,
        model: &str,
        added: &Sums,
        timeout: Duration,
    ) -> Result<Exchanged, String> {
        let call = async {
            match self {
                PriorStore::Embedded(f) => f.exchange(model, added).await,
                PriorStore::Redis(s) => s.exchange(model, added).await,
            }
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))?
    }
}
