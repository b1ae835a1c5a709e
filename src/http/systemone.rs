//! `POST /v1/systemone`: TypeSafe's typed-decision request.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::auth::Caller;
use super::blocking::{self, Weight};
use super::body::{self, RequestBody};
use super::{count_rejection, summary, usage, wire, AppState};
use crate::calibration::Decoded;
use crate::engine::Outcome;
use crate::error::ApiError;
use crate::models::Models;
use crate::request::{validate_with_parts, Ignored, ValidRequest};

pub(super) async fn handle(
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

/// Body → validation (against the serving model, fallback included) → [`run_request`]
/// → wire.
async fn answer(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = body::read_request(headers, body, state.limits.max_body_bytes).await?;
    let weight = validation_weight(&body, &state.models);
    let (models, limits) = (state.models.clone(), state.limits.clone());
    // The image parts are dropped with the closure: they live on, re-encoded, in the request.
    let request = blocking::run(body.len, weight, move || {
        validate_with_parts(body.json, &body.parts, &models, &limits)
    })
    .await??;
    let outcome = run_request(state, caller, &request).await?;
    let mut response = wire::json_ok(&wire::SystemOneResponse::new(request.questions(), &outcome))?;
    say_ignored(request.ignored(), response.headers_mut());
    say_model(&request.model().name, response.headers_mut());
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

/// The header that names the configured model that served (its public name; the fallback
/// while the requested model's circuit is open), which a later request may use. The body's
/// `model` is the backend's own id, as the contract says.
pub const MODEL_HEADER: &str = "x-systemone-model";

/// Names the model that served in [`MODEL_HEADER`].
pub(super) fn say_model(name: &str, headers: &mut HeaderMap) {
    if let Ok(value) = HeaderValue::from_str(name) {
        headers.insert(MODEL_HEADER, value);
    }
}

/// What every front door with one validated request does next: record and count it, take
/// the circuit's ticket (an open circuit refuses here, before the key's questions are
/// counted), the key's question limits, then run it and record its answers.
pub(super) async fn run_request(
    state: &AppState,
    caller: &Caller,
    request: &ValidRequest,
) -> Result<Outcome, ApiError> {
    summary::note_model(&request.model().name, request.questions().len());
    state
        .metrics
        .observe_request(request.questions().iter().map(|q| q.options.len()));
    let ticket = request.model().circuit.admit()?;
    let questions = request.questions().len();
    let admission = caller
        .admit_questions(&state.quotas, questions)
        .await
        .inspect_err(|e| count_rejection(state, caller, e))?;
    let outcome = match state.pipeline.run(request, ticket).await {
        Ok(outcome) => outcome,
        Err(e) => {
            let e = ApiError::from(e);
            usage::refund_unsent(state, caller, admission, &e).await;
            return Err(e);
        }
    };
    summary::note_upstream_requests(outcome.usage.upstream_requests);
    usage::record(state, caller, questions, &outcome.usage).await;
    observe_answers(state, &request.model().name, &outcome.answers);
    Ok(outcome)
}

/// The header that names the top-level fields a request held and this service ignored.
pub const IGNORED_FIELDS_HEADER: &str = "x-systemone-ignored-fields";

/// Names the ignored top-level fields in [`IGNORED_FIELDS_HEADER`] (to the caller, who sent
/// them) and counts them in a debug line (the log gets no names: they are the caller's).
pub(super) fn say_ignored(ignored: &Ignored, headers: &mut HeaderMap) {
    if ignored.count == 0 {
        return;
    }
    tracing::debug!(
        ignored_fields = ignored.count,
        "the body has top-level fields this service does not read"
    );
    let listed = ignored.names.join(", ");
    let value = if ignored.names.len() == ignored.count {
        listed
    } else {
        let unlisted = ignored.count - ignored.names.len();
        format!(
            "{listed}{}({unlisted} more)",
            if listed.is_empty() { "" } else { ", " }
        )
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(IGNORED_FIELDS_HEADER, value);
    }
}

/// Records each answer's option mass and the profile that covered it, if any.
pub(super) fn observe_answers(state: &AppState, model: &str, answers: &[Decoded]) {
    for answer in answers {
        let profile = answer.profile.as_ref().map(|p| (&*p.name, p.automate));
        state
            .metrics
            .observe_answer(model, answer.option_mass, profile);
    }
}
