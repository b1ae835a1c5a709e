//! Validation: a caller's JSON body becomes a [`ValidRequest`], the only thing the engine
//! runs. Every schema and size rule of the contract is checked here, before any upstream
//! call, and each failure names the field, the limit and the value received.
//!
//! Token limits are counted with [`crate::models::tokens::estimate_tokens`] (see its doc for how
//! it errs) until a model's real tokenizer is configured.
//!
//! One file per rule family; [`validate_with_parts`] runs them in a fixed order, and that
//! order decides which error a body breaking several rules gets:
//!
//! 1. `fields.rs`: the body's shape, `model`, `state`;
//! 2. `questions.rs` (the map and each question's own fields), then `criteria.rs` (each
//!    type's options, labels, descriptions, levels), then the question's token count
//!    (`tokens.rs`), question by question;
//! 3. `fields.rs` again: `temperature`, `calibration`, `layout`, `permutations`;
//! 4. `history.rs`, then `images.rs` (`images`, `assets`, multipart parts);
//! 5. `tokens.rs`: the state and whole-request token limits, counted last because they
//!    need everything above. Counted by the byte estimate (no `--tokenizer`), a request over
//!    a limit is not refused here but marked for the engine to count exactly first
//!    ([`ValidRequest::recount`]).
//!
//! `duplicates.rs` is the one rule run before these, on every door: where a body repeats a
//! key, said without the key (the body parser finds it; see [`duplicate_key`]).
//!
//! Each file ends with its family's unit table (body → code, `loc`, exact message, or a
//! request that must pass); `test_support.rs` holds the models, body builders and runner.

mod criteria;
mod duplicates;
pub use duplicates::duplicate_key;
mod fields;
pub use fields::{ignored_fields, requested_model};
mod history;
mod images;
mod questions;
#[cfg(test)]
mod test_support;
mod tokens;
pub use tokens::{
    check as check_token_counts, check_on_estimate, is_token_limit, piece_texts, Counted,
    PieceTokens, Recount,
};

use std::sync::Arc;

use serde_json::Value;

use super::{Ignored, RenderedQuestion, ValidRequest};

use super::prompt;
use crate::config::Limits;
use crate::error::{ApiError, Code};
use crate::models::{Model, Resolved, Routes};
use crate::question::LoweredQuestion;
use crate::request::images::Parts;

/// Most characters in a choice label.
pub const MAX_LABEL_CHARS: usize = 128;
pub use crate::config::MAX_PERMUTATIONS;

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
    let checked = questions::validate_questions(body.remove("questions"), &model, limits)?;
    let temperature = fields::temperature(body.get("temperature"))?;
    let calibration = fields::calibration(body.get("calibration"), models, temperature)?;
    let layout = fields::layout(body.get("layout"), model.layout)?;
    let permutations = fields::permutations(body.get("permutations"), model.permutations)?;
    let (questions, question_tokens, first_orders) = questions::unzip(checked);
    let history = history::validate_history(body.get("history"), &questions)?;
    let images = images::validate_images(&body, parts, &model, limits)?;
    let rendered = render_orders(&questions, first_orders, permutations, &model)?;
    let mut request = ValidRequest {
        model: model.model,
        state_json,
        questions,
        rendered,
        temperature,
        calibration,
        layout,
        permutations,
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
) -> Result<Vec<RenderedQuestion>, ApiError> {
    questions
        .iter()
        .zip(first_orders)
        .map(|(q, first)| prompt::render_orders(q, first, permutations, &model.table))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::at(Code::InvalidNumber, loc(&["questions"]), e.to_string()))
}

/// An error's `loc` from its path segments (`["questions", "q1", "criteria"]`).
pub fn loc(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

pub use crate::json::type_name;

/// How every rule refuses: the `Err` of `code` at `at` with `msg`, whatever the rule would
/// have returned on success.
pub fn refuse<T>(code: Code, at: Vec<String>, msg: impl Into<String>) -> Result<T, ApiError> {
    Err(ApiError::at(code, at, msg))
}

/// The refusal of a value of the wrong JSON type: `must` says what the rule wants, and the
/// message ends with the type that came instead (`model must be a string, got a number`).
pub fn refuse_type<T>(code: Code, at: Vec<String>, must: &str, got: &Value) -> Result<T, ApiError> {
    refuse(code, at, format!("{must}, got {}", type_name(got)))
}

/// [`refuse_type`] for a top-level `field`: `<field> must be <wants>, got …` at `field`.
fn refuse_field_type<T>(code: Code, field: &str, wants: &str, got: &Value) -> Result<T, ApiError> {
    refuse_type(
        code,
        loc(&[field]),
        &format!("{field} must be {wants}"),
        got,
    )
}

/// An entry of a top-level object (`questions.<id>`, `assets.<key>`): the errors about the
/// entry point at it, and those about one of its fields one level deeper.
#[derive(Debug, Clone, Copy)]
struct Entry<'a> {
    map: &'static str,
    key: &'a str,
}

impl Entry<'_> {
    /// `[map, key]`: the entry as a whole.
    fn whole(self) -> Vec<String> {
        loc(&[self.map, self.key])
    }

    /// `[map, key, field]`: one field of the entry.
    fn field(self, field: &str) -> Vec<String> {
        loc(&[self.map, self.key, field])
    }
}
