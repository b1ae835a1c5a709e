//! A window's figures from its sums and the reference window's: what `/v1/calibration`,
//! the gauges and the page show. A figure with nothing under it is `None` (shown empty,
//! never as 0), and no figure is NaN or infinite.

use serde::Serialize;

use super::point::{BINS, FINE};
use super::sums::{Prior, Sums};

/// A share below this counts as it in the PSI (an empty bin would make it infinite).
const PSI_FLOOR: f64 = 1e-4;
/// Outcomes a reference bin needs before CBPE takes its accuracy for the bin's confidence.
pub const CBPE_MIN_BIN_OUTCOMES: u32 = 20;

/// One reliability bin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    /// Answers with an outcome in the bin.
    pub count: u64,
    /// Their mean top probability (`None`: empty).
    pub confidence: Option<f64>,
    /// Their share answered right (`None`: empty).
    pub accuracy: Option<f64>,
}

/// One option's figures over answers with an outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OptionFigure {
    /// Mean probability given to the option.
    pub predicted: Option<f64>,
    /// Share of outcomes that were the option.
    pub observed: Option<f64>,
}

/// A window's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// Answers in the window.
    pub answers: u64,
    /// Mean of the answers' `confidence` (1 − H/ln n, as the answer says).
    pub mean_confidence: Option<f64>,
    /// Mean top probability (what calibration calls confidence).
    pub mean_top_probability: Option<f64>,
    /// Mean `option_mass`, over the answers that report it.
    pub mean_option_mass: Option<f64>,
    /// Answers per equal-width bin of the top probability.
    pub confidence_histogram: Vec<u64>,
    /// The histogram's population stability index against the reference window's.
    pub psi: Option<f64>,
    /// Expected accuracy (CBPE): each answer's top probability, recalibrated by the
    /// reference window's accuracy in its bin where that bin has outcomes enough.
    pub expected_accuracy: Option<f64>,
    /// The answers' mean probability per option (≤ 8 options).
    pub mean_posterior: Option<Vec<f64>>,
    /// The label prior re-estimated by EM against the reference's mean posterior.
    pub em_prior: Option<Vec<f64>>,
    /// Total variation between `em_prior` and the reference's mean posterior.
    pub em_prior_shift: Option<f64>,
    /// Share of answers whose `confidence` is under the model's escalation threshold.
    pub below_threshold_share: Option<f64>,
    /// Answers with a current outcome.
    pub outcomes: u64,
    pub accuracy: Option<f64>,
    /// ECE over 15 equal-width bins (the offline metrics' `ece_equal_width`, to 1e-9).
    pub ece_equal_width_15: Option<f64>,
    /// ECE over 15 bins of about equal counts, made of whole fine bins (1/60 wide).
    pub ece_equal_mass_15: Option<f64>,
    /// Mean Σᵢ (pᵢ − 1[i = outcome])².
    pub brier: Option<f64>,
    /// Mean −ln p(outcome).
    pub nll: Option<f64>,
    pub reliability: Vec<Bin>,
    /// Per option (≤ 8 options).
    pub per_option: Option<Vec<OptionFigure>>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn ratio(a: f64, n: u64) -> Option<f64> {
    (n > 0).then(|| a / n as f64).and_then(finite)
}

/// The figures of `s`, against `reference` when there is one.
pub(super) fn figures(s: &Sums, reference: Option<&Sums>) -> Figures {
    let histogram = histogram(s);
    let reference = reference.filter(|r| r.answers > 0 && r.options == s.options);
    let mean_posterior = (!s.posterior.is_empty() && s.answers > 0).then(|| {
        s.posterior
            .iter()
            .map(|x| x / s.answers as f64)
            .collect::<Vec<f64>>()
    });
    let reference_prior = reference.and_then(|r| {
        (!r.posterior.is_empty()).then(|| {
            r.posterior
                .iter()
                .map(|x| x / r.answers as f64)
                .collect::<Vec<f64>>()
        })
    });
    let em_prior = em_prior(s, reference_prior.as_deref());
    Figures {
        answers: s.answers,
        mean_confidence: ratio(s.confidence, s.answers),
        mean_top_probability: ratio(s.top, s.answers),
        mean_option_mass: ratio(s.mass, s.mass_answers),
        psi: reference.and_then(|r| psi(&histogram, &self::histogram(r))),
        expected_accuracy: cbpe(s, reference),
        em_prior_shift: em_prior
            .as_deref()
            .zip(reference_prior.as_deref())
            .and_then(|(a, b)| {
                finite(a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / 2.0)
            }),
        em_prior,
        mean_posterior,
        confidence_histogram: histogram,
        below_threshold_share: ratio(s.below as f64, s.threshold_answers),
        outcomes: s.outcomes,
        accuracy: ratio(s.correct as f64, s.outcomes),
        ece_equal_width_15: ece(&equal_width(s), s.outcomes),
        ece_equal_mass_15: ece(&equal_mass(s), s.outcomes),
        brier: ratio(s.brier, s.outcomes),
        nll: ratio(s.nll, s.outcomes),
        reliability: reliability(s),
        per_option: per_option(s),
    }
}

fn histogram(s: &Sums) -> Vec<u64> {
    s.fine_answers
        .chunks(FINE / BINS)
        .map(|c| c.iter().map(|n| u64::from(*n)).sum())
        .collect()
}

/// `Σ (a − r)·ln(a/r)` over the bins' shares.
fn psi(actual: &[u64], reference: &[u64]) -> Option<f64> {
    let (na, nr) = (actual.iter().sum::<u64>(), reference.iter().sum::<u64>());
    if na == 0 || nr == 0 {
        return None;
    }
    let psi = actual
        .iter()
        .zip(reference)
        .map(|(a, r)| {
            let a = (*a as f64 / na as f64).max(PSI_FLOOR);
            let r = (*r as f64 / nr as f64).max(PSI_FLOOR);
            (a - r) * (a / r).ln()
        })
        .sum();
    finite(psi)
}

/// CBPE's expected accuracy: per bin, the answers times the reference's accuracy there
/// (its outcomes enough), else their own mean top probability.
fn cbpe(s: &Sums, reference: Option<&Sums>) -> Option<f64> {
    if s.answers == 0 {
        return None;
    }
    let step = FINE / BINS;
    let mut expected = 0.0;
    for b in 0..BINS {
        let range = b * step..(b + 1) * step;
        let answers: u64 = s.fine_answers[range.clone()]
            .iter()
            .map(|n| u64::from(*n))
            .sum();
        if answers == 0 {
            continue;
        }
        let own: f64 = s.fine_top[range.clone()].iter().sum();
        let calibrated = reference.and_then(|r| {
            let n: u32 = r.fine_outcomes[range.clone()].iter().sum();
            let right: u32 = r.fine_right[range.clone()].iter().sum();
            (n >= CBPE_MIN_BIN_OUTCOMES).then(|| f64::from(right) / f64::from(n))
        });
        expected += calibrated.map_or(own, |acc| acc * answers as f64);
    }
    finite(expected / s.answers as f64)
}

fn em_prior(s: &Sums, reference: Option<&[f64]>) -> Option<Vec<f64>> {
    match &s.prior {
        Prior::Open(cells) => reference.and_then(|r| super::em::prior(cells, r)),
        Prior::Closed(estimate, _) => estimate.clone(),
        Prior::None => None,
    }
}

/// Groups of fine bins as (count, top sum, right).
type Group = (u64, f64, u64);

fn equal_width(s: &Sums) -> Vec<Group> {
    let step = FINE / BINS;
    (0..BINS)
        .map(|b| group(s, b * step..(b + 1) * step))
        .collect()
}

fn group(s: &Sums, range: std::ops::Range<usize>) -> Group {
    (
        s.fine_outcomes[range.clone()]
            .iter()
            .map(|n| u64::from(*n))
            .sum(),
        s.fine_outcome_top[range.clone()].iter().sum(),
        s.fine_right[range].iter().map(|n| u64::from(*n)).sum(),
    )
}

/// Consecutive fine bins grouped so each group ends once the count so far reaches its
/// share `k·N/15`: about equal counts, exact only as far as fine bins allow.
fn equal_mass(s: &Sums) -> Vec<Group> {
    let total = s.outcomes as f64;
    let mut groups = Vec::with_capacity(BINS);
    let (mut start, mut seen) = (0usize, 0u64);
    for f in 0..FINE {
        seen += u64::from(s.fine_outcomes[f]);
        let target = total * (groups.len() + 1) as f64 / BINS as f64;
        if seen as f64 >= target || f == FINE - 1 {
            groups.push(group(s, start..f + 1));
            start = f + 1;
        }
    }
    groups
}

fn ece(groups: &[Group], n: u64) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let n = n as f64;
    let ece = groups
        .iter()
        .filter(|g| g.0 > 0)
        .map(|(count, top, right)| {
            let c = *count as f64;
            c / n * (top / c - *right as f64 / c).abs()
        })
        .sum();
    finite(ece)
}

fn reliability(s: &Sums) -> Vec<Bin> {
    equal_width(s)
        .into_iter()
        .enumerate()
        .map(|(i, (count, top, right))| Bin {
            lo: i as f64 / BINS as f64,
            hi: (i + 1) as f64 / BINS as f64,
            count,
            confidence: ratio(top, count),
            accuracy: ratio(right as f64, count),
        })
        .collect()
}

fn per_option(s: &Sums) -> Option<Vec<OptionFigure>> {
    (!s.option_p.is_empty()).then(|| {
        s.option_p
            .iter()
            .zip(&s.option_hits)
            .map(|(p, hits)| OptionFigure {
                predicted: ratio(*p, s.outcomes),
                observed: ratio(*hits as f64, s.outcomes),
            })
            .collect()
    })
}
