//! A request asked in one more option order, rendered as its layout writes every order
//! ([`prompt::render_question`]): what a reader of the model's position preference samples.

use super::{prompt, ValidRequest};

impl ValidRequest {
    /// This request with every question of two or more options that is asked in one order
    /// also asked in the order rotated by `shift`, written in the request's layout. `None`
    /// when the model's token table is not there or a question cannot be written.
    pub fn with_rotation(&self, shift: usize) -> Option<ValidRequest> {
        let table = self.model.table.get()?;
        let mut rotated = self.clone();
        for (q, rendered) in self.questions.iter().zip(rotated.rendered.iter_mut()) {
            if q.options.len() >= 2 && rendered.shifts == [0] {
                let order = prompt::render_question(q, shift, &table, self.layout).ok()?;
                rendered.text.push(order);
                rendered.shifts.push(shift);
            }
        }
        Some(rotated)
    }
}
