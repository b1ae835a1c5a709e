//! `GET /v1/calibration/charts`: the figures of `GET /v1/calibration` drawn as SVG by the
//! service ([`crate::draw`], the same code as `systemone eval`'s diagram): per shape, the
//! reliability diagram and the confidence histogram over the windows shown, and each drift
//! figure over those windows. The `/calibration` page shows them; the SVG holds numbers
//! and the shape's names only (configured model, type, layout, class), escaped.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde_json::{json, Map, Value};

use super::route::asked;
use crate::calibration::watch::{charts, figures::Figures, ShapeFigures};
use crate::draw;
use crate::error::ApiError;
use crate::http::auth::Caller;
use crate::http::AppState;

/// The drift figures drawn over time: name, how to read it from a window's figures, and
/// the y axis's top (`None`: the largest value seen, at least 0.1).
type Drift = (&'static str, fn(&Figures) -> Option<f64>, Option<f64>);

const DRIFT: [Drift; 6] = [
    ("psi", |f| f.psi, None),
    ("em_prior_shift", |f| f.em_prior_shift, Some(1.0)),
    ("expected_accuracy", |f| f.expected_accuracy, Some(1.0)),
    ("accuracy", |f| f.accuracy, Some(1.0)),
    ("ece_equal_width_15", |f| f.ece_equal_width_15, None),
    ("mean_option_mass", |f| f.mean_option_mass, Some(1.0)),
];

/// `GET /v1/calibration/charts`.
pub(in crate::http) async fn charts(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let (watch, asked, window) = asked(&state, &caller, query)?;
    let shapes: Vec<Value> = watch
        .windowed(&asked, window, crate::ledger::now_ms())
        .iter()
        .map(shape_charts)
        .collect();
    Ok(Json(json!({
        "object": "calibration.charts",
        "window": window.as_str(),
        "shapes": shapes,
    })))
}

/// One shape's charts over its windows.
pub(in crate::http) fn shape_charts(s: &ShapeFigures) -> Value {
    let windows: Vec<&Figures> = s.windows.iter().map(|w| &w.figures).collect();
    let mut drift = Map::new();
    for (name, read, top) in DRIFT {
        let points: Vec<(i64, Option<f64>)> = s
            .windows
            .iter()
            .map(|w| (w.from_ms, read(&w.figures)))
            .collect();
        let top = top.unwrap_or_else(|| points.iter().filter_map(|(_, v)| *v).fold(0.1, f64::max));
        drift.insert(name.into(), json!(draw::over_time(name, &points, top)));
    }
    json!({
        "model": s.shape.model,
        "type": s.shape.kind,
        "options": s.shape.options,
        "layout": s.shape.layout,
        "class": s.shape.class,
        "answers": windows.iter().map(|f| f.answers).sum::<u64>(),
        "outcomes": windows.iter().map(|f| f.outcomes).sum::<u64>(),
        "reliability": charts::reliability(&windows),
        "histogram": charts::histogram(&windows),
        "drift": drift,
    })
}
