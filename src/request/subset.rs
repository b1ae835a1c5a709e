//! Some questions of a validated request, asked of another model: what escalation when
//! unsure sends. The questions keep everything the caller set (state, temperature,
//! profile, layout, permutations, the history of each, images); they are rendered again
//! for the other model's labels, and refused when a question has more options than that
//! model can label. The token limits are not counted again: the questions passed them.

use std::sync::Arc;

use super::{prompt, History, Ignored, ValidRequest};
use crate::error::{ApiError, Code};
use crate::models::Model;

impl ValidRequest {
    /// The questions at `indexes` (in that order) of this request, for `model`.
    pub fn subset_for(
        &self,
        indexes: &[usize],
        model: &Arc<Model>,
    ) -> Result<ValidRequest, ApiError> {
        let resolved = model.resolve().ok_or_else(|| {
            ApiError::new(
                Code::TokenTablePending,
                format!("model {} has no token table yet", model.name),
            )
        })?;
        let table = &resolved.table;
        let questions: Vec<_> = indexes.iter().map(|q| self.questions[*q].clone()).collect();
        if let Some(q) = questions
            .iter()
            .find(|q| q.options.len() > table.option_capacity())
        {
            return Err(ApiError::new(
                Code::TooManyOptions,
                format!(
                    "a question of {} options is more than model {} can label ({})",
                    q.options.len(),
                    model.name,
                    table.option_capacity()
                ),
            ));
        }
        let not_finite =
            |e: crate::json::NonFiniteNumber| ApiError::new(Code::InvalidNumber, e.to_string());
        let rendered = questions
            .iter()
            .map(|q| {
                let first = prompt::question_json(q, 0, table).map_err(not_finite)?;
                prompt::render_orders(q, first, self.permutations, table).map_err(not_finite)
            })
            .collect::<Result<_, _>>()?;
        let history = match &self.history {
            History::PerQuestion(entries) => History::PerQuestion(
                indexes
                    .iter()
                    .map(|q| entries.get(*q).cloned().flatten())
                    .collect(),
            ),
            other => other.clone(),
        };
        Ok(ValidRequest {
            model: model.clone(),
            state_json: self.state_json.clone(),
            questions,
            rendered,
            temperature: self.temperature,
            calibration: self.calibration.clone(),
            layout: self.layout,
            permutations: self.permutations,
            history,
            images: self.images.clone(),
            ignored: Ignored::default(),
        })
    }
}
