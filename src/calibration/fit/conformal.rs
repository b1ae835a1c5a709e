//! Split-conformal prediction sets and the automation threshold: the lowest top
//! probability whose answers have a binomial error bound.

use statrs::distribution::{Binomial, DiscreteCDF};

use super::row::Row;

/// The split-conformal cutoff: the `⌈(n+1)·coverage⌉`-th smallest score (1-based), or 1.0
/// when that rank exceeds n (including n = 0). Scores are `1 − p[label]`.
pub fn conformal_cutoff(scores: &[f64], coverage: f64) -> f64 {
    let n = scores.len();
    // The small slack keeps (9+1)·0.9 at rank 9 despite binary rounding.
    let rank = (((n + 1) as f64) * coverage - 1e-9).ceil().max(1.0) as usize;
    if rank > n {
        return 1.0;
    }
    let mut sorted = scores.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[rank - 1]
}

/// The nonconformity score of a row: `1 − p[label]` (probabilities normalised).
pub fn score(row: &Row) -> f64 {
    let sum: f64 = row.probs.iter().sum();
    1.0 - row.probs[row.label] / sum
}

/// One cutoff per gold label (Mondrian conformal), each from that label's rows only.
pub fn conformal_cutoffs_per_label(rows: &[Row], options: usize, coverage: f64) -> Vec<f64> {
    (0..options)
        .map(|label| {
            let scores: Vec<f64> = rows
                .iter()
                .filter(|r| r.label == label)
                .map(score)
                .collect();
            conformal_cutoff(&scores, coverage)
        })
        .collect()
}

/// The result of [`automation_threshold`].
#[derive(Debug, Clone, PartialEq)]
pub struct Automation {
    /// Automate answers whose top probability is at least this.
    pub threshold: f64,
    /// The level (1..=20) last accepted.
    pub level: usize,
    /// Answers covered at that level.
    pub answers: usize,
    /// Errors among them.
    pub errors: usize,
}

/// The smallest number of answers that can pass the bound with no error at all:
/// `⌈ln δ / ln(1 − ε)⌉`.
pub fn minimum_answers(epsilon: f64, delta: f64) -> usize {
    (delta.ln() / (1.0 - epsilon).ln() - 1e-9).ceil().max(1.0) as usize
}

/// The automation threshold with an error bound. `answers` are `(top probability,
/// correct)`. Sorted by top probability descending; for levels 1..=20 the top
/// `⌈N·level/20⌉` answers are taken, extended to every answer tied with the last one;
/// levels with fewer than [`minimum_answers`] are skipped; the scan stops at the first level
/// where `P(X ≤ errors)` for `X ~ Binomial(size, ε)` exceeds `δ`. The threshold is the
/// lowest top probability of the last accepted level; `None` when no level is accepted.
pub fn automation_threshold(
    answers: &[(f64, bool)],
    epsilon: f64,
    delta: f64,
) -> Option<Automation> {
    let n = answers.len();
    if n == 0 {
        return None;
    }
    let mut sorted = answers.to_vec();
    sorted.sort_by(|a, b| b.0.total_cmp(&a.0));
    let min = minimum_answers(epsilon, delta);
    let mut best = None;
    for level in 1..=20usize {
        let mut size = (n * level).div_ceil(20);
        let last = sorted[size - 1].0;
        while size < n && sorted[size].0 == last {
            size += 1;
        }
        if size < min {
            continue;
        }
        let errors = sorted[..size].iter().filter(|a| !a.1).count();
        let p = Binomial::new(epsilon, size as u64)
            .map(|b| b.cdf(errors as u64))
            .unwrap_or(1.0);
        if p > delta {
            break;
        }
        best = Some(Automation {
            threshold: last,
            level,
            answers: size,
            errors,
        });
    }
    best
}
