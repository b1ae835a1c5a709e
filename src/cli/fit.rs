//! Fitting calibration from labelled raw probabilities, and the metrics that judge it
//! (issue 6). Everything here is pure: rows in, numbers out.
//!
//! * [`fit_temperature`]: one temperature per question group, minimising the mean NLL of
//!   `softmax(ln p / T)` plus the shrinkage `(5/n)·(ln T)²` by golden-section search on
//!   `ln T ∈ [ln 0.05, ln 50]`, 60 iterations.
//! * [`fit_formula`]: `ln T = a + b·ln max(n, 2)` by least squares over groups, weighted by
//!   group size (the file [`crate::calibration::Calibration`] reads).
//! * [`fit_temperature_bias`]: a temperature plus a centred bias per option, minimising the
//!   mean NLL of `softmax(ln p / T + b)` + `(5/n)·(ln T)²` + `(2/n)·Σb²` with `Σb = 0`, by a
//!   small hand-written L-BFGS ([`lbfgs`]) on analytic gradients.
//! * [`conformal_cutoff`] and friends: split-conformal prediction sets.
//! * [`automation_threshold`]: the lowest top probability whose answers have a binomial
//!   error bound.
//! * [`metrics`]: accuracy, normalised accuracy, macro F1, Brier, ECE (equal-size and
//!   equal-width bins) and excess ECE.
//!
//! Probabilities of exactly 0 are floored at [`PROB_FLOOR`] before taking logs.

use statrs::distribution::{Binomial, DiscreteCDF};

use crate::calibration::argmax;
pub use crate::calibration::profile::prediction_set;
pub use crate::calibration::temperature::{apply, log_sum_exp, softmax, PROB_FLOOR};

/// Lowest temperature searched.
pub const T_MIN: f64 = 0.05;
/// Highest temperature searched.
pub const T_MAX: f64 = 50.0;
/// Golden-section iterations.
pub const GOLDEN_ITERATIONS: usize = 60;
/// Draws behind the expected ECE of a perfectly calibrated model.
pub const EXCESS_ECE_DRAWS: usize = 200;

/// One labelled answer: the raw probability per option and the gold option index.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Probability per option (need not sum to exactly 1).
    pub probs: Vec<f64>,
    /// Index of the gold option.
    pub label: usize,
}

impl Row {
    /// A checked row: at least one option, finite non-negative probabilities with a positive
    /// sum, and a label in range.
    pub fn new(probs: Vec<f64>, label: usize) -> Result<Self, String> {
        if probs.is_empty() {
            return Err("no probabilities".into());
        }
        if probs.iter().any(|p| !p.is_finite() || *p < 0.0) {
            return Err("probabilities must be finite and non-negative".into());
        }
        if probs.iter().sum::<f64>() <= 0.0 {
            return Err("probabilities sum to zero".into());
        }
        if label >= probs.len() {
            return Err(format!(
                "label {label} out of range for {} options",
                probs.len()
            ));
        }
        Ok(Row { probs, label })
    }

    /// The index of the highest probability (the first on ties).
    pub fn argmax(&self) -> usize {
        argmax(&self.probs)
    }

    /// The highest probability, normalised by the row's sum.
    pub fn top(&self) -> f64 {
        let sum: f64 = self.probs.iter().sum();
        self.probs[self.argmax()] / sum
    }

    fn logs(&self) -> Vec<f64> {
        self.probs.iter().map(|p| p.max(PROB_FLOOR).ln()).collect()
    }
}

/// Minimises `f` on `[lo, hi]` by golden-section search; returns the final midpoint.
pub fn golden_section(f: impl Fn(f64) -> f64, lo: f64, hi: f64, iterations: usize) -> f64 {
    let inv_phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (lo, hi);
    let mut c = b - inv_phi * (b - a);
    let mut d = a + inv_phi * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..iterations {
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - inv_phi * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + inv_phi * (b - a);
            fd = f(d);
        }
    }
    (a + b) / 2.0
}

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
fn bias_objective(logs: &[(Vec<f64>, usize)], theta: &[f64]) -> (f64, Vec<f64>) {
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

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Minimises a smooth function given as `x → (f(x), ∇f(x))` by limited-memory BFGS
/// (memory 10, two-loop recursion, Armijo backtracking). Stops after `max_iter` steps, when
/// the gradient norm falls below `tol`, or when no step decreases `f`.
pub fn lbfgs(
    f: impl Fn(&[f64]) -> (f64, Vec<f64>),
    x0: Vec<f64>,
    max_iter: usize,
    tol: f64,
) -> Vec<f64> {
    const MEMORY: usize = 10;
    let mut x = x0;
    let (mut fx, mut g) = f(&x);
    let mut hist: std::collections::VecDeque<(Vec<f64>, Vec<f64>, f64)> =
        std::collections::VecDeque::new();
    for _ in 0..max_iter {
        if dot(&g, &g).sqrt() < tol {
            break;
        }
        // Two-loop recursion: d = −H·g.
        let mut q = g.clone();
        let mut alphas = Vec::with_capacity(hist.len());
        for (s, y, rho) in hist.iter().rev() {
            let a = rho * dot(s, &q);
            for (qi, yi) in q.iter_mut().zip(y) {
                *qi -= a * yi;
            }
            alphas.push(a);
        }
        let gamma = match hist.back() {
            Some((s, y, _)) => dot(s, y) / dot(y, y),
            None => 1.0 / dot(&g, &g).sqrt().max(1.0),
        };
        for qi in q.iter_mut() {
            *qi *= gamma;
        }
        for ((s, y, rho), a) in hist.iter().zip(alphas.iter().rev()) {
            let beta = rho * dot(y, &q);
            for (qi, si) in q.iter_mut().zip(s) {
                *qi += si * (a - beta);
            }
        }
        let mut d: Vec<f64> = q.iter().map(|v| -v).collect();
        let mut slope = dot(&d, &g);
        if slope >= 0.0 {
            hist.clear();
            d = g.iter().map(|v| -v).collect();
            slope = -dot(&g, &g);
        }
        let mut step = 1.0;
        let mut accepted = None;
        for _ in 0..60 {
            let xn: Vec<f64> = x.iter().zip(&d).map(|(xi, di)| xi + step * di).collect();
            let (fnew, gnew) = f(&xn);
            if fnew.is_finite() && fnew <= fx + 1e-4 * step * slope {
                accepted = Some((xn, fnew, gnew));
                break;
            }
            step *= 0.5;
        }
        let Some((xn, fnew, gnew)) = accepted else {
            break;
        };
        let s: Vec<f64> = xn.iter().zip(&x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = gnew.iter().zip(&g).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        if sy > 1e-12 {
            if hist.len() == MEMORY {
                hist.pop_front();
            }
            hist.push_back((s, y, 1.0 / sy));
        }
        let done = (fx - fnew).abs() <= 1e-15 * fx.abs().max(1.0);
        x = xn;
        fx = fnew;
        g = gnew;
        if done {
            break;
        }
    }
    x
}

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

/// splitmix64 (Steele, Lea & Flood 2014): a tiny, seedable, well-mixed PRNG, enough for
/// sampling labels and synthetic data reproducibly. Not for cryptography.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// An index drawn from (unnormalised) probabilities.
    pub fn categorical(&mut self, p: &[f64]) -> usize {
        let sum: f64 = p.iter().sum();
        let mut u = self.next_f64() * sum;
        for (i, x) in p.iter().enumerate() {
            if u < *x {
                return i;
            }
            u -= x;
        }
        p.len() - 1
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows whose true distribution is `softmax(ln p / t + bias)`, labels drawn from it.
    fn synthetic(n: usize, k: usize, t: f64, bias: &[f64], seed: u64) -> Vec<Row> {
        let mut rng = SplitMix64::new(seed);
        (0..n)
            .map(|_| {
                let z: Vec<f64> = (0..k).map(|_| 2.5 * rng.normal()).collect();
                let p = softmax(&z);
                let truth = apply(&p, t, bias);
                let label = rng.categorical(&truth);
                Row::new(p, label).expect("valid row")
            })
            .collect()
    }

    #[test]
    fn golden_section_finds_a_parabola_minimum() {
        let x = golden_section(|x| (x - 0.7).powi(2), -3.0, 4.0, 60);
        assert!((x - 0.7).abs() < 1e-9);
    }

    #[test]
    fn temperature_is_recovered() {
        for &t in &[0.5, 1.0, 2.5] {
            let rows = synthetic(6000, 3, t, &[], 11);
            let fit = fit_temperature(&rows);
            assert!((fit / t - 1.0).abs() < 0.08, "true {t}, fitted {fit}");
        }
    }

    #[test]
    fn fitted_temperature_lowers_nll_and_shrinks_toward_one() {
        let rows = synthetic(3000, 2, 2.0, &[], 5);
        let t = fit_temperature(&rows);
        assert!(mean_nll(&rows, t) < mean_nll(&rows, 1.0));
        // With 4 rows the (5/n)(ln T)² penalty dominates: T stays near 1.
        let few = fit_temperature(&rows[..4]);
        assert!((few.ln()).abs() < t.ln().abs());
        assert_eq!(fit_temperature(&[]), 1.0);
    }

    #[test]
    fn formula_is_a_weighted_least_squares_line() {
        let (a, b) = (0.9, -0.1);
        let groups: Vec<GroupFit> = [2usize, 4, 10, 50]
            .iter()
            .map(|&n| GroupFit {
                options: n,
                rows: 100 + n,
                temperature: (a + b * (n as f64).ln()).exp(),
            })
            .collect();
        let (fa, fb) = fit_formula(&groups);
        assert!((fa - a).abs() < 1e-12 && (fb - b).abs() < 1e-12);
        // Weights: the heavy group pulls the line.
        let two = [
            GroupFit {
                options: 2,
                rows: 1,
                temperature: 1.0,
            },
            GroupFit {
                options: 2,
                rows: 3,
                temperature: 1f64.exp(),
            },
        ];
        let (a2, b2) = fit_formula(&two);
        assert!((a2 - 0.75).abs() < 1e-12);
        assert_eq!(b2, 0.0);
        assert_eq!(fit_formula(&[]), (0.0, 0.0));
        // The written formula is read back by the service's own code.
        let c = crate::calibration::Calibration { a: fa, b: fb };
        assert!((c.temperature(10) - groups[2].temperature).abs() < 1e-12);
    }

    #[test]
    fn temperature_and_bias_are_recovered() {
        let bias = [0.6, -0.2, -0.4];
        let rows = synthetic(12000, 3, 1.8, &bias, 3);
        let fit = fit_temperature_bias(&rows).expect("fits");
        assert!(
            (fit.temperature / 1.8 - 1.0).abs() < 0.08,
            "{}",
            fit.temperature
        );
        assert!(fit.bias.iter().sum::<f64>().abs() < 1e-9);
        for (f, b) in fit.bias.iter().zip(bias) {
            assert!((f - b).abs() < 0.1, "{:?} vs {bias:?}", fit.bias);
        }
        // Without a true bias the fitted one stays small.
        let plain = fit_temperature_bias(&synthetic(6000, 2, 0.7, &[], 9)).expect("fits");
        assert!((plain.temperature / 0.7 - 1.0).abs() < 0.08);
        assert!(plain.bias.iter().all(|b| b.abs() < 0.1));
        assert!(fit_temperature_bias(&[]).is_err());
    }

    #[test]
    fn out_of_fold_rows_are_calibrated_by_the_other_folds() {
        let mut rng = SplitMix64::new(11);
        let rows: Vec<Row> = (0..600)
            .map(|_| {
                let z: Vec<f64> = (0..3).map(|_| 3.0 * rng.normal()).collect();
                let p = softmax(&z);
                let label = rng.categorical(&apply(&p, 2.0, &[0.4, 0.0, -0.4]));
                Row::new(p, label).expect("row")
            })
            .collect();
        let oof = out_of_fold(&rows, 5, 1).expect("fits");
        assert_eq!(oof.len(), rows.len());
        assert!(oof.iter().zip(&rows).all(|(o, r)| o.label == r.label));
        // Recalibrated: softer on average than the raw rows (drawn at T = 2), NLL improves,
        // and close to what the in-sample fit gives (600 rows leave each fold 480).
        let mean_top = |rs: &[Row]| rs.iter().map(Row::top).sum::<f64>() / rs.len() as f64;
        assert!(mean_top(&oof) < mean_top(&rows) - 0.05);
        assert!(mean_nll(&oof, 1.0) < mean_nll(&rows, 1.0));
        let all = fit_temperature_bias(&rows).expect("fits");
        let in_sample: Vec<Row> = rows
            .iter()
            .map(|r| Row {
                probs: apply(&r.probs, all.temperature, &all.bias),
                label: r.label,
            })
            .collect();
        assert!(mean_nll(&oof, 1.0) >= mean_nll(&in_sample, 1.0) - 1e-9);
        assert!(mean_nll(&oof, 1.0) < mean_nll(&in_sample, 1.0) + 0.05);
        assert!(out_of_fold(&rows[..3], 5, 1).is_err());
    }

    #[test]
    fn bias_gradient_matches_finite_differences() {
        let rows = synthetic(50, 3, 1.3, &[0.3, 0.0, -0.3], 1);
        let logs: Vec<(Vec<f64>, usize)> = rows.iter().map(|r| (r.logs(), r.label)).collect();
        let theta = [0.2, 0.1, -0.3, 0.2];
        let (_, g) = bias_objective(&logs, &theta);
        let h = 1e-6;
        let mut tp = theta;
        tp[0] += h;
        let mut tm = theta;
        tm[0] -= h;
        let num = (bias_objective(&logs, &tp).0 - bias_objective(&logs, &tm).0) / (2.0 * h);
        assert!((num - g[0]).abs() < 1e-6);
        // Bias direction within Σb = 0: +h on b0, −h on b1.
        let mut tp = theta;
        tp[1] += h;
        tp[2] -= h;
        let mut tm = theta;
        tm[1] -= h;
        tm[2] += h;
        let num = (bias_objective(&logs, &tp).0 - bias_objective(&logs, &tm).0) / (2.0 * h);
        assert!((num - (g[1] - g[2])).abs() < 1e-6);
    }

    #[test]
    fn lbfgs_minimises_rosenbrock() {
        let f = |x: &[f64]| {
            let (a, b) = (x[0], x[1]);
            (
                (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2),
                vec![
                    -2.0 * (1.0 - a) - 400.0 * a * (b - a * a),
                    200.0 * (b - a * a),
                ],
            )
        };
        let x = lbfgs(f, vec![-1.2, 1.0], 500, 1e-10);
        assert!(
            (x[0] - 1.0).abs() < 1e-5 && (x[1] - 1.0).abs() < 1e-5,
            "{x:?}"
        );
    }

    #[test]
    fn conformal_cutoff_edge_cases() {
        let scores: Vec<f64> = (1..=9).map(|i| i as f64 / 10.0).collect();
        // n = 8 at 90%: rank ⌈9·0.9⌉ = 9 > 8 → 1.0.
        assert_eq!(conformal_cutoff(&scores[..8], 0.9), 1.0);
        // n = 9 at 90%: rank ⌈10·0.9⌉ = 9 → the 9th smallest score.
        let mut shuffled = scores.clone();
        shuffled.reverse();
        assert_eq!(conformal_cutoff(&shuffled, 0.9), 0.9);
        assert_eq!(conformal_cutoff(&[], 0.9), 1.0);
        // n = 19 at 90%: rank 18.
        let s19: Vec<f64> = (1..=19).map(|i| i as f64).collect();
        assert_eq!(conformal_cutoff(&s19, 0.9), 18.0);
    }

    #[test]
    fn prediction_sets_global_and_per_label() {
        let rows = vec![
            Row::new(vec![0.9, 0.1], 0).expect("row"),
            Row::new(vec![0.6, 0.4], 1).expect("row"),
            Row::new(vec![0.2, 0.8], 1).expect("row"),
        ];
        assert!((score(&rows[1]) - 0.6).abs() < 1e-12);
        assert_eq!(prediction_set(&[0.7, 0.3], &[0.35]), vec![0]);
        assert_eq!(prediction_set(&[0.7, 0.3], &[0.7]), vec![0, 1]);
        assert_eq!(prediction_set(&[0.7, 0.3], &[1.0]), vec![0, 1]);
        // Per label at 50%: label 0 has one score (rank ⌈1⌉ = 1 → 0.1), label 1 has two
        // (rank ⌈1.5⌉ = 2 → 0.6).
        let cuts = conformal_cutoffs_per_label(&rows, 2, 0.5);
        assert!((cuts[0] - 0.1).abs() < 1e-12 && (cuts[1] - 0.6).abs() < 1e-12);
        assert_eq!(prediction_set(&[0.5, 0.5], &cuts), vec![1]);
    }

    // The four threshold cases hold at ε = 0.1, δ = 0.05 (minimum 29 answers):
    // at ε = δ = 0.05 the minimum is 59, so the 40 tied answers could never be accepted.
    const EPS: f64 = 0.1;
    const DELTA: f64 = 0.05;

    #[test]
    fn automation_minimum_sizes() {
        assert_eq!(minimum_answers(0.1, 0.05), 29);
        assert_eq!(minimum_answers(0.05, 0.05), 59);
    }

    #[test]
    fn automation_all_right_gives_the_lowest_confidence() {
        let answers: Vec<(f64, bool)> = (0..100).map(|i| (0.5 + i as f64 / 250.0, true)).collect();
        let a = automation_threshold(&answers, EPS, DELTA).expect("accepted");
        assert_eq!(a.threshold, 0.5);
        assert_eq!((a.level, a.answers, a.errors), (20, 100, 0));
    }

    #[test]
    fn automation_errors_in_the_top_ten_give_none() {
        let answers: Vec<(f64, bool)> = (0..100)
            .map(|i| (0.999 - i as f64 / 250.0, i >= 10))
            .collect();
        assert_eq!(automation_threshold(&answers, EPS, DELTA), None);
    }

    #[test]
    fn automation_twenty_answers_give_none() {
        let answers: Vec<(f64, bool)> = (0..20).map(|i| (0.9 + i as f64 / 1000.0, true)).collect();
        assert_eq!(automation_threshold(&answers, EPS, DELTA), None);
        assert_eq!(automation_threshold(&[], EPS, DELTA), None);
    }

    #[test]
    fn automation_never_splits_ties() {
        let mut answers: Vec<(f64, bool)> = vec![(0.99, true); 40];
        answers.extend((0..60).map(|i| (0.8 - i as f64 / 1000.0, false)));
        let a = automation_threshold(&answers, EPS, DELTA).expect("accepted");
        assert_eq!(a.threshold, 0.99);
        assert_eq!((a.answers, a.errors), (40, 0));
        // At ε = δ = 0.05 the 40 are below the 59-answer minimum.
        assert_eq!(automation_threshold(&answers, 0.05, 0.05), None);
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs for seed 1234567 from the reference C implementation.
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }

    #[test]
    fn ece_bins_follow_array_split_and_equal_width() {
        // 17 rows into 15 bins: two bins of 2, thirteen of 1.
        let conf: Vec<f64> = (0..17).map(|i| 0.5 + i as f64 / 40.0).collect();
        let correct = vec![true; 17];
        let expected: f64 = {
            let mut e = 2.0 / 17.0 * (1.0 - (conf[0] + conf[1]) / 2.0);
            e += 2.0 / 17.0 * (1.0 - (conf[2] + conf[3]) / 2.0);
            e += conf[4..].iter().map(|c| (1.0 - c) / 17.0).sum::<f64>();
            e
        };
        assert!((ece_equal_size(&conf, &correct, 15) - expected).abs() < 1e-12);
        // Equal width: 0.55 and 0.6 share bin (0.5, 0.6]; 0.95 is alone.
        let bins = reliability_bins(&[0.55, 0.6, 0.95], &[true, false, true], 10);
        assert_eq!(bins[5].count, 2);
        assert!((bins[5].accuracy - 0.5).abs() < 1e-12);
        assert_eq!(bins[9].count, 1);
        let ece = ece_equal_width(&[0.55, 0.6, 0.95], &[true, false, true], 10);
        assert!((ece - (2.0 / 3.0 * 0.075 + 1.0 / 3.0 * 0.05)).abs() < 1e-12);
    }

    #[test]
    fn metrics_on_a_small_table() {
        let rows = vec![
            Row::new(vec![0.8, 0.2], 0).expect("row"),
            Row::new(vec![0.7, 0.3], 0).expect("row"),
            Row::new(vec![0.4, 0.6], 1).expect("row"),
            Row::new(vec![0.9, 0.1], 1).expect("row"),
        ];
        let m = metrics(&rows, 0);
        assert_eq!(m.n, 4);
        assert!((m.accuracy - 0.75).abs() < 1e-12);
        assert!((m.majority_share - 0.5).abs() < 1e-12);
        assert!((m.normalised_accuracy.expect("mixed") - 0.5).abs() < 1e-12);
        // Class 0: tp 2, fp 1, fn 0 → F1 0.8; class 1: tp 1, fn 1 → 2/3.
        assert!((m.macro_f1 - (0.8 + 2.0 / 3.0) / 2.0).abs() < 1e-12);
        let brier = (2.0 * 0.04 + 2.0 * 0.09 + 2.0 * 0.16 + 2.0 * 0.81) / 4.0;
        assert!((m.brier - brier).abs() < 1e-12);
        assert!((m.excess_ece - (m.ece_equal_size_15 - m.expected_ece)).abs() < 1e-15);
        assert_eq!(metrics(&rows, 0), m, "seeded: reproducible");
    }

    #[test]
    fn calibrated_data_has_small_excess_ece() {
        // Labels drawn from the probabilities themselves: calibrated by construction.
        let rows = synthetic(3000, 2, 1.0, &[], 21);
        let m = metrics(&rows, 7);
        assert!(m.excess_ece.abs() < 0.02, "{m:?}");
        // Overconfident data (true T = 2.5 read at T = 1) is not.
        let over = metrics(&synthetic(3000, 2, 2.5, &[], 22), 7);
        assert!(over.excess_ece > 0.05, "{over:?}");
    }
}
