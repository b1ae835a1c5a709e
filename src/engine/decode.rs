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
        prior: None,
        orders: Vec::new(),
        passed: None,
        model: None,
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

/// Temperature × log-probability extremes, for every question type: whatever reads the
/// backend returns and whatever temperature applies (a request's subnormal `1e-310`, a
/// calibration formula's or a profile's), an answer that decodes holds only finite
/// numbers, each probability in [0, 1], summing to 1 (a subnormal temperature overflows
/// `1/T`: unguarded, it gives NaN, written as `null` in a 200).
#[cfg(test)]
mod extremes {
    use std::sync::Arc;

    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::calibration::profile::{Profile, QuestionShape};
    use crate::calibration::temperature::tempered_softmax;
    use crate::question::{lower_choice, lower_noul, lower_score, LoweredQuestion};

    /// A question of each type: a choice of 1 to 64 options, a noul, a score of 1 to 10.
    fn question() -> impl Strategy<Value = LoweredQuestion> {
        prop_oneof![
            (1usize..=64).prop_map(|n| {
                let options = (0..n).map(|i| (format!("o{i}"), Value::Null)).collect();
                lower_choice("c".into(), Value::Null, options)
            }),
            Just(lower_noul(
                "n".into(),
                Value::Null,
                Value::Null,
                Value::Null
            )),
            (1usize..=10)
                .prop_map(|n| { lower_score("s".into(), Value::Null, vec![Value::Null; n]) }),
        ]
    }

    /// Finite positive temperatures from subnormal to `f64::MAX`: what validation lets a
    /// request send, and what a formula or a profile may hold.
    fn temperature() -> impl Strategy<Value = f64> {
        prop_oneof![
            (1u64..(1u64 << 52)).prop_map(f64::from_bits),
            Just(5e-324),
            Just(1e-310),
            Just(f64::MIN_POSITIVE),
            1e-308..1e-200f64,
            1e-3..1e3f64,
            Just(1.0),
            1e200..f64::MAX,
            Just(f64::MAX),
        ]
    }

    /// One log-probability: `-inf` (which decoding refuses), the most negative floats,
    /// underflowing ones, ordinary ones, 0 and the tiniest negatives.
    fn logprob() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(f64::NEG_INFINITY),
            Just(f64::MIN),
            -1e308..-1e300f64,
            Just(-745.2),
            -800.0..-700.0f64,
            -50.0..0.0f64,
            Just(0.0),
            Just(-5e-324),
        ]
    }

    /// `n` log-probabilities, all equal half the time.
    fn logprobs(n: usize) -> impl Strategy<Value = Vec<f64>> {
        prop_oneof![
            logprob().prop_map(move |lp| vec![lp; n]),
            proptest::collection::vec(logprob(), n),
        ]
    }

    /// A question with 1 to 3 option orders read for it, each with its own shift.
    fn reads() -> impl Strategy<Value = (LoweredQuestion, Vec<OrderRead>)> {
        question().prop_flat_map(|q| {
            let n = q.options.len();
            let order =
                (0..n, logprobs(n), any::<bool>()).prop_map(|(shift, logprobs, pre)| OrderRead {
                    shift,
                    logprobs,
                    pre_mask: pre,
                });
            (Just(q), proptest::collection::vec(order, 1..=3))
        })
    }

    /// The probabilities are a distribution over `n` options.
    fn assert_distribution(p: &[f64], n: usize) -> Result<(), TestCaseError> {
        prop_assert_eq!(p.len(), n);
        prop_assert!(
            p.iter().all(|x| x.is_finite() && (0.0..=1.0).contains(x)),
            "{p:?}"
        );
        let sum: f64 = p.iter().sum();
        prop_assert!((sum - 1.0).abs() <= 1e-9, "sum {sum} of {p:?}");
        Ok(())
    }

    /// Every number the wire writes for an answer: the probabilities, the type's own
    /// number (`choice` by index, `noul`, `score`), confidence, temperature, option mass.
    fn assert_answer(d: &Decoded, q: &LoweredQuestion) -> Result<(), TestCaseError> {
        let n = q.options.len();
        assert_distribution(&d.probabilities, n)?;
        prop_assert!(d.chosen() < n);
        prop_assert!((0.0..=1.0).contains(&d.yes()), "noul {}", d.yes());
        let level = d.expected_level();
        prop_assert!(
            level.is_finite() && (0.0..=(n as f64)).contains(&level),
            "score {level}"
        );
        prop_assert!(
            (0.0..=1.0).contains(&d.confidence),
            "confidence {}",
            d.confidence
        );
        prop_assert!(d.temperature.is_finite() && d.temperature > 0.0);
        if let Some(mass) = d.option_mass {
            prop_assert!((0.0..=1.0).contains(&mass), "option_mass {mass}");
        }
        if let Some(extra) = &d.profile {
            prop_assert!(extra.prediction_set.iter().all(|&i| i < n));
        }
        Ok(())
    }

    /// A profile covering `q` (at least two options) with temperature `t` and `bias`.
    fn profile(q: &LoweredQuestion, t: f64, bias: f64) -> Profile {
        let n = q.options.len();
        Profile {
            name: Arc::from("extreme"),
            model: "m".into(),
            question: QuestionShape::of(q),
            temperature: t,
            bias: (0..n)
                .map(|i| if i % 2 == 0 { bias } else { -bias })
                .collect(),
            coverage: 0.9,
            cutoffs: vec![0.5],
            threshold: Some(0.8),
            compact: false,
        }
    }

    proptest! {
        /// Decoding at any temperature, then (a question of two or more options) the
        /// profile path: decoded at T = 1 and recalibrated with an extreme temperature and
        /// bias. A `-inf` logprob is a protocol break, refused rather than decoded.
        #[test]
        fn every_answer_is_a_finite_distribution(
            (q, orders) in reads(),
            t in temperature(),
            profile_t in temperature(),
            bias in prop_oneof![Just(0.0), -1e3..1e3f64, Just(1e308)],
        ) {
            let refused = orders.iter().flat_map(|o| &o.logprobs).any(|lp| !lp.is_finite());
            match decode(&orders, t) {
                Err(_) => prop_assert!(refused, "finite reads refused"),
                Ok(d) => {
                    prop_assert!(!refused, "a -inf logprob decoded");
                    assert_answer(&d, &q)?;
                }
            }
            if q.options.len() >= 2 && !refused {
                let raw = decode(&orders, 1.0).expect("decodes at T = 1");
                assert_answer(&profile(&q, profile_t, bias).apply(raw), &q)?;
            }
        }

        /// The tempering core on its own, past what decoding hands it: T = 0 and ∞, any
        /// log at all (`-inf` for a probability of 0, NaN, positive), any finite bias.
        #[test]
        fn tempering_is_finite_for_every_log_and_temperature(
            logs in proptest::collection::vec(prop_oneof![
                logprob(), Just(f64::NAN), Just(f64::INFINITY), 0.0..1e308f64,
            ], 1..=12),
            t in prop_oneof![temperature(), Just(0.0), Just(f64::INFINITY)],
            bias in proptest::collection::vec(-1e300..1e300f64, 0..=12),
        ) {
            assert_distribution(&tempered_softmax(&logs, t, &bias), logs.len())?;
            let p: Vec<f64> = logs.iter().map(|l| l.exp().min(1.0)).collect();
            // At T = 1 `temper` returns its input, which need not be a distribution here.
            if t != 1.0 {
                assert_distribution(&crate::calibration::temper(&p, t), logs.len())?;
            }
        }
    }

    /// The reproduction: three options, T = 1e-310, and the two other limits.
    #[test]
    fn a_subnormal_temperature_puts_all_weight_on_the_top_option() {
        let read = OrderRead {
            shift: 0,
            logprobs: vec![-0.5, -1.5, -2.5],
            pre_mask: true,
        };
        let d = decode(std::slice::from_ref(&read), 1e-310).expect("decodes");
        assert_eq!(d.probabilities, [1.0, 0.0, 0.0]);
        assert_eq!(d.confidence, 1.0);
        let tie = OrderRead {
            logprobs: vec![-1.0, -1.0, -3.0],
            ..read.clone()
        };
        let d = decode(&[tie], 1e-310).expect("decodes");
        assert_distribution(&d.probabilities, 3).expect("a distribution");
        assert!((d.probabilities[0] - 0.5).abs() < 1e-15 && d.probabilities[2] == 0.0);
        let flat = decode(&[read], f64::MAX).expect("decodes");
        assert!(flat
            .probabilities
            .iter()
            .all(|p| (p - 1.0 / 3.0).abs() < 1e-12));
    }
}
