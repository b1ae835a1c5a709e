//! `POST /v1/decisions`: OpenAI's Decisions API, as the `openai` SDK's
//! `client.decisions.create(...)` calls it (3.51.0 on PyPI). A front door, not a second
//! engine: [`translate()`] turns the body into the System One body that asks the same, which
//! [`crate::request::validate()`] checks and the same pipeline runs under the same keys,
//! limits, circuit, metrics and logs as `/v1/systemone`; [`answer`] writes the `Decision`.
//! Every refusal, the key's included, goes out in OpenAI's error shape.

mod answer;
mod plan;
mod translate;

use axum::response::Response;
use serde_json::Value;

use super::Door;
use crate::config::Limits;
use crate::error::{ApiError, Code};
use crate::http::blocking::Weight;
use crate::http::body::RequestBody;
use crate::http::context::RequestContext;
use crate::http::flow::headers::set_ignored_header;
use crate::http::flow::AnsweredCall;
use crate::http::wire;
use crate::models::{Models, Routes};
use crate::request::images::Parts;
use crate::request::validate;
use crate::request::validate::is_token_limit;
use crate::request::ValidRequest;
use answer::{error_response, DecisionBody};
pub(in crate::http) use plan::Plan;
use translate::{in_decision_terms, translate};

/// The Decisions API door.
pub(in crate::http) struct Decisions;

impl Door for Decisions {
    type Plan = Plan;

    fn admit(body: &RequestBody) -> Result<(), ApiError> {
        if body.parts.is_empty() {
            return Ok(());
        }
        Err(ApiError::new(
            Code::InvalidMultipart,
            "the Decisions API takes a JSON body; send images as data URLs in input_image parts",
        ))
    }

    /// Its images come as data URLs inside `input`: heavy, as the body is not searched for
    /// them.
    fn weight(_body: &RequestBody, _models: &Models) -> Weight {
        Weight::Heavy
    }

    /// Translation, then validation, whose refusals are said in the Decisions body's terms.
    fn plan(
        json: Value,
        _parts: &Parts,
        routes: &Routes<'_>,
        limits: &Limits,
    ) -> Result<Plan, ApiError> {
        let (systemone_body, translated) = translate(json, limits)?;
        match validate(systemone_body, routes, limits) {
            Ok(request) => Ok(Plan {
                request,
                translated,
            }),
            Err(e) => Err(in_decision_terms(e, &translated)),
        }
    }

    fn requests(plan: &Plan) -> &[ValidRequest] {
        std::slice::from_ref(&plan.request)
    }

    /// A token limit the byte estimate could not settle is checked exactly in the engine:
    /// said in this body's terms like validation's refusals.
    fn in_door_terms(e: ApiError, plan: &Plan) -> ApiError {
        match is_token_limit(e.code) {
            true => in_decision_terms(e, &plan.translated),
            false => e,
        }
    }

    fn respond(
        plan: &Plan,
        answered: &AnsweredCall,
        _context: &RequestContext,
    ) -> Result<Response, ApiError> {
        let mut response = wire::json_ok(&DecisionBody {
            model: &plan.request.model().name,
            asked: &plan.translated.asked,
            answers: &answered.answers[0].answers,
            usage: answered.usage,
        })?;
        set_ignored_header(&plan.translated.ignored, response.headers_mut());
        Ok(response)
    }

    fn refuse(e: ApiError) -> Response {
        error_response(&e)
    }
}
