//! Calibration at serving time: how raw option probabilities become the probabilities a
//! caller gets.
//!
//! * [`temperature`]: the per-model formula `ln T = a + b·ln n`, its files, tempering and
//!   the confidence measure;
//! * [`profile`]: server-side profiles a request names (temperature, bias, conformal
//!   prediction sets, the automation threshold).
//!
//! * [`prior`]: a label-free correction of the model's preference for a label position,
//!   learned while serving from rotated reads;
//! * [`fit`]: fitting these numbers offline (optimisers, temperature fits, conformal sets,
//!   metrics); the `calibrate` and `eval` commands read and write the files;
//! * [`watch`]: how well the served probabilities hold up over time, per key, model and
//!   question shape, from running sums the ledger feeds.

mod argmax;
mod certain;
pub mod fit;
pub mod prior;
pub mod profile;
pub mod temperature;
pub mod watch;

pub use argmax::argmax;
pub use certain::certain;
use profile::ProfileAnswer;
pub use temperature::{confidence, temper, Calibration, FormulaSource, DEFAULT_FORMULA};

/// One question's calibrated answer, in the caller's option order: what decoding
/// produces, a profile recalibrates and the wire writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// Calibrated probabilities, caller's option order.
    pub probabilities: Vec<f64>,
    /// Mean pre-mask mass on the options; `None` when the model was not asked or when the
    /// backend could not report it (then `option_mass_unknown`).
    pub option_mass: Option<f64>,
    /// The model was asked but some read could not report the pre-mask mass.
    pub option_mass_unknown: bool,
    /// The temperature applied.
    pub temperature: f64,
    /// `1 − H(p)/ln n`.
    pub confidence: f64,
    /// What a calibration profile added, when one covered the question.
    pub profile: Option<ProfileAnswer>,
    /// The weight of the position prior taken out of this answer's reads, when one was
    /// ([`prior`]).
    pub prior: Option<f64>,
    /// A question read in two or more orders: each order's shift and log-probabilities by
    /// position, before any correction (empty for one order). They are what the position
    /// prior learns from; the ledger keeps them so `systemone calibrate prior` can fit the
    /// prior again offline.
    pub orders: Vec<(usize, Vec<f64>)>,
    /// A native upstream's answer: the fields it wrote besides its probabilities and
    /// confidence (its `temperature`, `option_mass`, extensions), written back as they came
    /// in place of this service's own calibration fields (it calibrated the answer).
    pub passed: Option<std::sync::Arc<serde_json::Map<String, serde_json::Value>>>,
    /// The public name of the model that gave this answer, when it is not the one that
    /// served the request (escalation when unsure).
    pub model: Option<std::sync::Arc<str>>,
}

impl Decoded {
    /// The option chosen: the most probable (ties to the first in option order).
    pub fn chosen(&self) -> usize {
        argmax(&self.probabilities)
    }

    /// A noul's P(yes): its options are `[no, yes]`, so index 1 (0 for a question that
    /// was not a noul of two options).
    pub fn yes(&self) -> f64 {
        self.probabilities.get(1).copied().unwrap_or(0.0)
    }

    /// A score's expected level, `Σ i·p_i` over levels 0..n.
    pub fn expected_level(&self) -> f64 {
        self.probabilities
            .iter()
            .enumerate()
            .map(|(i, p)| i as f64 * p)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(p: &[f64]) -> Decoded {
        Decoded {
            probabilities: p.to_vec(),
            ..certain()
        }
    }

    #[test]
    fn a_noul_is_p_of_index_one_and_a_score_the_expected_level() {
        let d = answer(&[0.25, 0.75]);
        assert_eq!((d.chosen(), d.yes(), d.expected_level()), (1, 0.75, 0.75));
        let s = answer(&[0.5, 0.25, 0.25]);
        assert_eq!((s.chosen(), s.expected_level()), (0, 0.75));
        assert_eq!(answer(&[1.0]).yes(), 0.0, "one option: no yes");
        assert_eq!(answer(&[0.5, 0.5]).chosen(), 0, "ties to the first");
    }
}
