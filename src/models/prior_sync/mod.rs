//! Keeping each model's position priors ([`crate::calibration::prior`]) beyond one process:
//! every interval (`--prior-sync-ms`, 5 s by default) a background task hands each book's
//! new sums to a store, which adds them to what it holds, and installs the merged sums it
//! gets back. The sums merge by adding, so the order replicas write in does not matter.
//!
//! * [`embedded`]: `prior.redb` under `--state-dir` (one instance): the estimate survives a
//!   restart.
//! * [`redis`](mod@redis): the Redis of `--redis-url` (replicas): every replica adds its
//!   deltas to one hash per (model, shape) with `HINCRBYFLOAT` and reads the merged sums
//!   back, so they share one prior, and it survives their restarts as Redis keeps its data.
//!
//! Keys hold the model's configured name and the shape label (type/options/layout), never
//! anything a caller sent. Without either store the priors live in memory only.

mod embedded;
mod exchanged;
mod redis;
mod store;
mod task;

pub use embedded::FILE_NAME;
pub use exchanged::{Exchanged, SetAside, IMPLAUSIBLE, NOT_A_NUMBER, UNREADABLE};
pub use store::PriorStore;
pub use task::{PriorStatus, PriorSync};

use crate::calibration::prior::{PriorShape, ShapeSums};

/// Sums by shape, as the stores trade them.
pub type Sums = Vec<(PriorShape, ShapeSums)>;
