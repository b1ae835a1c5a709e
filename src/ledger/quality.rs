//! How right the answers turned out, per model, from the outcomes people recorded: the
//! count of answered questions with an outcome, their accuracy (the answered option was
//! the outcome) and Brier score (Σ over options of (p − 1\[outcome\])², 0 best, 2 worst),
//! over the newest records with outcomes. Computed in the background, never per request.

use std::collections::BTreeMap;

use super::query::Filter;
use super::store::{Store, StoreError};

/// Newest records with outcomes the figures look back over.
pub const WINDOW_RECORDS: u32 = 10_000;

/// One model's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quality {
    /// Answered questions with a current outcome.
    pub count: u64,
    /// Share whose answer was the outcome.
    pub accuracy: f64,
    /// Mean Brier score.
    pub brier: f64,
}

/// The figures per configured model over the newest [`WINDOW_RECORDS`] records with
/// outcomes.
pub async fn by_model(store: &Store) -> Result<BTreeMap<String, Quality>, StoreError> {
    let filter = Filter {
        has_outcome: Some(true),
        limit: WINDOW_RECORDS,
        ..Filter::default()
    };
    let page = store.decisions(&filter).await?;
    let ids: Vec<&str> = page.iter().map(|d| d.request_id.as_str()).collect();
    let outcomes = store.outcomes(&ids).await?;
    let mut sums: BTreeMap<String, (u64, u64, f64)> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.replaced_at_ms.is_none()) {
        let Some(d) = page.iter().find(|d| d.request_id == o.request_id) else {
            continue;
        };
        let Some(q) = d.questions.iter().find(|q| q.name == o.question) else {
            continue;
        };
        let entry = sums.entry(d.model.clone().unwrap_or_default()).or_default();
        entry.0 += 1;
        entry.1 += u64::from(q.answer == o.outcome);
        entry.2 += brier(&q.probabilities, o.outcome);
    }
    Ok(sums
        .into_iter()
        .map(|(model, (count, right, brier))| {
            let n = count.max(1) as f64;
            (
                model,
                Quality {
                    count,
                    accuracy: right as f64 / n,
                    brier: brier / n,
                },
            )
        })
        .collect())
}

/// `Σ_i (p_i − 1[i = outcome])²`.
fn brier(p: &[f64], outcome: usize) -> f64 {
    p.iter()
        .enumerate()
        .map(|(i, p)| (p - f64::from(u8::from(i == outcome))).powi(2))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brier_is_zero_when_sure_and_right_and_two_when_sure_and_wrong() {
        assert_eq!(brier(&[0.0, 1.0], 1), 0.0);
        assert_eq!(brier(&[0.0, 1.0], 0), 2.0);
        assert!((brier(&[0.5, 0.5], 0) - 0.5).abs() < 1e-12);
    }
}
