//! A label-free correction of the model's preference for a label position, learned while
//! serving (PriDe, Zheng et al. 2024): per model and question shape, the prior over
//! positions is estimated from questions read in two or more option orders (requests that
//! ask `permutations`, and a configured share of single-read requests asked once more in
//! the order rotated by one), and taken out of single-read answers in log space before the
//! temperature.
//!
//! * [`shape`]: the key (type, option count, layout, the tenant's id; never the caller's
//!   text): each tenant's samples teach and correct that tenant's reads only;
//! * [`stats`]: the estimator's sufficient statistics (least squares on order differences);
//! * [`strength`]: how much of it to take out, fitted on held-out samples, or why none
//!   ([`Declined`]: the single reads are then answered raw);
//! * [`apply`]: the correction of one read;
//! * [`sums`]: a shape's sums as a store keeps them (they merge by adding).
//!
//! The weight served is `strength · shrink`: the fitted strength times how far the estimate
//! stands above its own sampling noise ([`stats::PositionStats::shrink`]), so a new or
//! noisy shape starts at no correction. A labelled profile that covers a question wins.
//! A shape with fewer than [`WARMUP_SAMPLES`] samples has every single-read request that
//! holds it sampled, so the prior is learned in the first few requests, not the first
//! hundred; the share applies after that.

pub mod apply;
mod book;
pub mod shape;
pub mod stats;
pub mod strength;
pub mod sums;

pub use apply::correct;
pub use book::{
    by_frame, Agreement, Correction, PriorBook, PriorSettings, ShapeReport, MAX_SHAPES,
    WARMUP_SAMPLES,
};
pub use shape::PriorShape;
pub use strength::Declined;
pub use sums::ShapeSums;
