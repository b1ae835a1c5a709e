//! `POST /v1/systemone`: TypeSafe's typed-decision request.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::http::auth::Caller;
use crate::http::blocking::{self, Weight};
use crate::http::body::{self, RequestBody};
use crate::http::flow;
use crate::http::flow::headers::{set_escalation_headers, set_ignored_header, set_model_header};
use crate::http::{wire, AppState};
use crate::models::Models;
use crate::request::validate_with_parts;

pub(in crate::http) async fn handle(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match answer(&state, &caller, &headers, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

/// Body → validation (against the serving model, fallback included) → [`flow::run`]
/// → wire.
async fn answer(
    state: &AppState,
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
    state.models.tables_built().await;
    let weight = validation_weight(&body, &state.models);
    let (models, limits) = (state.models.clone(), state.limits.clone());
    // The image parts are dropped with the closure: they live on, re-encoded, in the request.
    let request = blocking::run(body.len, weight, move || {
        validate_with_parts(body.json, &body.parts, &models.routes(), &limits)
    })
    .await??;
    // Validated: the body's memory goes back to the budget before the upstream reads.
    drop(body.share);
    let answered = flow::run(state, caller, std::slice::from_ref(&request)).await?;
    let outcome = &answered.outcomes[0];
    let mut response = wire::json_ok(&wire::SystemOneResponse::new(request.questions(), outcome))?;
    set_ignored_header(request.ignored(), response.headers_mut());
    set_model_header(&request.model().name, response.headers_mut());
    set_escalation_headers(&answered, response.headers_mut());
    Ok(response)
}

/// Validation is light work (a few ns a byte) unless it counts tokens with a real
/// tokenizer or decodes images (parts, or the `images` and `assets` fields).
fn validation_weight(body: &RequestBody, models: &Models) -> Weight {
    let images = !body.parts.is_empty()
        || body.json.get("images").is_some()
        || body.json.get("assets").is_some();
    if images || models.any_counts_exactly() {
        Weight::Heavy
    } else {
        Weight::Light
    }
}
