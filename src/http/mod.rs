//! The HTTP surface, by role:
//! - `doors/`: the front doors (`systemone.rs`, `decisions/`, `rerank.rs`), each only the
//!   translation of its client's body and answer, around one generic handler;
//! - `flow/`: the steps every door shares once its body is validated (`flow::run`: circuit,
//!   quotas, pipeline, refunds, escalation, usage, metrics, the ledger) and the headers it
//!   sets;
//! - `batches/`: batch jobs' routes (`/v1/files`, `/v1/batches`) and their runner, each line
//!   through its door's own handler in this process;
//! - `ops/`: the operations routes (health, metrics, models, usage, the ledger's reads, the
//!   calibration watch's figures and charts);
//! - the plumbing: the router, the request middleware, API keys, body extraction, the body
//!   memory budget, the blocking pool, the summary line, the shared state, the wire types,
//!   the connection edge, the OpenAPI document and the browser pages (`playground/`,
//!   `calibration_page/`).
//!
//! A door only translates: its body → [`crate::request::validate()`] → `flow::run` → its
//! client's shape; every error goes out through [`crate::error::ApiError`].

pub mod auth;
mod batches;
mod blocking;
mod body;
pub mod budget;
mod calibration_page;
mod context;
mod doors;
pub mod edge;
mod flow;
mod ledger_note;
mod middleware;
pub mod openapi;
mod ops;
mod playground;
mod router;
mod routes;
pub mod state;
mod summary;
mod trace;
mod wire;

pub use context::{RequestId, REQUEST_ID, TYPESAFE_REQUEST_ID};
pub use router::router;
pub use state::AppState;
