//! The operations routes: liveness and readiness, the Prometheus metrics, the models a
//! caller may name, a key's usage, and the ledger's reads and outcomes.

pub(super) mod health;
pub(super) mod ledger;
pub(super) mod metrics;
pub(super) mod models;
pub(super) mod usage;
