//! Batch jobs, OpenAI's Batch API over the doors: a JSONL file of lines uploaded once, run
//! in the background (durably, resumably, each line through its door as online), read back
//! as an output file and an error file. This layer keeps them (`store`, `progress`), reads
//! input files (`lines`), names things (`ids`) and says when a line may start, behind online
//! requests (`online`); `http/batches/` has the routes and runs
//! the lines through the doors.

pub mod ids;
mod jobs;
pub mod lines;
mod online;
pub mod progress;
pub mod rows;
pub mod store;

pub use jobs::Batches;
pub use online::{Online, OnlineRequest};
