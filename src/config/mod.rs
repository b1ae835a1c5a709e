//! Configuration: one clap struct (every flag has a `SYSTEMONE_*` twin) plus an optional
//! TOML model registry for serving several models.
//!
//! Flags describe one model (the common case). `--config FILE` replaces that one model with
//! the file's `[[model]]` list; process-wide settings (listen address, limits, in-flight
//! cap, timeouts) always come from flags or env. Secrets are held in
//! [`Secret`](crate::secret::Secret), whose `Debug` and `Display` print `[redacted]`.
//!
//! One file per flag group: [`serve`] flattens them into [`ServeConfig`]; [`model`] is one
//! model's flags and registry keys, [`registry`] the file that lists several.

mod admission;
mod batches;
mod dialect;
mod edge;
mod error;
mod ledger;
mod limit_store;
mod limits;
mod model;
mod parse;
mod prompt;
mod registry;
mod serve;
mod trace;
mod upstream;

pub use admission::{AdmissionSettings, CircuitSettings};
pub use batches::BatchSettings;
pub use dialect::{BackendKind, Flavor};
pub use edge::EdgeSettings;
pub use error::ConfigError;
pub use ledger::{
    parse_reference, LedgerInputs, LedgerSettings, LedgerTarget, LEDGER_RETENTION_EVERY,
};
pub use limit_store::{FailurePolicy, LimitStoreSettings};
pub use limits::Limits;
pub use model::{
    EscalateWhen, ModelConfig, OneOrMany, AUTO_TABLE, DEFAULT_MAX_IDS_PER_READ,
    DEFAULT_PRIOR_SAMPLE_SHARE, DEFAULT_REPLICA_LOAD_FACTOR, DEFAULT_RERANK_QUESTION,
    DEFAULT_ROUTING_KEY_HEADERS, DEFAULT_TOKEN_CHECK_INTERVAL_SECS, MAX_PERMUTATIONS,
};
pub use prompt::{LabelScheme, Layout};
pub use registry::{load_registry, RegistryFile};
pub use serve::{LogFormat, ServeConfig};
pub use trace::TraceSettings;
pub use upstream::{UpstreamSettings, DEFAULT_TOKEN_CHECK_TIMEOUT_SECS};

#[cfg(test)]
mod tests;
