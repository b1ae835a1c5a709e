//! `GET /v1/calibration`: the calibration watch's figures.

use super::*;

/// `GET /v1/calibration`: the calibration watch's figures per shape over one span's
/// windows (the caller's own answers, or every key's for the admin).
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationPage {
    /// `calibration`.
    object: String,
    /// `hour`, `day` or `week`.
    window: String,
    /// The reference window the drift figures compare against; null before any answer.
    reference: Option<CalibrationReference>,
    shapes: Vec<CalibrationShape>,
}

/// The reference window.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationReference {
    from_ms: i64,
    until_ms: i64,
    /// Named by the operator (`--calibration-reference`), else the first full week.
    named: bool,
    /// Over: the drift figures compare against it (null until then).
    complete: bool,
}

/// One shape's figures.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationShape {
    /// The configured model.
    model: String,
    #[serde(rename = "type")]
    kind: String,
    options: usize,
    /// `accuracy`, `cost`, `compact` (`unknown` for records older than the field).
    layout: String,
    /// `raw`, `prior` (corrected by the position prior) or `profile` (a profile covered it).
    class: String,
    /// Oldest first; the last holds now. A window without answers has null figures.
    windows: Vec<CalibrationWindow>,
    /// The reference window's own figures.
    reference: CalibrationFigures,
}

/// One window's figures.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationWindow {
    from_ms: i64,
    until_ms: i64,
    #[serde(flatten)]
    figures: CalibrationFigures,
}

/// A window's figures; null where nothing is under one (never 0 for an empty window).
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationFigures {
    answers: u64,
    /// Mean `confidence` (1 − H/ln n).
    mean_confidence: Option<f64>,
    mean_top_probability: Option<f64>,
    mean_option_mass: Option<f64>,
    /// Answers per equal-width bin (15) of the top probability.
    confidence_histogram: Vec<u64>,
    /// PSI of the histogram against the reference window's.
    psi: Option<f64>,
    /// CBPE's expected accuracy.
    expected_accuracy: Option<f64>,
    /// Mean probability per option (up to 8 options).
    mean_posterior: Option<Vec<f64>>,
    /// The label prior re-estimated by EM against the reference's mean posterior.
    em_prior: Option<Vec<f64>>,
    /// Total variation between `em_prior` and the reference's mean posterior.
    em_prior_shift: Option<f64>,
    below_threshold_share: Option<f64>,
    /// Answers with a current outcome.
    outcomes: u64,
    accuracy: Option<f64>,
    ece_equal_width_15: Option<f64>,
    ece_equal_mass_15: Option<f64>,
    brier: Option<f64>,
    nll: Option<f64>,
    reliability: Vec<CalibrationBin>,
    per_option: Option<Vec<CalibrationOption>>,
}

/// One reliability bin (answers with an outcome).
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationBin {
    lo: f64,
    hi: f64,
    count: u64,
    confidence: Option<f64>,
    accuracy: Option<f64>,
}

/// One option over answers with an outcome.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationOption {
    predicted: Option<f64>,
    observed: Option<f64>,
}
