//! Some questions of a validated request, asked of another model: what escalation when
//! unsure sends. The questions keep everything the caller set (state, temperature,
//! profile, layout, permutations, the history of each, images); they are rendered again
//! for the other model's labels, and refused when a question has more options than that
//! model can label or the request has images it does not read. The token limits are not
//! counted again: the questions passed them.

use std::sync::Arc;

use super::{prompt, History, Ignored, RenderedQuestion, ValidRequest};
use crate::error::{ApiError, Code};
use crate::json::NonFiniteNumber;
use crate::models::tokens::TokenTable;
use crate::models::{Model, Resolved};
use crate::question::LoweredQuestion;

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
        let questions: Vec<_> = indexes.iter().map(|q| self.questions[*q].clone()).collect();
        self.check_fits(&questions, &resolved)?;
        let rendered = render(&questions, self.permutations, &resolved.table, self.layout)?;
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
            prior_correction: self.prior_correction,
            history,
            images: self.images.clone(),
            ignored: Ignored::default(),
            // The limits were settled for the whole request: a subset stays within them.
            recount: self.recount,
            // The head the escalated questions share is the caller's whole request's.
            content: self.content,
        })
    }

    /// Refuses `questions` of this request for `model` when it cannot label one of them or
    /// the request has images it does not read.
    fn check_fits(&self, questions: &[LoweredQuestion], model: &Resolved) -> Result<(), ApiError> {
        if !self.images.is_empty() && !model.vision {
            return Err(ApiError::new(
                Code::ImagesUnsupported,
                format!("model {} does not read images", model.name),
            ));
        }
        let capacity = model.table.option_capacity();
        match questions.iter().find(|q| q.options.len() > capacity) {
            Some(q) => Err(ApiError::new(
                Code::TooManyOptions,
                format!(
                    "a question of {} options is more than model {} can label ({capacity})",
                    q.options.len(),
                    model.name,
                ),
            )),
            None => Ok(()),
        }
    }
}

/// Each question in `permutations` orders, for `table`'s labels.
fn render(
    questions: &[LoweredQuestion],
    permutations: usize,
    table: &TokenTable,
    layout: crate::config::Layout,
) -> Result<Vec<RenderedQuestion>, ApiError> {
    let not_finite = |e: NonFiniteNumber| ApiError::new(Code::InvalidNumber, e.to_string());
    questions
        .iter()
        .map(|q| {
            let first = prompt::render_question(q, 0, table, layout).map_err(not_finite)?;
            prompt::render_orders(q, first, permutations, table, layout).map_err(not_finite)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::systemone::SystemOneBackend;
    use crate::config::Limits;
    use crate::models::tokens::TokenTable;
    use crate::models::Models;
    use serde_json::json;

    fn model(name: &str, table: TokenTable, vision: bool) -> Arc<Model> {
        let backend = SystemOneBackend::unreachable(name);
        Arc::new(Model {
            vision,
            ..Model::new(name, Arc::new(backend), table)
        })
    }

    fn models() -> Models {
        let wide = model("wide", TokenTable::native(255), true);
        let narrow = model("narrow", TokenTable::native(3), false);
        Models::new(vec![wide, narrow], 0).expect("distinct")
    }

    fn request(models: &Models, extra: serde_json::Value) -> ValidRequest {
        let mut body = json!({
            "state": "s",
            "questions": {
                "a": {"type": "choice", "instructions": "A?", "criteria": {"x": null, "y": null, "z": null, "w": null}},
                "b": {"type": "noul", "instructions": "B?"},
                "c": {"type": "score", "instructions": "C?", "criteria": ["lo", "hi"]}
            },
            "history": {"b": "seen before", "c": "and this"},
            "permutations": 2
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        crate::request::validate(body, &models.routes(), &Limits::default()).expect("valid")
    }

    #[test]
    fn the_subset_keeps_the_callers_settings_for_the_questions_it_takes() {
        let models = models();
        let narrow = models.resolve("narrow").expect("configured").clone();
        let whole = request(&models, json!({}));
        let part = whole.subset_for(&[2, 1], &narrow).expect("fits");
        let ids: Vec<&str> = part.questions().iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["c", "b"]);
        assert_eq!(part.model().name, "narrow");
        assert_eq!(part.rendered().len(), 2);
        assert_eq!(
            part.rendered()[0].shifts,
            whole.rendered()[2].shifts,
            "same orders"
        );
        assert_eq!(part.permutations(), 2);
        assert_eq!(
            part.history(),
            &History::PerQuestion(vec![Some("and this".into()), Some("seen before".into())])
        );
        assert_eq!(part.state_json(), whole.state_json());
    }

    #[test]
    fn a_question_the_model_cannot_label_or_an_image_it_cannot_read_is_refused() {
        let models = models();
        let narrow = models.resolve("narrow").expect("configured").clone();
        let whole = request(&models, json!({}));
        let err = whole
            .subset_for(&[0], &narrow)
            .expect_err("4 options on 3 labels");
        assert_eq!(err.code, Code::TooManyOptions);
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
        let with_image = request(&models, json!({"images": [png]}));
        let err = with_image.subset_for(&[1], &narrow).expect_err("text only");
        assert_eq!(err.code, Code::ImagesUnsupported);
    }
}
