//! What the two stores of state kept across restarts share: the per-key limits and usage
//! (`quota/`: an embedded file or Redis) and the position prior (`models/prior_sync/`: the
//! same two kinds). Each opens its own file or connection; the setup is written once here.
//!
//! * [`redis`]: the client `--redis-url` names (the URL checked, never echoed) and the
//!   connection manager's timeouts.
//! * [`redb`]: a database file under `--state-dir`, its directory created when missing.

pub mod redb;
pub mod redis;
