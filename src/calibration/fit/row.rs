//! [`Row`]: one labelled answer, the input of every fit and metric.

use crate::calibration::argmax;
use crate::calibration::temperature::PROB_FLOOR;

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

    pub(super) fn logs(&self) -> Vec<f64> {
        self.probs.iter().map(|p| p.max(PROB_FLOOR).ln()).collect()
    }
}
