//! The engine: runs one [`crate::request::ValidRequest`] to its answers.
//!
//! * [`pipeline`]: runs a request's steps top-down (`pipeline/mod.rs`): the replica
//!   (`replicas.rs`), the reads fanned out under the process-wide in-flight cap, the first
//!   question staged when a prefix is shared, each read and the whole request bounded,
//!   everything cancelled on the first failure (`reads.rs`), the replies merged
//!   (`merge.rs`) and decoded (`decoding.rs`);
//! * `native`: forwards a request whole to a model's native System One upstream instead;
//! * [`context_window`]: refuses reads that cannot fit the backend's context window;
//! * [`decode`]: log-probabilities become option mass and calibrated probabilities;
//! * [`position_prior`]: which requests learn from and are corrected by the model's
//!   position prior, which are asked once more as its sample, and the correction itself;
//! * `answers`: what a run gives, its answers and token accounting or why it failed;
//! * `tenant`: who a request is run for (its cache salt, its position prior);
//! * `spans`: the pipeline's spans in the exported trace (docs/operations/tracing.md).

mod answers;
pub mod context_window;
pub mod decode;
mod native;
pub mod pipeline;
pub mod position_prior;
mod spans;
mod tenant;

pub use answers::{Answers, PipelineError, TokenUsage};
pub use pipeline::Pipeline;
pub use tenant::Tenant;
