//! Every rule family run in the fixed order the folder's doc gives, into a [`ValidRequest`].

use std::sync::Arc;

use serde_json::Value;

use super::refusal::loc;
use super::{fields, history, images, questions, tokens};
use crate::config::{Layout, Limits};
use crate::error::{ApiError, Code};
use crate::models::{Model, Resolved, Routes};
use crate::question::LoweredQuestion;
use crate::request::images::Parts;
use crate::request::{prompt, Ignored, RenderedQuestion, ValidRequest};

/// Checks a JSON body against the contract and the model's capacity.
pub fn validate(body: Value, models: &Routes, limits: &Limits) -> Result<ValidRequest, ApiError> {
    validate_with_parts(body, &Parts::new(), models, limits)
}

/// Checks a body against the contract and the model's capacity; `parts` are the image parts
/// of a multipart body (empty for a JSON body), which `assets` entries claim by name.
pub fn validate_with_parts(
    body: Value,
    parts: &Parts,
    models: &Routes,
    limits: &Limits,
) -> Result<ValidRequest, ApiError> {
    let mut body = fields::body_object(body)?;
    let (ignored_fields, ignored_count) = fields::ignored_fields(&body, fields::TOP_LEVEL_FIELDS);
    let requested = fields::requested_model(body.get("model"), models)?;
    let model = resolve(models.serving(requested))?;
    let state_json = fields::state_json(body.remove("state"))?;
    // The questions are rendered as the layout writes them; a bad `layout` is refused in
    // its own turn below, so the model's layout stands in for it until then.
    let layout_hint = fields::layout(body.get("layout"), model.layout).unwrap_or(model.layout);
    let checked =
        questions::validate_questions(body.remove("questions"), &model, limits, layout_hint)?;
    let temperature = fields::temperature(body.get("temperature"))?;
    let calibration = fields::calibration(body.get("calibration"), models, temperature)?;
    let layout = fields::layout(body.get("layout"), model.layout)?;
    let permutations = fields::permutations(body.get("permutations"), model.permutations)?;
    let prior_correction = fields::prior_correction(body.get("prior_correction"), &model.model)?;
    let (questions, question_tokens, first_orders) = questions::unzip(checked);
    let history = history::validate_history(body.get("history"), &questions)?;
    let images = images::validate_images(&body, parts, &model, limits)?;
    let rendered = render_orders(&questions, first_orders, permutations, &model, layout)?;
    let content = crate::request::head_key::content_digest(&state_json, &images, &history);
    let mut request = ValidRequest {
        content,
        model: model.model,
        state_json,
        questions,
        rendered,
        temperature,
        calibration,
        layout,
        permutations,
        prior_correction,
        history,
        images,
        ignored: Ignored {
            names: ignored_fields,
            count: ignored_count,
        },
        recount: None,
    };
    tokens::check_token_limits(&mut request, &question_tokens, limits)?;
    Ok(request)
}

/// Seconds a caller is told to wait for an automatic token table still being built.
pub const TABLE_PENDING_RETRY_SECS: u64 = 5;

/// The model with the table it serves now, or the 503 of an automatic table whose first
/// build has not finished (its upkeep retries with backoff while the backend is cold).
fn resolve(model: &Arc<Model>) -> Result<Resolved, ApiError> {
    model.resolve().ok_or_else(|| {
        ApiError::new(
            Code::TokenTablePending,
            format!(
                "model {} builds its token table from the backend's tokenizer, which has not \
                 answered yet; retry shortly",
                model.name
            ),
        )
        .retry_after(TABLE_PENDING_RETRY_SECS)
    })
}

/// Every question in each of the `permutations` option orders, rendered once here so that
/// what the token limits count is what the prompt sends. The caller's own order was already
/// rendered (and counted) by the question rules and is reused, not rendered again.
fn render_orders(
    questions: &[LoweredQuestion],
    first_orders: Vec<String>,
    permutations: usize,
    model: &Resolved,
    layout: Layout,
) -> Result<Vec<RenderedQuestion>, ApiError> {
    questions
        .iter()
        .zip(first_orders)
        .map(|(q, first)| prompt::render_orders(q, first, permutations, &model.table, layout))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::at(Code::InvalidNumber, loc(&["questions"]), e.to_string()))
}
