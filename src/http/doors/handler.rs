//! The one handler every door runs under: parse → plan → run → answer, with what is the
//! door's own asked of its [`Door`].

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use tracing::Instrument;

use super::Door;
use crate::error::{ApiError, Code};
use crate::http::auth::scope::Scope;
use crate::http::auth::Caller;
use crate::http::blocking;
use crate::http::body;
use crate::http::context::RequestContext;
use crate::http::flow;
use crate::http::flow::headers::{set_escalation_headers, set_model_header};
use crate::http::trace;
use crate::http::AppState;

/// The handler of door `D`: the caller is authenticated (and must have the `ask` scope)
/// before the body is read, and every refusal goes out in `D`'s shape.
pub(in crate::http) async fn serve<D: Door>(
    State(state): State<AppState>,
    context: RequestContext,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let answered = match caller.and_then(|c| c.require(Scope::Ask).map(|()| c)) {
        Ok(caller) => answer::<D>(&state, &context, &caller, &headers, body).await,
        Err(e) => Err(e),
    };
    answered.unwrap_or_else(D::refuse)
}

/// Door `D`'s answer to `body` (JSON text) from `caller`, in this process: the same steps
/// and the same bytes as the route's, for a batch line. The caller's `ask` scope is checked
/// and its tier's routes as the route checks them; its requests per minute are not counted (the batch was one
/// request), its questions per minute and per day are, line by line.
pub(in crate::http) async fn serve_in_process<D: Door>(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    body: String,
) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    let allowed = caller
        .require(Scope::Ask)
        .and_then(|()| caller.allow_route(&context.route).map_err(ApiError::from));
    let span = trace::batch_line(&context.route, &context.id.0);
    let answered = match allowed {
        Ok(()) => {
            answer::<D>(state, context, caller, &headers, Body::from(body))
                .instrument(span.clone())
                .await
        }
        Err(e) => Err(e),
    };
    let response = answered.unwrap_or_else(D::refuse);
    let code = response.extensions().get::<Code>().map(|c| c.as_str());
    trace::ended(&span, response.status().as_u16(), code, None);
    response
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
    let validation = trace::validation();
    let body = validation
        .clone()
        .scope(body::read_request(
            headers,
            body,
            state.limits.max_body_bytes,
            &state.body_budget,
        ))
        .await?;
    D::admit(&body)?;
    state.models.tables_built().await;
    let weight = D::weight(&body, &state.models);
    let (models, limits) = (state.models.clone(), state.limits.clone());
    // The image parts are dropped with the closure: they live on, re-encoded, in the plan.
    let plan = validation
        .scope(blocking::run(body.len, weight, move || {
            D::plan(body.json, &body.parts, &models.routes(), &limits)
        }))
        .await??;
    let requests = D::requests(&plan);
    // Validated: the body's memory goes back to the budget before the upstream reads,
    // unless a request is still to be counted by the backend's tokenizer: its texts are
    // copied into that count, so the share covers them until the flow ends.
    let _counting = requests
        .iter()
        .any(|r| r.recount().is_some())
        .then_some(body.share);
    let answered = flow::run(state, context, caller, requests)
        .await
        .map_err(|e| D::in_door_terms(e, &plan))?;
    let mut response = D::respond(&plan, &answered, context)?;
    set_model_header(&requests[0].model().name, response.headers_mut());
    set_escalation_headers(&answered, response.headers_mut());
    Ok(response)
}
