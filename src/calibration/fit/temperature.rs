//! Temperature fits: one temperature per question group, the `ln T = a + b·ln n` formula
//! over groups, a temperature plus per-option bias, and out-of-fold rows for honest
//! evaluation.

use super::optimize::{golden_section, lbfgs};
use super::rng::SplitMix64;
use super::row::Row;
use crate::calibration::temperature::{apply, log_sum_exp};

/// Lowest temperature searched.
pub const T_MIN: f64 = 0.05;
/// Highest temperature searched.
pub const T_MAX: f64 = 50.0;
/// Golden-section iterations.
pub const GOLDEN_ITERATIONS: usize = 60;

/// Mean NLL of `softmax(ln p / T)` over rows given as log-probabilities.
fn tempered_nll(logs: &[(Vec<f64>, usize)], t: f64) -> f64 {
    let total: f64 = logs
        .iter()
        .map(|(l, y)| {
            let z: Vec<f64> = l.iter().map(|v| v / t).collect();
            log_sum_exp(&z) - z[*y]
        })
        .sum();
    total / logs.len() as f64
}

/// Mean NLL of the raw rows at temperature `t` (no penalty).
pub fn mean_nll(rows: &[Row], t: f64) -> f64 {
    let logs: Vec<(Vec<f64>, usize)> = rows.iter().map(|r| (r.logs(), r.label)).collect();
    tempered_nll(&logs, t)
}

/// The temperature of one question group: argmin over `ln T ∈ [ln 0.05, ln 50]` of
/// `mean NLL(softmax(ln p / T)) + (5/n)·(ln T)²`, by 60 golden-section iterations.
/// An empty group gets T = 1.
pub fn fit_temperature(rows: &[Row]) -> f64 {
    if rows.is_empty() {
        return 1.0;
    }
    let logs: Vec<(Vec<f64>, usize)> = rows.iter().map(|r| (r.logs(), r.label)).collect();
    let n = rows.len() as f64;
    let objective = |u: f64| tempered_nll(&logs, u.exp()) + 5.0 / n * u * u;
    golden_section(objective, T_MIN.ln(), T_MAX.ln(), GOLDEN_ITERATIONS).exp()
}

/// One group's fitted temperature, the input of [`fit_formula`].
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFit {
    /// Option count of the group's questions.
    pub options: usize,
    /// Rows in the group (the weight).
    pub rows: usize,
    /// The fitted temperature.
    pub temperature: f64,
}

/// `ln T = a + b·ln max(n, 2)` by least squares on `(ln n, ln T)` over groups, each
/// weighted by its row count. When every group has the same option count the slope is not
/// identifiable: `b = 0` and `a` is the weighted mean of `ln T`. Returns `(a, b)`;
/// `(0, 0)` (T = 1) without rows.
pub fn fit_formula(groups: &[GroupFit]) -> (f64, f64) {
    let points: Vec<(f64, f64, f64)> = groups
        .iter()
        .filter(|g| g.rows > 0)
        .map(|g| {
            (
                (g.options.max(2) as f64).ln(),
                g.temperature.ln(),
                g.rows as f64,
            )
        })
        .collect();
    let w: f64 = points.iter().map(|p| p.2).sum();
    if w == 0.0 {
        return (0.0, 0.0);
    }
    let x_bar = points.iter().map(|p| p.2 * p.0).sum::<f64>() / w;
    let y_bar = points.iter().map(|p| p.2 * p.1).sum::<f64>() / w;
    let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - x_bar).powi(2)).sum();
    let sxy: f64 = points
        .iter()
        .map(|p| p.2 * (p.0 - x_bar) * (p.1 - y_bar))
        .sum();
    if sxx <= 1e-12 * w {
        return (y_bar, 0.0);
    }
    let b = sxy / sxx;
    (y_bar - b * x_bar, b)
}

/// A temperature plus a centred bias per option.
#[derive(Debug, Clone, PartialEq)]
pub struct TemperatureBias {
    /// T of `softmax(ln p / T + bias)`.
    pub temperature: f64,
    /// One bias per option, summing to 0.
    pub bias: Vec<f64>,
}

/// Objective and gradient of the temperature + bias fit at `theta = [ln T, b…]`. The bias
/// part of the gradient is projected onto `Σb = 0`.
pub(super) fn bias_objective(logs: &[(Vec<f64>, usize)], theta: &[f64]) -> (f64, Vec<f64>) {
    let n = logs.len() as f64;
    let u = theta[0];
    let inv_t = (-u).exp();
    let b = &theta[1..];
    let k = b.len();
    let mut loss = 0.0;
    let mut grad = vec![0.0; k + 1];
    let mut z = vec![0.0; k];
    for (l, y) in logs {
        for j in 0..k {
            z[j] = l[j] * inv_t + b[j];
        }
        let lse = log_sum_exp(&z);
        loss += lse - z[*y];
        for j in 0..k {
            let r = (z[j] - lse).exp() - if j == *y { 1.0 } else { 0.0 };
            grad[1 + j] += r;
            // dz_j/du = −l_j / T
            grad[0] -= r * l[j] * inv_t;
        }
    }
    loss /= n;
    for g in grad.iter_mut() {
        *g /= n;
    }
    loss += 5.0 / n * u * u + 2.0 / n * b.iter().map(|v| v * v).sum::<f64>();
    grad[0] += 10.0 / n * u;
    for j in 0..k {
        grad[1 + j] += 4.0 / n * b[j];
    }
    let mean = grad[1..].iter().sum::<f64>() / k as f64;
    for g in grad[1..].iter_mut() {
        *g -= mean;
    }
    (loss, grad)
}

/// Fits a temperature and a centred bias per option on rows that all have `k` options
/// (rows of another length are an error). Penalised mean NLL as in the module doc,
/// minimised by [`lbfgs`] from `T = 1, b = 0`; `ln T` is clamped to `[ln 0.05, ln 50]`.
pub fn fit_temperature_bias(rows: &[Row]) -> Result<TemperatureBias, String> {
    let Some(first) = rows.first() else {
        return Err("no rows".into());
    };
    let k = first.probs.len();
    if rows.iter().any(|r| r.probs.len() != k) {
        return Err("rows have different option counts".into());
    }
    let logs: Vec<(Vec<f64>, usize)> = rows.iter().map(|r| (r.logs(), r.label)).collect();
    let theta = lbfgs(|x| bias_objective(&logs, x), vec![0.0; k + 1], 500, 1e-10);
    let u = theta[0].clamp(T_MIN.ln(), T_MAX.ln());
    let mean = theta[1..].iter().sum::<f64>() / k as f64;
    Ok(TemperatureBias {
        temperature: u.exp(),
        bias: theta[1..].iter().map(|b| b - mean).collect(),
    })
}

/// Out-of-fold calibrated rows: the rows are dealt into `folds` folds by a seeded shuffle;
/// each fold's rows are recalibrated by a temperature + bias fitted on the other folds.
/// Returned in input order. Cutoffs and thresholds set on these are not flattered by the
/// fit having seen the rows they are judged on.
pub fn out_of_fold(rows: &[Row], folds: usize, seed: u64) -> Result<Vec<Row>, String> {
    let folds = folds.max(2);
    if rows.len() < folds {
        return Err(format!(
            "{folds}-fold out-of-fold fitting needs at least {folds} rows, got {}",
            rows.len()
        ));
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    let mut rng = SplitMix64::new(seed);
    // Fisher–Yates.
    for i in (1..order.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut fold_of = vec![0usize; rows.len()];
    for (position, &row) in order.iter().enumerate() {
        fold_of[row] = position % folds;
    }
    let mut out: Vec<Option<Row>> = vec![None; rows.len()];
    for fold in 0..folds {
        let train: Vec<Row> = rows
            .iter()
            .zip(&fold_of)
            .filter(|(_, f)| **f != fold)
            .map(|(r, _)| r.clone())
            .collect();
        let fit = fit_temperature_bias(&train)?;
        for (i, r) in rows.iter().enumerate() {
            if fold_of[i] == fold {
                out[i] = Some(Row {
                    probs: apply(&r.probs, fit.temperature, &fit.bias),
                    label: r.label,
                });
            }
        }
    }
    Ok(out.into_iter().flatten().collect())
}
