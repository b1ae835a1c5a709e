//! Fitting calibration from labelled raw probabilities, and the metrics that judge it.
//! Everything here is pure: rows in, numbers out (the `calibrate` and `eval` commands read
//! and write the files).
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
//! * [`metrics()`]: accuracy, normalised accuracy, macro F1, Brier, ECE (equal-size and
//!   equal-width bins) and excess ECE.
//!
//! Probabilities of exactly 0 are floored at [`PROB_FLOOR`] before taking logs.

mod conformal;
mod metrics;
mod optimize;
mod rng;
mod row;
mod temperature;

pub use crate::calibration::profile::prediction_set;
pub use crate::calibration::temperature::{apply, log_sum_exp, softmax, PROB_FLOOR};
pub use conformal::{
    automation_threshold, conformal_cutoff, conformal_cutoffs_per_label, minimum_answers, score,
    Automation,
};
pub use metrics::{
    ece_equal_size, ece_equal_width, metrics, reliability_bins, Bin, Metrics, EXCESS_ECE_DRAWS,
};
pub use optimize::{golden_section, lbfgs};
pub use rng::SplitMix64;
pub use row::Row;
pub use temperature::{
    fit_formula, fit_temperature, fit_temperature_bias, mean_nll, out_of_fold, GroupFit,
    TemperatureBias, GOLDEN_ITERATIONS, T_MAX, T_MIN,
};

#[cfg(test)]
mod tests;
