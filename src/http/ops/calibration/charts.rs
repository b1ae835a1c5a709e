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
use crate::calibration::watch::{figures::Figures, ShapeFigures};
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
    let (watch, asked, span) = asked(&state, &caller, query)?;
    let shapes: Vec<Value> = watch
        .figures(&asked, span, crate::ledger::now_ms())
        .iter()
        .map(shape_charts)
        .collect();
    Ok(Json(json!({
        "object": "calibration.charts",
        "window": span.as_str(),
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
        "reliability": reliability(&windows),
        "histogram": histogram(&windows),
        "drift": drift,
    })
}

/// The reliability diagram of every window's outcomes together (bins add up: count-weighted
/// means).
fn reliability(windows: &[&Figures]) -> String {
    let bins = windows.first().map_or(0, |f| f.reliability.len());
    let bars: Vec<draw::Bar> = (0..bins)
        .map(|i| {
            let mut bar = draw::Bar {
                lo: 0.0,
                count: 0,
                confidence: 0.0,
                accuracy: 0.0,
            };
            for b in windows.iter().filter_map(|f| f.reliability.get(i)) {
                bar.lo = b.lo;
                let n = b.count as f64;
                bar.confidence += b.confidence.unwrap_or(0.0) * n;
                bar.accuracy += b.accuracy.unwrap_or(0.0) * n;
                bar.count += b.count;
            }
            if bar.count > 0 {
                bar.confidence /= bar.count as f64;
                bar.accuracy /= bar.count as f64;
            }
            bar
        })
        .collect();
    let points: Vec<(f64, f64)> = bars
        .iter()
        .filter(|b| b.count > 0)
        .map(|b| (b.confidence, b.accuracy))
        .collect();
    let n = bars.iter().map(|b| b.count as usize).sum();
    let line = draw::Line {
        name: "answers with an outcome".into(),
        points,
        n,
    };
    draw::reliability(bins, &bars, &[line])
}

/// Every window's answers' top probabilities together.
fn histogram(windows: &[&Figures]) -> String {
    let bins = windows.first().map_or(0, |f| f.confidence_histogram.len());
    let counts: Vec<u64> = (0..bins)
        .map(|i| {
            windows
                .iter()
                .filter_map(|f| f.confidence_histogram.get(i))
                .sum()
        })
        .collect();
    draw::histogram("Confidence histogram", &counts)
}
