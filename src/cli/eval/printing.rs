//! What `eval` prints and writes besides the report: the table's lines, the failures shown,
//! `--compare-prior`'s side-by-side lines and `--raw-out`'s rows.

use std::path::Path;

use serde_json::{json, Value};

use super::data::Scored;
use crate::calibration::fit;

/// One family's line of the printed table.
pub(super) fn table_line(name: &str, kind: &str, m: &fit::Metrics, mass: Option<f64>) -> String {
    format!(
        "{:<20} {:>6} {:>4} {:>6.3} {:>7} {:>6.3} {:>6.3} {:>7.4} {:>7.4} {:>7.4} {:>6}\n",
        name,
        kind,
        m.n,
        m.accuracy,
        m.normalised_accuracy
            .map_or("-".into(), |v| format!("{v:.3}")),
        m.macro_f1,
        m.brier,
        m.ece_equal_size_15,
        m.ece_equal_width_10,
        m.excess_ece,
        mass.map_or("-".into(), |v| format!("{v:.3}")),
    )
}

/// One family's profile line: set coverage and size, automated share and accuracy.
pub(super) fn profile_line(name: &str, stats: &Value, answers: usize) -> String {
    format!(
        "{name}: prediction sets cover {:.3} (mean size {:.2}); {} of {} automated ({:.3}), accuracy among them {}\n",
        stats["set_coverage"].as_f64().unwrap_or(f64::NAN),
        stats["mean_set_size"].as_f64().unwrap_or(f64::NAN),
        stats["automated"],
        answers,
        stats["automated_share"].as_f64().unwrap_or(f64::NAN),
        stats["automated_accuracy"].as_f64().map_or("-".into(), |v| format!("{v:.3}")),
    )
}

/// The first few failures, so a run that lost lines says why without opening the report.
pub(super) fn failure_lines(failures: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut out: String = failures
        .iter()
        .take(SHOWN)
        .map(|f| format!("  failed: {f}\n"))
        .collect();
    if failures.len() > SHOWN {
        out.push_str(&format!(
            "  … and {} more (all in --report)\n",
            failures.len() - SHOWN
        ));
    }
    out
}

/// The side-by-side lines: per family accuracy and both ECEs with / without, then the
/// answers corrected and the reads per answer of each run.
pub(super) fn prior_table(with: &Value, without: &Value, failures: usize) -> String {
    let mut out = format!(
        "position prior, with / without (\"prior_correction\": false):\n{:<20} {:>13} {:>15} {:>15}\n",
        "family", "acc", "ECE15", "ECE10w"
    );
    let pair = |f: &str, key: &str| {
        let get = |v: &Value| v["families"][f][key].as_f64().unwrap_or(f64::NAN);
        format!("{:.3} / {:.3}", get(with), get(without))
    };
    for family in with["families"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
    {
        out.push_str(&format!(
            "{:<20} {:>13} {:>15} {:>15}\n",
            family,
            pair(family, "accuracy"),
            pair(family, "ece_equal_size_15"),
            pair(family, "ece_equal_width_10")
        ));
    }
    let reads = |v: &Value| {
        v["reads_per_answer"]
            .as_f64()
            .map_or("-".into(), |r| format!("{r:.3}"))
    };
    out.push_str(&format!(
        "{} of {} answers corrected; reads per answer {} / {}; {failures} failures without\n",
        with["corrected_answers"],
        with["answers"],
        reads(with),
        reads(without)
    ));
    out
}

/// `--raw-out`: one JSON line per scored answer, the input of `systemone calibrate`.
pub(super) fn raw_rows(scored: &[(usize, Scored)]) -> String {
    let mut out = String::new();
    for (_, s) in scored {
        let a = &s.answer;
        out.push_str(
            &json!({"question_group": s.family, "probabilities": a.row.probs, "label": a.row.label, "type": a.kind, "labels": a.labels})
                .to_string(),
        );
        out.push('\n');
    }
    out
}

pub(super) fn write(path: &Path, body: &str) -> Result<(), String> {
    std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))
}
