//! The ledger as a source of labelled rows for calibration: every answered question that
//! has a current outcome becomes one row of what `systemone calibrate` reads — the raw
//! (T = 1) probabilities and the gold option index.
//!
//! The record keeps the calibrated probabilities and the temperature applied; tempering is
//! `softmax(ln p / T)`, so `softmax(ln p_calibrated · T)` gives the raw ones back (to
//! rounding). An answer a calibration profile covered is left out: its per-option bias
//! cannot be undone from the record; so is one the position prior corrected (its
//! `prior_correction` weight is recorded, the prior by position is not, and a profile is
//! applied to uncorrected reads, so fitting one on corrected rows would fit the wrong
//! thing). `eval --from-ledger` takes the probabilities as they
//! were answered instead (profiles included): it scores what callers got.

use std::collections::HashMap;

use super::query::Filter;
use super::record::Decision;
use super::store::{Store, StoreError};
use crate::calibration::temperature::temper;

/// Records read per page.
const PAGE: u32 = 1000;

/// One labelled row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LabelledRow {
    /// `<type>-<question name hash>`: one question of one caller's workflow.
    pub question_group: String,
    /// Raw probabilities in option order.
    pub probabilities: Vec<f64>,
    /// The gold option index (the current outcome).
    pub label: usize,
    #[serde(rename = "type")]
    pub kind: String,
}

/// Which probabilities a row carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probabilities {
    /// Raw (T = 1), recovered from the record: what `calibrate` fits.
    Raw,
    /// As answered (calibrated): what `eval --from-ledger` scores.
    Answered,
}

/// Every labelled row of the records `filter` selects (its `has_outcome`, `after` and
/// `limit` are set here), oldest record last, as the list reads them.
pub async fn labelled(
    store: &Store,
    filter: &Filter,
    probabilities: Probabilities,
) -> Result<Vec<LabelledRow>, StoreError> {
    let mut filter = Filter {
        has_outcome: Some(true),
        limit: PAGE,
        after: None,
        ..filter.clone()
    };
    let mut rows = Vec::new();
    loop {
        let page = store.decisions(&filter).await?;
        let ids: Vec<&str> = page.iter().map(|d| d.request_id.as_str()).collect();
        let current: HashMap<(String, String), usize> = store
            .outcomes(&ids)
            .await?
            .into_iter()
            .filter(|o| o.replaced_at_ms.is_none())
            .map(|o| ((o.request_id, o.question), o.outcome))
            .collect();
        for decision in &page {
            rows.extend(rows_of(decision, &current, probabilities));
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => {
                filter.after = Some((last.at_ms, last.request_id.clone()));
            }
            _ => return Ok(rows),
        }
    }
}

fn rows_of<'a>(
    d: &'a Decision,
    current: &'a HashMap<(String, String), usize>,
    probabilities: Probabilities,
) -> impl Iterator<Item = LabelledRow> + 'a {
    d.questions.iter().filter_map(move |q| {
        let label = *current.get(&(d.request_id.clone(), q.name.clone()))?;
        let raw = probabilities == Probabilities::Raw;
        let adjusted = q.profile.is_some() || q.prior_correction.is_some();
        if (raw && adjusted) || q.options < 2 {
            return None;
        }
        Some(LabelledRow {
            question_group: format!("{}-{}", q.kind, q.name),
            probabilities: match probabilities {
                Probabilities::Raw => temper(&q.probabilities, 1.0 / q.temperature),
                Probabilities::Answered => q.probabilities.clone(),
            },
            label,
            kind: q.kind.clone(),
        })
    })
}
