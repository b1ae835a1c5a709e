//! Keeping each model's position priors ([`crate::calibration::prior`]) beyond one process:
//! every interval (`--prior-sync-ms`, 5 s by default) a background task hands each book's
//! new sums to a store, which adds them to what it holds, and installs the merged sums it
//! gets back. The sums merge by adding, so the order replicas write in does not matter.
//!
//! * [`file`](mod@file): `prior.redb` under `--state-dir` (one instance): the estimate survives a
//!   restart.
//! * [`shared`]: the Redis of `--redis-url` (replicas): every replica adds its deltas to
//!   one hash per (model, shape) with `HINCRBYFLOAT` and reads the merged sums back, so
//!   they share one prior, and it survives their restarts as Redis keeps its data.
//!
//! Keys hold the model's configured name and the shape label (type/options/layout), never
//! anything a caller sent. Without either store the priors live in memory only.

mod file;
mod shared;
mod store;
mod task;

pub use file::FILE_NAME;
pub use store::PriorStore;
pub use task::{PriorStatus, PriorSync};

use crate::calibration::prior::{PriorShape, ShapeSums};

/// Sums by shape, as the stores trade them.
pub type Sums = Vec<(PriorShape, ShapeSums)>;

/// What one exchange gives back: the merged sums, and what the store held that could not
/// be served (set aside, so the shape learns afresh from every replica's next sums).
#[derive(Debug, Default, PartialEq)]
pub struct Exchanged {
    /// Every readable shape's merged sums.
    pub sums: Sums,
    /// What was set aside, and why.
    pub set_aside: Vec<SetAside>,
}

/// [`SetAside::reason`]: a field that is not a finite number.
pub const NOT_A_NUMBER: &str = "not_a_number";
/// [`SetAside::reason`]: sums no samples could make.
pub const IMPLAUSIBLE: &str = "implausible";
/// [`SetAside::reason`]: a store file that cannot be opened or read.
pub const UNREADABLE: &str = "unreadable";

/// Something the store held that could not be read, moved out of the way.
#[derive(Debug, Clone, PartialEq)]
pub struct SetAside {
    /// `not_a_number` (a field that is not a finite number), `implausible` (sums no
    /// samples could make) or `unreadable` (the whole file).
    pub reason: &'static str,
    /// The shape's label, or the file's name, and where it went.
    pub what: String,
}
