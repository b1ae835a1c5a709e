//! The engine: runs one [`crate::request::ValidRequest`] to its answers.
//!
//! * [`pipeline`]: fans the reads out under the process-wide in-flight cap, stages the
//!   first question when a prefix is shared, bounds each read and the whole request, and
//!   cancels everything on the first failure;
//! * `native`: forwards a request whole to a model's native System One upstream instead;
//! * [`context_window`]: refuses reads that cannot fit the backend's context window;
//! * [`decode`]: log-probabilities become option mass and calibrated probabilities;
//! * [`position_prior`]: which requests learn from and are corrected by the model's
//!   position prior, and which are asked once more as its sample;
//! * `outcome`: what a run gives, its answers and token accounting or why it failed;
//! * `tenant`: who a request is run for (its cache salt, its position prior);
//! * `spans`: the pipeline's spans in the exported trace (docs/operations/tracing.md).

pub mod context_window;
pub mod decode;
mod native;
mod outcome;
pub mod pipeline;
pub mod position_prior;
mod spans;
mod tenant;

pub use outcome::{Answers, PipelineError, TokenUsage};
pub use pipeline::Pipeline;
pub use tenant::Tenant;
