//! How much of the prior to take out, fitted label-free, and so whether to take any.
//!
//! Each sampled question (read in two or more orders) is scored before it joins the
//! estimate: every one of its reads, corrected by `s · prior` for each strength `s` of a
//! grid, against the question's rotation-averaged distribution (log-space mean over its
//! orders, in the caller's option order). The prior it is scored with has never seen it,
//! so the summed cross-entropy is a held-out loss (prequential), and the sums merge by
//! adding like the rest of the statistics. The strength served is the grid point of least
//! loss, when that loss is told from noise and the corrected reads pick the rotation
//! average's answer at least as often as the raw reads do: a correction that lowers the
//! cross-entropy by flipping answers away from the rotation average (it pulls reads that
//! were right across the line, and pays for it by pulling reads that were far off less
//! far) answers worse than the raw read. Otherwise the strength is `0`: the service
//! declines ([`Declined`] says why) and answers the raw read.

use super::stats::{centre, MAX_DIFFERENCE};

/// The strengths tried: `0, 0.1, …, 1`.
pub const GRID: usize = 11;

/// The strength of grid point `g`.
pub fn grid_strength(g: usize) -> f64 {
    g as f64 / (GRID - 1) as f64
}

/// Held-out gains per grid strength, summed over sampled questions: each question's
/// cross-entropy at strength 0 minus at the grid point, and its square, so the gain can be
/// told from noise (a paired test on the questions); and per grid point how many of the
/// scored reads, corrected, pick the rotation average's answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StrengthFit {
    /// Questions scored.
    pub scored: u64,
    /// Summed gain per grid point (positive: the correction helped).
    gain: [f64; GRID],
    /// Summed squared gain per grid point.
    gain_sq: [f64; GRID],
    /// Reads scored (each scored question's orders, at most its option count).
    pub reads: u64,
    /// Per grid point, the scored reads whose corrected argmax is the rotation average's.
    agree: [u64; GRID],
}

/// Why a shape's single reads are answered raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Declined {
    /// Fewer than [`MIN_SCORED`] questions scored (a shape not seen yet included).
    TooFewScored,
    /// No strength's held-out gain clears [`MIN_Z`] standard errors (or the estimate is
    /// all zeros).
    NoGain,
    /// The best strength gains, but its corrected reads pick the rotation average's
    /// answer less often than the raw reads: it would answer worse than the raw read.
    FlipsAnswers,
}

impl Declined {
    /// Every reason, in the order `/readyz` and `/metrics` list them.
    pub const ALL: [Declined; 3] = [
        Declined::TooFewScored,
        Declined::NoGain,
        Declined::FlipsAnswers,
    ];

    /// The metric label and `/readyz` key.
    pub fn as_str(self) -> &'static str {
        match self {
            Declined::TooFewScored => "too_few_scored",
            Declined::NoGain => "no_gain",
            Declined::FlipsAnswers => "flips_answers",
        }
    }
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
    /// the prior estimated before it. A question of more orders than options (which no request asks) is not scored, so
    /// the reads scored stay within `n` per question.
    pub fn score(&mut self, orders: &[(usize, Vec<f64>)], prior: &[f64]) {
        let n = prior.len();
        if orders.len() < 2 || orders.len() > n || orders.iter().any(|(_, lp)| lp.len() != n) {
            return;
        }
        let average = averaged(orders, n);
        let (target, answer) = (softmax(&average), argmax(&average));
        let mut loss = [0.0; GRID];
        for (shift, lp) in orders {
            for (g, l) in loss.iter_mut().enumerate() {
                let s = grid_strength(g);
                let corrected: Vec<f64> = (0..n).map(|p| lp[p] - s * prior[p]).collect();
                let q = log_softmax(&to_caller(&corrected, *shift, n));
                *l -= target.iter().zip(&q).map(|(t, l)| t * l).sum::<f64>();
                self.agree[g] += u64::from(argmax(&q) == answer);
            }
        }
        for g in 0..GRID {
            let gain = loss[0] - loss[g];
            self.gain[g] += gain;
            self.gain_sq[g] += gain * gain;
        }
        self.scored += 1;
        self.reads += orders.len() as u64;
    }

    /// Adds another replica's sums.
    pub fn merge(&mut self, other: &StrengthFit) {
        self.scored += other.scored;
        self.reads += other.reads;
        for g in 0..GRID {
            self.gain[g] += other.gain[g];
            self.gain_sq[g] += other.gain_sq[g];
            self.agree[g] += other.agree[g];
        }
    }

    /// Every sum, flattened for a store: `scored`, the gains, the squared gains, `reads`,
    /// the agreeing reads.
    pub fn to_values(&self) -> Vec<f64> {
        let mut v = vec![self.scored as f64];
        v.extend_from_slice(&self.gain);
        v.extend_from_slice(&self.gain_sq);
        v.push(self.reads as f64);
        v.extend(self.agree.iter().map(|a| *a as f64));
        v
    }

    /// The sums of a shape of `n` options from [`StrengthFit::to_values`]'s layout; `None`
    /// for the wrong length, a value that is not finite, or sums beyond what `scored`
    /// questions can make: each of at most `n` reads moves by at most twice the largest
    /// prior, itself at most `n` times [`MAX_DIFFERENCE`]; at most `n` reads a question
    /// are scored, and no more of them agree than were scored. (A store's row from before
    /// the agreement was counted has its `reads` and agreements at 0: it passes.)
    pub fn from_values(n: usize, v: &[f64]) -> Option<Self> {
        if v.len() != VALUES || v.iter().any(|x| !x.is_finite()) || v[0] < -0.5 {
            return None;
        }
        let (counts, tail) = (&v[..1 + 2 * GRID], &v[1 + 2 * GRID..]);
        let reads = count(tail[0])?;
        let agree: Vec<u64> = tail[1..].iter().map(|a| count(*a)).collect::<Option<_>>()?;
        let scored = v[0].max(0.0).round();
        if reads as f64 > scored * n as f64 || agree.iter().any(|a| *a > reads) {
            return None;
        }
        let v = counts;
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
            scored: scored as u64,
            reads,
            ..StrengthFit::default()
        };
        fit.gain.copy_from_slice(&v[1..1 + GRID]);
        fit.gain_sq.copy_from_slice(&v[1 + GRID..]);
        fit.agree.copy_from_slice(&agree);
        Some(fit)
    }

    /// The grid point served: the one of most held-out gain, when that gain clears
    /// [`MIN_Z`] standard errors (after [`MIN_SCORED`] questions) and its corrected reads
    /// agree with the rotation average at least as often as the raw reads; else why not.
    pub fn decide(&self) -> Result<usize, Declined> {
        if self.scored < MIN_SCORED {
            return Err(Declined::TooFewScored);
        }
        let best = self.best();
        if best == 0 || !self.significant(best) {
            return Err(Declined::NoGain);
        }
        if self.agree[best] < self.agree[0] {
            return Err(Declined::FlipsAnswers);
        }
        Ok(best)
    }

    /// The grid point of most summed gain (0 on a tie with no correction).
    fn best(&self) -> usize {
        let mut best = 0;
        for g in 1..GRID {
            if self.gain[g] > self.gain[best] + 1e-12 {
                best = g;
            }
        }
        best
    }

    /// The strength [`StrengthFit::decide`] serves; 0 when it declines.
    pub fn strength(&self) -> f64 {
        self.decide().map_or(0.0, grid_strength)
    }

    /// The scored reads whose answer the rotation average's is: raw, and corrected at the
    /// strength of most gain (served or not).
    pub fn agreement(&self) -> (u64, u64) {
        (self.agree[0], self.agree[self.best()])
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
        let g = self.decide().unwrap_or(0);
        self.gain[g] / self.scored.max(1) as f64
    }
}

/// Values in [`StrengthFit::to_values`]' layout.
pub const VALUES: usize = 1 + 2 * GRID + 1 + GRID;

/// A count a store holds (a whole number, not negative, within rounding).
fn count(x: f64) -> Option<u64> {
    (x > -0.5 && x < 1e15).then(|| x.max(0.0).round() as u64)
}

/// The first index of the largest value.
fn argmax(x: &[f64]) -> usize {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best
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
        let (raw, corrected) = fit.agreement();
        assert_eq!((raw, corrected, fit.reads), (20, 40, 40));
    }

    #[test]
    fn without_a_prior_the_fit_declines() {
        let mut fit = StrengthFit::default();
        for q in 0..20 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            // A stale estimate that the reads do not bear out.
            fit.score(&pair([x, -x], 0.0), &[0.8, -0.8]);
        }
        assert_eq!(fit.decide(), Err(Declined::NoGain));
        assert_eq!(
            StrengthFit::default().decide(),
            Err(Declined::TooFewScored),
            "no evidence"
        );
    }

    #[test]
    fn a_correction_that_gains_but_flips_answers_is_declined() {
        // Three questions in four pull the model hard to the first position shown, the
        // fourth not at all: the prior learned is their mean. Taken out, it brings the
        // pulled reads nearer the rotation average (a gain in cross-entropy) but leaves
        // them on the wrong side, and pushes the unpulled reads across the line.
        let mut fit = StrengthFit::default();
        for q in 0..40 {
            let x = if q % 2 == 0 { 0.25 } else { -0.25 };
            let bias = if q % 4 == 0 { 0.0 } else { 6.0 };
            fit.score(&pair([x, -x], bias), &[4.5, -4.5]);
        }
        let best = fit.best();
        assert!(best > 0 && fit.significant(best), "the old rule serves it");
        assert_eq!(fit.decide(), Err(Declined::FlipsAnswers));
        assert_eq!((fit.strength(), fit.mean_gain()), (0.0, 0.0));
        assert_eq!(fit.reads, 80);
        let (raw, corrected) = fit.agreement();
        assert_eq!((raw, corrected), (50, 40), "raw 10+40, corrected 40 of 80");
    }

    #[test]
    fn each_reason_is_told_apart() {
        let mut fit = StrengthFit::default();
        for q in 0..MIN_SCORED - 1 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            fit.score(&pair([x, -x], 2.0), &[2.0, -2.0]);
        }
        assert_eq!(fit.decide(), Err(Declined::TooFewScored));
        fit.score(&pair([1.0, -1.0], 2.0), &[2.0, -2.0]);
        assert_eq!(fit.decide(), Ok(GRID - 1));
        let (raw, corrected) = fit.agreement();
        assert_eq!((raw, corrected, fit.reads), (4, 8, 8), "the bias taken out");
        // More orders than options are never scored: the bound on `reads` holds.
        let three = [
            (0, vec![0.0, 1.0]),
            (1, vec![0.0, 1.0]),
            (0, vec![0.0, 1.0]),
        ];
        fit.score(&three, &[2.0, -2.0]);
        assert_eq!(fit.scored, MIN_SCORED);
        let names: Vec<&str> = Declined::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(names, ["too_few_scored", "no_gain", "flips_answers"]);
    }

    #[test]
    fn agreement_counts_travel_and_are_bounded() {
        let mut fit = StrengthFit::default();
        for q in 0..8 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            fit.score(&pair([x, -x], 2.0), &[2.0, -2.0]);
        }
        let v = fit.to_values();
        assert_eq!(v.len(), VALUES);
        assert_eq!(StrengthFit::from_values(2, &v), Some(fit.clone()));
        let at = |i: usize, x: f64| {
            let mut w = v.clone();
            w[i] = x;
            StrengthFit::from_values(2, &w)
        };
        let reads = 1 + 2 * GRID;
        assert_eq!(
            at(reads, 17.0),
            None,
            "more reads than 8 questions of 2 have"
        );
        assert_eq!(at(reads + 3, 17.0), None, "more agreeing than read");
        assert_eq!(at(reads + 3, -1.0), None, "a negative count");
        assert_eq!(at(reads + 3, 2.5e15), None);
        // A row from before the agreement was counted: served as before.
        let mut old = v.clone();
        old[reads..].fill(0.0);
        let read = StrengthFit::from_values(2, &old).expect("an old row");
        assert_eq!((read.decide(), read.agreement()), (Ok(GRID - 1), (0, 0)));
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
