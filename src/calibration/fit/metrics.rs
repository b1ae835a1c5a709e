//! The metrics that judge a calibration: accuracy, normalised accuracy, macro F1, Brier,
//! ECE (equal-size and equal-width bins), reliability bins and excess ECE.

use super::rng::SplitMix64;
use super::row::Row;
use crate::calibration::argmax;

/// Draws behind the expected ECE of a perfectly calibrated model.
pub const EXCESS_ECE_DRAWS: usize = 200;

/// ECE over equal-size bins: rows sorted by confidence (ascending, stable), split into
/// `bins` groups sized like numpy's `array_split` (the first `N mod bins` groups one larger);
/// `Σ |g|/N · |mean confidence − accuracy|` over non-empty groups.
pub fn ece_equal_size(confidence: &[f64], correct: &[bool], bins: usize) -> f64 {
    let n = confidence.len();
    if n == 0 || bins == 0 {
        return 0.0;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| confidence[*a].total_cmp(&confidence[*b]));
    let (base, extra) = (n / bins, n % bins);
    let mut start = 0;
    let mut ece = 0.0;
    for g in 0..bins {
        let len = base + usize::from(g < extra);
        if len == 0 {
            continue;
        }
        let idx = &order[start..start + len];
        let conf = idx.iter().map(|i| confidence[*i]).sum::<f64>() / len as f64;
        let acc = idx.iter().filter(|i| correct[**i]).count() as f64 / len as f64;
        ece += len as f64 / n as f64 * (conf - acc).abs();
        start += len;
    }
    ece
}

/// One equal-width reliability bin.
#[derive(Debug, Clone, PartialEq)]
pub struct Bin {
    /// Lower edge (exclusive, except 0 for the first bin).
    pub lo: f64,
    /// Upper edge (inclusive).
    pub hi: f64,
    /// Rows in the bin.
    pub count: usize,
    /// Mean confidence (0 when empty).
    pub confidence: f64,
    /// Share correct (0 when empty).
    pub accuracy: f64,
}

/// Equal-width bins over [0, 1]: bin `i` holds confidences in `(i/bins, (i+1)/bins]`, with 0
/// in the first bin.
pub fn reliability_bins(confidence: &[f64], correct: &[bool], bins: usize) -> Vec<Bin> {
    let mut out: Vec<Bin> = (0..bins)
        .map(|i| Bin {
            lo: i as f64 / bins as f64,
            hi: (i + 1) as f64 / bins as f64,
            count: 0,
            confidence: 0.0,
            accuracy: 0.0,
        })
        .collect();
    for (c, ok) in confidence.iter().zip(correct) {
        let i = ((c * bins as f64).ceil() as usize).clamp(1, bins) - 1;
        out[i].count += 1;
        out[i].confidence += c;
        out[i].accuracy += f64::from(u8::from(*ok));
    }
    for b in out.iter_mut().filter(|b| b.count > 0) {
        b.confidence /= b.count as f64;
        b.accuracy /= b.count as f64;
    }
    out
}

/// ECE over equal-width bins (see [`reliability_bins`]).
pub fn ece_equal_width(confidence: &[f64], correct: &[bool], bins: usize) -> f64 {
    let n = confidence.len();
    if n == 0 {
        return 0.0;
    }
    reliability_bins(confidence, correct, bins)
        .iter()
        .map(|b| b.count as f64 / n as f64 * (b.confidence - b.accuracy).abs())
        .sum()
}

/// The metrics of one question family.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Metrics {
    /// Answers scored.
    pub n: usize,
    /// Share whose argmax is the gold label.
    pub accuracy: f64,
    /// Share of the most frequent gold label.
    pub majority_share: f64,
    /// `(accuracy − majority share)/(1 − majority share)`; `None` when every label is the
    /// same.
    pub normalised_accuracy: Option<f64>,
    /// Unweighted mean F1 over the labels that occur as gold or prediction.
    pub macro_f1: f64,
    /// Mean over rows of `Σ_j (p_j − [j = label])²`.
    pub brier: f64,
    /// ECE, 15 equal-size bins.
    pub ece_equal_size_15: f64,
    /// ECE, 10 equal-width bins.
    pub ece_equal_width_10: f64,
    /// Mean 15-bin equal-size ECE of [`EXCESS_ECE_DRAWS`] label draws from the model's own
    /// probabilities: what a perfectly calibrated model would show on this many rows.
    pub expected_ece: f64,
    /// `ece_equal_size_15 − expected_ece`.
    pub excess_ece: f64,
    /// Mean top probability.
    pub mean_confidence: f64,
}

/// Computes [`Metrics`] on rows (probabilities normalised per row); `seed` drives the
/// excess-ECE draws ([`SplitMix64`]).
pub fn metrics(rows: &[Row], seed: u64) -> Metrics {
    let n = rows.len();
    let k = rows.iter().map(|r| r.probs.len()).max().unwrap_or(0);
    let norm: Vec<Vec<f64>> = rows
        .iter()
        .map(|r| {
            let s: f64 = r.probs.iter().sum();
            r.probs.iter().map(|p| p / s).collect()
        })
        .collect();
    let pred: Vec<usize> = norm.iter().map(|p| argmax(p)).collect();
    let conf: Vec<f64> = norm.iter().zip(&pred).map(|(p, i)| p[*i]).collect();
    let correct: Vec<bool> = rows.iter().zip(&pred).map(|(r, i)| r.label == *i).collect();
    let nf = n.max(1) as f64;
    let accuracy = correct.iter().filter(|c| **c).count() as f64 / nf;
    let mut gold = vec![0usize; k];
    let mut predicted = vec![0usize; k];
    let mut hits = vec![0usize; k];
    for (r, p) in rows.iter().zip(&pred) {
        gold[r.label] += 1;
        predicted[*p] += 1;
        if r.label == *p {
            hits[*p] += 1;
        }
    }
    let majority_share = gold.iter().copied().max().unwrap_or(0) as f64 / nf;
    let normalised_accuracy =
        (majority_share < 1.0).then(|| (accuracy - majority_share) / (1.0 - majority_share));
    let f1s: Vec<f64> = (0..k)
        .filter(|j| gold[*j] + predicted[*j] > 0)
        .map(|j| 2.0 * hits[j] as f64 / (gold[j] + predicted[j]) as f64)
        .collect();
    let macro_f1 = if f1s.is_empty() {
        0.0
    } else {
        f1s.iter().sum::<f64>() / f1s.len() as f64
    };
    let brier = norm
        .iter()
        .zip(rows)
        .map(|(p, r)| {
            p.iter()
                .enumerate()
                .map(|(j, x)| (x - f64::from(u8::from(j == r.label))).powi(2))
                .sum::<f64>()
        })
        .sum::<f64>()
        / nf;
    let ece15 = ece_equal_size(&conf, &correct, 15);
    let mut rng = SplitMix64::new(seed);
    let mut drawn = vec![false; n];
    let mut expected = 0.0;
    for _ in 0..EXCESS_ECE_DRAWS {
        for (i, p) in norm.iter().enumerate() {
            drawn[i] = rng.categorical(p) == pred[i];
        }
        expected += ece_equal_size(&conf, &drawn, 15);
    }
    let expected_ece = if n == 0 {
        0.0
    } else {
        expected / EXCESS_ECE_DRAWS as f64
    };
    Metrics {
        n,
        accuracy,
        majority_share,
        normalised_accuracy,
        macro_f1,
        brier,
        ece_equal_size_15: ece15,
        ece_equal_width_10: ece_equal_width(&conf, &correct, 10),
        expected_ece,
        excess_ece: ece15 - expected_ece,
        mean_confidence: conf.iter().sum::<f64>() / nf,
    }
}
