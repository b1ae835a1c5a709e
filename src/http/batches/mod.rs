//! Batch jobs' routes (`/v1/files`, `/v1/batches`, in OpenAI's shapes) and the runner that
//! sends each line through its door in this process. What is kept, and how, is
//! [`crate::batch`]'s.

mod access;
mod charge;
pub(super) mod files;
pub(super) mod jobs;
mod line;
mod runner;

pub(super) use runner::resume;
