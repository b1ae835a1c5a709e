//! `POST /v1/systemone`: TypeSafe's typed-decision request, validated as it comes (its body
//! is the System One body) and answered in its own wire shape.

use axum::response::Response;
use serde_json::Value;

use super::Door;
use crate::config::Limits;
use crate::error::ApiError;
use crate::http::blocking::Weight;
use crate::http::body::RequestBody;
use crate::http::context::RequestContext;
use crate::http::flow::headers::set_ignored_header;
use crate::http::flow::AnsweredCall;
use crate::http::wire;
use crate::models::{Models, Routes};
use crate::request::images::Parts;
use crate::request::{validate_with_parts, ValidRequest};

/// The System One door.
pub(in crate::http) struct SystemOne;

impl Door for SystemOne {
    type Plan = ValidRequest;

    /// Validation is light work (a few ns a byte) unless it counts tokens with a real
    /// tokenizer or decodes images (parts, or the `images` and `assets` fields).
    fn weight(body: &RequestBody, models: &Models) -> Weight {
        let images = !body.parts.is_empty()
            || body.json.get("images").is_some()
            || body.json.get("assets").is_some();
        if images || models.any_counts_exactly() {
            Weight::Heavy
        } else {
            Weight::Light
        }
    }

    /// Validation against the serving model, fallback included.
    fn plan(
        json: Value,
        parts: &Parts,
        routes: &Routes<'_>,
        limits: &Limits,
    ) -> Result<ValidRequest, ApiError> {
        validate_with_parts(json, parts, routes, limits)
    }

    fn requests(request: &ValidRequest) -> &[ValidRequest] {
        std::slice::from_ref(request)
    }

    fn respond(
        request: &ValidRequest,
        answered: &AnsweredCall,
        _context: &RequestContext,
    ) -> Result<Response, ApiError> {
        let answers = &answered.answers[0];
        let mut response =
            wire::json_ok(&wire::SystemOneResponse::new(request.questions(), answers))?;
        set_ignored_header(request.ignored(), response.headers_mut());
        Ok(response)
    }
}
