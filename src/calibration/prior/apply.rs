//! Taking the prior out of one read, before decoding tempers it.

/// Subtracts `weight · prior` from one read's log-probabilities (by position), then moves
/// them all by one constant so their log-sum-exp is what it was: the masked distribution
/// is the corrected one, and the option mass decoding reports is still the read's own.
pub fn correct(logprobs: &mut [f64], prior: &[f64], weight: f64) {
    if logprobs.len() != prior.len() || weight == 0.0 {
        return;
    }
    let before = log_sum_exp(logprobs);
    for (lp, b) in logprobs.iter_mut().zip(prior) {
        *lp -= weight * b;
    }
    let shift = before - log_sum_exp(logprobs);
    if shift.is_finite() {
        for lp in logprobs.iter_mut() {
            *lp += shift;
        }
    }
}

fn log_sum_exp(x: &[f64]) -> f64 {
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    max + x.iter().map(|v| (v - max).exp()).sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_correction_moves_the_distribution_and_keeps_the_mass() {
        let mut lp = vec![(0.6f64).ln(), (0.2f64).ln()];
        correct(&mut lp, &[0.5, -0.5], 1.0);
        let mass: f64 = lp.iter().map(|x| x.exp()).sum();
        assert!((mass - 0.8).abs() < 1e-12);
        // 0.6/e^0.5 : 0.2·e^0.5 = 3/e.
        let ratio = (lp[0] - lp[1]).exp();
        assert!((ratio - 3.0 / std::f64::consts::E).abs() < 1e-12);
        let mut same = vec![-1.0, -2.0];
        correct(&mut same, &[0.5, -0.5], 0.0);
        assert_eq!(same, [-1.0, -2.0]);
    }
}
