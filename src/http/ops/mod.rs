//! The operations routes: liveness and readiness, the Prometheus metrics, the models a
//! caller may name, a key's usage, the ledger's reads and outcomes, and the calibration
//! watch's figures.

pub(super) mod calibration;
pub(super) mod health;
pub(super) mod ledger;
pub(super) mod metrics;
pub(super) mod models;
pub(super) mod usage;
