//! The model registry at run time: each public name (and alias) resolves to one model with
//! its backend, token table, calibration and default layout. Built once at startup.
//! Also what keeps a model servable while it runs: the [`circuit`] breaker in front of its
//! backend, failover to a configured fallback, and the [`tokens`] table with its live check.
//!
//! [`Model`] is one model (`model.rs`), read through a chat dialect or forwarded to a native
//! upstream ([`Serving`], `serving.rs`); [`Models`] the registry (`registry.rs`), built from
//! configuration in `build.rs` (the one place that knows every dialect), its graph of
//! fallbacks and escalations checked in `checks.rs`; [`Routes`] resolves which model serves
//! a request while circuits are open (`routes.rs`); a model with several replicas reads
//! through a [`fleet::Fleet`] (`fleet/`); [`prior_sync`] keeps the models' position priors
//! in a file or a shared Redis.

mod build;
mod checks;
pub mod circuit;
pub mod escalation;
pub mod fleet;
mod model;
pub mod prior_sync;
mod registry;
mod routes;
mod serving;
pub mod tokens;
pub mod upkeep;

pub use build::label_texts;
pub use model::{Model, Resolved, DEFAULT_CHECK_INTERVAL, DEFAULT_CHECK_TIMEOUT};
pub use registry::{Models, DEFAULT_ALIAS};
pub use routes::Routes;
pub use serving::Serving;
