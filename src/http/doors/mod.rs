//! The front doors: each turns its client's body into validated System One requests, hands
//! them to the one flow, and writes the answer (or the refusal) in its client's shape.
//!
//! A door is a [`Door`]: what is its own (its body's rules, its answer's shape, its refusal's
//! shape). [`serve`] is the rest, the same for every door: parse → plan → run → answer, as
//! mini-redis parses a frame, applies the command and writes the reply.

pub(super) mod decisions;
pub(super) mod rerank;
pub(super) mod systemone;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::auth::Caller;
use super::blocking::{self, Weight};
use super::body::{self, RequestBody};
use super::context::RequestContext;
use super::flow::headers::{set_escalation_headers, set_model_header};
use super::flow::{self, Answered};
use super::AppState;
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
        answered: &Answered,
        context: &RequestContext,
    ) -> Result<Response, ApiError>;

    /// Any refusal, the key's included, in the door's client's shape.
    fn refuse(e: ApiError) -> Response {
        e.into_response()
    }
}

/// The handler of door `D`: the caller is authenticated before the body is read, and every
/// refusal goes out in `D`'s shape.
pub(super) async fn serve<D: Door>(
    State(state): State<AppState>,
    context: RequestContext,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let answered = match caller {
        Ok(caller) => answer::<D>(&state, &context, &caller, &headers, body).await,
        Err(e) => Err(e),
    };
    answered.unwrap_or_else(D::refuse)
}

/// Body → the door's plan (on the blocking pool when heavy) → [`flow::run`] → the door's
/// answer, with the model that served and what escalation did.
async fn answer<D: Door>(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = body::read_request(
        headers,
        body,
        state.limits.max_body_bytes,
        &state.body_budget,
    )
    .await?;
    D::admit(&body)?;
    state.models.tables_built().await;
    let weight = D::weight(&body, &state.models);
    let (models, limits) = (state.models.clone(), state.limits.clone());
    // The image parts are dropped with the closure: they live on, re-encoded, in the plan.
    let plan = blocking::run(body.len, weight, move || {
        D::plan(body.json, &body.parts, &models.routes(), &limits)
    })
    .await??;
    // Validated: the body's memory goes back to the budget before the upstream reads.
    drop(body.share);
    let requests = D::requests(&plan);
    let answered = flow::run(state, context, caller, requests)
        .await
        .map_err(|e| D::in_door_terms(e, &plan))?;
    let mut response = D::respond(&plan, &answered, context)?;
    set_model_header(&requests[0].model().name, response.headers_mut());
    set_escalation_headers(&answered, response.headers_mut());
    Ok(response)
}
