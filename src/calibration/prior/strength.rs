//! How much of the prior to take out, fitted label-free, and so whether to take any.
//!
//! Each sampled question (read in two or more orders) is scored before it joins the
//! estimate: every one of its reads, corrected by `s · prior` for each strength `s` of a
//! grid, against the question's rotation-averaged distribution (log-space mean over its
//! orders, in the caller's option order). The prior it is scored with has never seen it,
//! so the summed cross-entropy is a held-out loss (prequential), and the sums merge by
//! adding like the rest of the statistics. The strength served is the grid point of least
//! loss; `0` means the correction does not make single reads agree better with the
//! rotation average than no correction: the service declines.

use super::stats::{centre, MAX_DIFFERENCE};

/// The strengths tried: `0, 0.1, …, 1`.
pub const GRID: usize = 11;

/// The strength of grid point `g`.
pub fn grid_strength(g: usize) -> f64 {
    g as f64 / (GRID - 1) as f64
}

/// Held-out gains per grid strength, summed over sampled questions: each question's
/// cross-entropy at strength 0 minus at the grid point, and its square, so the gain can be
/// told from noise (a paired test on the questions).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StrengthFit {
    /// Questions scored.
    pub scored: u64,
    /// Summed gain per grid point (positive: the correction helped).
    gain: [f64; GRID],
    /// Summed squared gain per grid point.
    gain_sq: [f64; GRID],
}

/// Standard errors a summed gain must clear before the correction is served: with no
/// prior to find, a noisy estimate helps half the time by chance, and this is what keeps
/// the service from correcting then.
pub const MIN_Z: f64 = 2.0;

/// Questions scored before any strength is served: with two or three, equal gains have no
/// variance and any chance agreement would pass the test.
pub const MIN_SCORED: u64 = 4;

impl StrengthFit {
    /// Scores one sampled question's reads `(shift, log-probabilities by position)` with
    /// the prior estimated before it.
    pub fn score(&mut self, orders: &[(usize, Vec<f64>)], prior: &[f64]) {
        let n = prior.len();
        if orders.len() < 2 || orders.iter().any(|(_, lp)| lp.len() != n) {
            return;
        }
        let target = softmax(&averaged(orders, n));
        let mut loss = [0.0; GRID];
        for (shift, lp) in orders {
            for (g, l) in loss.iter_mut().enumerate() {
                let s = grid_strength(g);
                let corrected: Vec<f64> = (0..n).map(|p| lp[p] - s * prior[p]).collect();
                let q = log_softmax(&to_caller(&corrected, *shift, n));
                *l -= target.iter().zip(&q).map(|(t, l)| t * l).sum::<f64>();
            }
        }
        for g in 0..GRID {
            let gain = loss[0] - loss[g];
            self.gain[g] += gain;
            self.gain_sq[g] += gain * gain;
        }
        self.scored += 1;
    }

    /// Adds another replica's sums.
    pub fn merge(&mut self, other: &StrengthFit) {
        self.scored += other.scored;
        for g in 0..GRID {
            self.gain[g] += other.gain[g];
            self.gain_sq[g] += other.gain_sq[g];
        }
    }

    /// Every sum, flattened for a store: `scored`, the gains, the squared gains.
    pub fn to_values(&self) -> Vec<f64> {
        let mut v = vec![self.scored as f64];
        v.extend_from_slice(&self.gain);
        v.extend_from_slice(&self.gain_sq);
        v
    }

    /// The sums of a shape of `n` options from [`StrengthFit::to_values`]'s layout; `None`
    /// for the wrong length, a value that is not finite, or gains beyond what `scored`
    /// questions can make: each of at most `n` reads moves by at most twice the largest
    /// prior, itself at most `n` times [`MAX_DIFFERENCE`].
    pub fn from_values(n: usize, v: &[f64]) -> Option<Self> {
        if v.len() != 1 + 2 * GRID || v.iter().any(|x| !x.is_finite()) || v[0] < -0.5 {
            return None;
        }
        let per_question = 2.0 * (n * n) as f64 * MAX_DIFFERENCE;
        let bound = v[0].max(0.0).round() * per_question * (1.0 + 1e-9);
        let gains_fit = v[1..1 + GRID].iter().all(|g| g.abs() <= bound)
            && v[1 + GRID..]
                .iter()
                .all(|g| (0.0..=bound * per_question).contains(g));
        if !gains_fit {
            return None;
        }
        let mut fit = StrengthFit {
            scored: v[0].max(0.0).round() as u64,
            ..StrengthFit::default()
        };
        fit.gain.copy_from_slice(&v[1..1 + GRID]);
        fit.gain_sq.copy_from_slice(&v[1 + GRID..]);
        Some(fit)
    }

    /// The strength of most held-out gain, when that gain clears [`MIN_Z`] standard
    /// errors; else 0 (declined).
    pub fn strength(&self) -> f64 {
        let mut best = 0;
        for g in 1..GRID {
            if self.gain[g] > self.gain[best] + 1e-12 {
                best = g;
            }
        }
        if best == 0 || !self.significant(best) {
            return 0.0;
        }
        grid_strength(best)
    }

    /// Whether grid point `g`'s summed gain clears [`MIN_Z`] standard errors of the sum.
    fn significant(&self, g: usize) -> bool {
        let m = self.scored as f64;
        if self.scored < MIN_SCORED {
            return false;
        }
        let mean = self.gain[g] / m;
        let variance = (self.gain_sq[g] / m - mean * mean).max(0.0);
        self.gain[g] > MIN_Z * (m * variance).sqrt()
    }

    /// Mean held-out gain per question at the fitted strength (0 when declined).
    pub fn mean_gain(&self) -> f64 {
        let g = (self.strength() * (GRID - 1) as f64).round() as usize;
        self.gain[g] / self.scored.max(1) as f64
    }
}

/// The mean of the centred reads, in the caller's option order.
fn averaged(orders: &[(usize, Vec<f64>)], n: usize) -> Vec<f64> {
    let mut sum = vec![0.0; n];
    for (shift, lp) in orders {
        for (i, v) in to_caller(&centre(lp), *shift, n).into_iter().enumerate() {
            sum[i] += v / orders.len() as f64;
        }
    }
    sum
}

/// Position `p` held caller option `(p + shift) mod n`.
fn to_caller(by_position: &[f64], shift: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n];
    for (p, v) in by_position.iter().enumerate() {
        out[(p + shift) % n] = *v;
    }
    out
}

fn log_softmax(x: &[f64]) -> Vec<f64> {
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + x.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
    x.iter().map(|v| v - lse).collect()
}

fn softmax(x: &[f64]) -> Vec<f64> {
    log_softmax(x).into_iter().map(f64::exp).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(signal: [f64; 2], bias: f64) -> Vec<(usize, Vec<f64>)> {
        vec![
            (0, vec![signal[0] + bias, signal[1] - bias]),
            (1, vec![signal[1] + bias, signal[0] - bias]),
        ]
    }

    #[test]
    fn a_true_prior_is_taken_out_whole() {
        let mut fit = StrengthFit::default();
        for q in 0..20 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            fit.score(&pair([x, -x], 2.0), &[2.0, -2.0]);
        }
        assert_eq!(fit.strength(), 1.0);
        assert!(fit.mean_gain() > 0.0);
    }

    #[test]
    fn without_a_prior_the_fit_declines() {
        let mut fit = StrengthFit::default();
        for q in 0..20 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            // A stale estimate that the reads do not bear out.
            fit.score(&pair([x, -x], 0.0), &[0.8, -0.8]);
        }
        assert_eq!(fit.strength(), 0.0);
        assert_eq!(StrengthFit::default().strength(), 0.0, "no evidence");
    }

    #[test]
    fn a_gain_within_its_noise_is_declined() {
        let mut fit = StrengthFit::default();
        // Reads that disagree by chance, one way then the other: a prior of either sign
        // helps some questions and hurts others.
        for q in 0..40 {
            let e = if q % 3 == 0 { 0.5 } else { -0.3 };
            fit.score(&[(0, vec![e, -e]), (1, vec![-e, e])], &[0.1, -0.1]);
        }
        assert_eq!(fit.strength(), 0.0);
    }
}
