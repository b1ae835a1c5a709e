//! Decoding: pre-mask log-probabilities of the option ids become one calibrated answer.
//!
//! Per option order: `option_mass = min(1, Σ exp(lp))` (how much of the model's probability
//! fell on the options at all), `p = exp(lp) / Σ exp(lp)` (the masked distribution). Orders
//! are mapped back to the caller's option order, averaged as probabilities and normalised
//! again; then the temperature is applied and the confidence measured.

pub use crate::calibration::{argmax, certain, Decoded};
use crate::calibration::{confidence, temper};

/// The reads of one question in one option order, merged over slices.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderRead {
    /// Position `p` held the caller's option `(p + shift) mod n`.
    pub shift: usize,
    /// Log-probability per position: pre-mask, or the masked distribution itself when
    /// `pre_mask` is false.
    pub logprobs: Vec<f64>,
    /// Whether `logprobs` are pre-mask, so their mass is the option mass.
    pub pre_mask: bool,
}

/// Why reads cannot be decoded (a protocol break: the caller gets a 502).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// Decodes the reads of one question (one per order) with temperature `t`.
pub fn decode(orders: &[OrderRead], t: f64) -> Result<Decoded, DecodeError> {
    let n = orders
        .first()
        .map(|o| o.logprobs.len())
        .ok_or_else(|| DecodeError("no reads".into()))?;
    let mut averaged = vec![0.0; n];
    let mut mass_sum = 0.0;
    for order in orders {
        if order.logprobs.len() != n {
            return Err(DecodeError("orders disagree on the option count".into()));
        }
        if let Some(bad) = order.logprobs.iter().find(|lp| !lp.is_finite()) {
            return Err(DecodeError(format!("non-finite logprob {bad}")));
        }
        let mass: f64 = order.logprobs.iter().map(|lp| lp.exp()).sum();
        mass_sum += mass.min(1.0);
        let max = order
            .logprobs
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = order.logprobs.iter().map(|lp| (lp - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        if !(total.is_finite() && total > 0.0) {
            return Err(DecodeError(format!("option weights sum to {total}")));
        }
        for (p, w) in weights.iter().enumerate() {
            averaged[(p + order.shift) % n] += w / total;
        }
    }
    let p = if orders.len() == 1 {
        averaged
    } else {
        let total: f64 = averaged.iter().sum();
        averaged.iter().map(|x| x / total).collect()
    };
    let probabilities = temper(&p, t);
    let mass_known = orders.iter().all(|o| o.pre_mask);
    Ok(Decoded {
        confidence: confidence(&probabilities),
        probabilities,
        option_mass: mass_known.then(|| mass_sum / orders.len() as f64),
        option_mass_unknown: !mass_known,
        temperature: t,
        profile: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_order_normalises_and_reports_mass() {
        let lp = vec![(0.3f64).ln(), (0.1f64).ln()];
        let d = decode(
            &[OrderRead {
                shift: 0,
                logprobs: lp,
                pre_mask: true,
            }],
            1.0,
        )
        .expect("decodes");
        assert!((d.probabilities[0] - 0.75).abs() < 1e-12);
        assert!((d.option_mass.expect("asked") - 0.4).abs() < 1e-12);
    }

    #[test]
    fn rotated_orders_map_back_to_the_callers_order() {
        // Order 1 is shifted by 1: position 0 holds caller option 1.
        let a = OrderRead {
            shift: 0,
            logprobs: vec![(0.6f64).ln(), (0.2f64).ln()],
            pre_mask: true,
        };
        let b = OrderRead {
            shift: 1,
            logprobs: vec![(0.2f64).ln(), (0.6f64).ln()],
            pre_mask: true,
        };
        let d = decode(&[a, b], 1.0).expect("decodes");
        assert!((d.probabilities[0] - 0.75).abs() < 1e-12);
    }

    #[test]
    fn non_finite_logprobs_are_refused() {
        let bad = OrderRead {
            shift: 0,
            logprobs: vec![f64::NEG_INFINITY, -1.0],
            pre_mask: true,
        };
        assert!(decode(&[bad], 1.0).is_err());
        assert!(decode(&[], 1.0).is_err());
    }

    #[test]
    fn an_order_without_pre_mask_logprobs_makes_the_mass_unknown() {
        let raw = OrderRead {
            shift: 0,
            logprobs: vec![(0.3f64).ln(), (0.1f64).ln()],
            pre_mask: true,
        };
        let masked = OrderRead {
            shift: 1,
            logprobs: vec![(0.25f64).ln(), (0.75f64).ln()],
            pre_mask: false,
        };
        let d = decode(&[raw, masked], 1.0).expect("decodes");
        assert_eq!(d.option_mass, None);
        assert!(d.option_mass_unknown);
        assert!((d.probabilities[0] - 0.75).abs() < 1e-12);
    }

    #[test]
    fn argmax_ties_go_to_the_first() {
        assert_eq!(argmax(&[0.4, 0.4, 0.2]), 0);
        assert_eq!(argmax(&[0.1, 0.5, 0.4]), 1);
    }
}
