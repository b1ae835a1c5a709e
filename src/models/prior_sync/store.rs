//! The two stores behind one call: add these sums, give back the merged ones.

use std::path::Path;
use std::time::Duration;

use super::file::FileStore;
use super::shared::SharedStore;
use super::{Exchanged, Sums};
use crate::config::ConfigError;
use crate::secret::Secret;

/// Where the position priors outlive the process.
pub enum PriorStore {
    /// `prior.redb` in the state directory.
    File(FileStore),
    /// Redis, shared by replicas.
    Shared(SharedStore),
}

impl std::fmt::Debug for PriorStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The Redis URL may hold a password: only the kind is shown.
        f.write_str(self.kind())
    }
}

impl PriorStore {
    /// The file store under `dir`.
    pub fn file(dir: &Path) -> Self {
        PriorStore::File(FileStore::new(dir))
    }

    /// The Redis store at `url`, its keys under `prefix`.
    pub fn shared(url: &Secret, prefix: &str) -> Result<Self, ConfigError> {
        SharedStore::open(url, prefix).map(PriorStore::Shared)
    }

    /// `file` or `redis`: the metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            PriorStore::File(_) => "file",
            PriorStore::Shared(_) => "redis",
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
                PriorStore::File(f) => f.exchange(model, added).await,
                PriorStore::Shared(s) => s.exchange(model, added).await,
            }
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))?
    }
}
