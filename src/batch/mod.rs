//! Batch jobs, OpenAI's Batch API over the doors: a JSONL file of lines uploaded once, run
//! in the background (durably, resumably, each line through its door as online), read back
//! as an output file and an error file. This layer keeps them (`store`, `progress`), reads
//! input files (`lines`) and names things (`ids`); `http/batches/` has the routes and runs
//! the lines through the doors.

pub mod ids;
mod jobs;
pub mod lines;
pub mod progress;
pub mod rows;
pub mod store;

pub use jobs::Batches;
