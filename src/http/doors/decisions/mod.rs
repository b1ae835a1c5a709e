//! `POST /v1/decisions`: OpenAI's Decisions API, as the `openai` SDK's
//! `client.decisions.create(...)` calls it (3.51.0 on PyPI). A front door, not a second
//! engine: [`translate`] turns the body into the System One body that asks the same, which
//! [`crate::request::validate()`] checks and the same pipeline runs under the same keys,
//! limits, circuit, metrics and logs as `/v1/systemone`; [`answer`] writes the `Decision`.
//! Every refusal, the key's included, goes out in OpenAI's error shape.

mod answer;
mod translate;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use crate::error::{ApiError, Code};
use crate::http::auth::Caller;
use crate::http::blocking::{self, Weight};
use crate::http::flow;
use crate::http::flow::headers::{set_escalation_headers, set_ignored_header, set_model_header};
use crate::http::{body, wire, AppState};
use crate::request::validate;
use crate::request::validate::is_token_limit;
use answer::{error_response, DecisionBody};
use translate::{in_decision_terms, translate};

pub(in crate::http) async fn handle(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let answered = match caller {
        Ok(caller) => answer(&state, &caller, &headers, body).await,
        Err(e) => Err(e),
    };
    answered.unwrap_or_else(|e| error_response(&e))
}

/// Body → translation and validation (before anything is sent) → [`flow::run`] → the
/// `Decision`.
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
    if !body.parts.is_empty() {
        return Err(ApiError::new(
            Code::InvalidMultipart,
            "the Decisions API takes a JSON body; send images as data URLs in input_image parts",
        ));
    }
    state.models.tables_built().await;
    let (models, limits) = (state.models.clone(), state.limits.clone());
    // Its images come as data URLs inside `input`: heavy, as the body is not searched for them.
    let (request, translated) = blocking::run(body.len, Weight::Heavy, move || {
        let (systemone_body, translated) = translate(body.json, &limits)?;
        match validate(systemone_body, &models.routes(), &limits) {
            Ok(request) => Ok((request, translated)),
            Err(e) => Err(in_decision_terms(e, &translated)),
        }
    })
    .await??;
    // Validated: the body's memory goes back to the budget before the upstream reads.
    drop(body.share);
    // A token limit the byte estimate could not settle is checked exactly in the engine:
    // said in this body's terms like validation's refusals.
    let answered = flow::run(state, caller, std::slice::from_ref(&request))
        .await
        .map_err(|e| match is_token_limit(e.code) {
            true => in_decision_terms(e, &translated),
            false => e,
        })?;
    let mut response = wire::json_ok(&DecisionBody {
        model: &request.model().name,
        asked: &translated.asked,
        answers: &answered.outcomes[0].answers,
        usage: answered.usage,
    })?;
    set_ignored_header(&translated.ignored, response.headers_mut());
    set_model_header(&request.model().name, response.headers_mut());
    set_escalation_headers(&answered, response.headers_mut());
    Ok(response)
}
