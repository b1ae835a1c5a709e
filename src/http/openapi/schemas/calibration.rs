//! `GET /v1/calibration` and its charts: the calibration watch's figures.

use super::*;

/// `GET /v1/calibration`: the calibration watch's figures per shape over one span's
/// windows (the caller's own answers, or every key's for the admin).
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationPage {
    /// `calibration`.
    object: String,
    /// `hour`, `day`, `week` or `recent`.
    window: String,
    /// The reference window the drift figures compare against; null before any answer.
    reference: Option<CalibrationReference>,
    shapes: Vec<CalibrationShape>,
}

/// The calibration watch's filters (`GET /v1/calibration` and its charts).
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(in crate::http::openapi) struct CalibrationQuery {
    /// Only this configured model
    model: Option<String>,
    /// Only this question type: choice, noul or score
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Only this option count
    options: Option<usize>,
    /// Only this layout: accuracy, cost or compact
    layout: Option<String>,
    /// Only raw, prior (corrected by the position prior) or profile answers
    class: Option<String>,
    /// hour, day (default) or week: the UTC windows kept; recent: each shape's last 250 to
    /// 300 answers (per key; the admin's view merges every key's), one window
    window: Option<String>,
}

/// A shape of question, as the calibration watch keeps its figures.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationShapeName {
    /// The configured model.
    model: String,
    #[serde(rename = "type")]
    kind: String,
    options: usize,
    /// `accuracy`, `cost`, `compact` (`unknown` for records older than the field).
    layout: String,
    /// `raw`, `prior` (corrected by the position prior) or `profile` (a profile covered it).
    class: String,
}

/// `GET /v1/calibration/charts`: per shape, its figures drawn as SVG.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationCharts {
    /// `calibration.charts`.
    object: String,
    /// `hour`, `day`, `week` or `recent`.
    window: String,
    shapes: Vec<CalibrationShapeCharts>,
}

/// One shape's charts over the windows shown.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct CalibrationShapeCharts {
    #[serde(flatten)]
    shape: CalibrationShapeName,
    /// Answers over the windows shown.
    answers: u64,
    /// Answers with a current outcome over them.
    outcomes: u64,
    /// SVG: the reliability diagram (15 equal-width bins) of the outcomes.
    reliability: String,
    /// SVG: the histogram (15 bins) of the answers' top probabilities.
    histogram: String,
    /// SVG per drift figure (`psi`, `em_prior_shift`, `expected_accuracy`, `accuracy`,
    /// `ece_equal_width_15`, `mean_option_mass`) over the windows.
    drift: HashMap<String, String>,
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
    #[serde(flatten)]
    shape: CalibrationShapeName,
    /// Oldest first; the last holds now. A window without answers has null figures.
    /// `window=recent`: one window, from the earliest of the shape's recent answers to
    /// just after the latest.
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
