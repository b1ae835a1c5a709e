//! Per-key quotas, daily caps and usage records, behind one [`LimitStore`] with three
//! implementations:
//!
//! * [`memory`]: this process's memory (tests, and a service with neither a state
//!   directory nor Redis). Replicas each count on their own; a restart forgets.
//! * [`embedded`]: a `redb` file under `--state-dir` for a single instance: daily counts and
//!   usage survive a restart; per-minute limits stay in memory (a restart forgets at most
//!   a minute of rate).
//! * [`redis`]: one Redis every replica shares (`--redis-url`): per-minute GCRA and the
//!   daily cap are evaluated atomically by one Lua script (`EVALSHA`, one round trip per
//!   check), usage is written in one atomic pipeline per answered request.
//!
//! [`Quotas`] (in `policy.rs`) wraps the store with what a shared store needs: a bounded
//! time per call (default 50 ms) and the failure policy (`fail_open`: count in this process
//! and serve; `fail_closed`: 503 `system_one_limits_unavailable`), metrics and a warning at
//! most once a minute. Keys are known here by their configured name only (never the key,
//! never anything a caller sent).
//!
//! Beside `engine/` in the layers (neither uses the other), below `http/`, which
//! authenticates, maps refusals to the error table and calls [`Quotas`]; it uses only
//! `config/` and the leaves (days are counted by [`crate::days`]).

mod clock;
pub mod embedded;
mod key;
mod key_limits;
mod local;
pub mod memory;
mod policy;
pub mod redis;
mod refusal;
mod store;
mod usage;

pub use clock::{LimitClock, Now};
pub use key::KeyQuota;
pub use key_limits::KeyLimits;
pub use local::LocalLimits;
pub use policy::{Admission, QuotaError, Quotas, StoreStatus, BACKOFF, UNAVAILABLE_RETRY_SECS};
pub use refusal::{LimitKind, Refusal, MAX_RATE_RETRY_SECS};
pub use store::{Checked, LimitStore, StoreError, USAGE_RETENTION_DAYS};
pub use usage::{batch_usage_name, Charge, UsageCounts, UsageRow, BATCH_SUFFIX};
