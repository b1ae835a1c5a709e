//! The front doors: each turns its client's body into validated System One requests, hands
//! them to the one flow, and writes the answer (or the refusal) in its client's shape.
//!
//! A door is a [`Door`]: what is its own (its body's rules, its answer's shape, its refusal's
//! shape). [`serve`] is the rest, the same for every door: parse → plan → run → answer, as
//! mini-redis parses a frame, applies the command and writes the reply.

pub(super) mod decisions;
mod handler;
pub(super) mod rerank;
pub(super) mod systemone;

pub(super) use handler::{serve, serve_in_process};

use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::blocking::Weight;
use super::body::RequestBody;
use super::context::RequestContext;
use super::flow::AnsweredCall;
use crate::config::Limits;
use crate::error::ApiError;
use crate::models::{Models, Routes};
use crate::request::images::Parts;
use crate::request::ValidRequest;

/// What a front door owns; [`serve`] runs the rest.
pub(super) trait Door {
    /// A body that passed every rule of the door and of validation, ready to run.
    type Plan: Send + Sync + 'static;

    /// Refuses a body the door does not take at all, before anything waits or is planned.
    fn admit(_body: &RequestBody) -> Result<(), ApiError> {
        Ok(())
    }

    /// How heavy planning `body` is, for the blocking pool.
    fn weight(body: &RequestBody, models: &Models) -> Weight;

    /// The pure part: the body's own rules, its translation and its validation, all before
    /// anything is sent.
    fn plan(
        json: Value,
        parts: &Parts,
        routes: &Routes<'_>,
        limits: &Limits,
    ) -> Result<Self::Plan, ApiError>;

    /// The validated requests the flow runs (at least one).
    fn requests(plan: &Self::Plan) -> &[ValidRequest];

    /// A refusal of the flow, said in the door's body's terms (as its planning's are).
    fn in_door_terms(e: ApiError, _plan: &Self::Plan) -> ApiError {
        e
    }

    /// The answer in the door's client's shape, with the door's own headers.
    fn respond(
        plan: &Self::Plan,
        answered: &AnsweredCall,
        context: &RequestContext,
    ) -> Result<Response, ApiError>;

    /// Any refusal, the key's included, in the door's client's shape.
    fn refuse(e: ApiError) -> Response {
        e.into_response()
    }
}
