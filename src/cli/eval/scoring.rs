//! Scoring per question family (the question id): the metrics, the table's lines, the
//! report's `families` and the rows the reliability diagram draws.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::data::Scored;
use super::printing::{profile_line, table_line};
use super::EvalArgs;
use crate::calibration::fit::{self, Row};

/// The per-family results: the printed table, the report's `families` and the rows the
/// reliability diagram draws.
pub(super) struct Summary {
    pub(super) table: String,
    pub(super) families: Map<String, Value>,
    pub(super) rows: BTreeMap<String, Vec<Row>>,
}

/// Scores each question family (question id) and writes its table line and report entry.
pub(super) fn summarise(scored: &[(usize, Scored)], args: &EvalArgs) -> Result<Summary, String> {
    let mut families: BTreeMap<String, Vec<&Scored>> = BTreeMap::new();
    for (_, s) in scored {
        families.entry(s.family.clone()).or_default().push(s);
    }
    let mut summary = Summary {
        table: format!(
            "{:<20} {:>6} {:>4} {:>6} {:>7} {:>6} {:>6} {:>7} {:>7} {:>7} {:>6}\n",
            "family",
            "type",
            "n",
            "acc",
            "norm",
            "F1",
            "Brier",
            "ECE15",
            "ECE10w",
            "excess",
            "mass"
        ),
        families: Map::new(),
        rows: BTreeMap::new(),
    };
    let mut profile_lines = String::new();
    for (name, members) in &families {
        let rows: Vec<Row> = members.iter().map(|s| s.answer.row.clone()).collect();
        let m = fit::metrics(&rows, args.seed);
        let kind = members[0].answer.kind.clone();
        let masses: Vec<f64> = members.iter().filter_map(|s| s.option_mass).collect();
        let mass = (!masses.is_empty()).then(|| masses.iter().sum::<f64>() / masses.len() as f64);
        summary.table.push_str(&table_line(name, &kind, &m, mass));
        let mut entry = serde_json::to_value(&m).map_err(|e| e.to_string())?;
        if let Some(obj) = entry.as_object_mut() {
            obj.insert("type".into(), json!(kind));
            obj.insert("mean_option_mass".into(), json!(mass));
            obj.insert(
                "reliability_equal_width_10".into(),
                json!(reliability_json(&rows)),
            );
            if args.profile.is_some() {
                let stats = profile_stats(members);
                profile_lines.push_str(&profile_line(name, &stats, members.len()));
                obj.insert("profile".into(), stats);
            }
        }
        summary.families.insert(name.clone(), entry);
        summary.rows.insert(name.clone(), rows);
    }
    summary.table.push_str(&profile_lines);
    Ok(summary)
}

/// How a profile's prediction sets and automation did on one family.
fn profile_stats(members: &[&Scored]) -> Value {
    let n = members.len().max(1) as f64;
    let covered = members
        .iter()
        .filter(|s| {
            s.answer
                .prediction_set
                .as_ref()
                .is_some_and(|set| set.contains(&s.answer.row.label))
        })
        .count();
    let size: usize = members
        .iter()
        .filter_map(|s| s.answer.prediction_set.as_ref().map(Vec::len))
        .sum();
    let automated: Vec<&&Scored> = members
        .iter()
        .filter(|s| s.answer.automate == Some(true))
        .collect();
    let right = automated
        .iter()
        .filter(|s| s.answer.row.argmax() == s.answer.row.label)
        .count();
    json!({
        "set_coverage": covered as f64 / n,
        "mean_set_size": size as f64 / n,
        "automated": automated.len(),
        "automated_share": automated.len() as f64 / n,
        "automated_accuracy": (!automated.is_empty()).then(|| right as f64 / automated.len() as f64),
    })
}

fn reliability_json(rows: &[Row]) -> Vec<Value> {
    let c: Vec<f64> = rows.iter().map(Row::top).collect();
    let k: Vec<bool> = rows.iter().map(|r| r.argmax() == r.label).collect();
    fit::reliability_bins(&c, &k, 10)
        .iter()
        .map(|b| json!({"lo": b.lo, "hi": b.hi, "count": b.count, "confidence": b.confidence, "accuracy": b.accuracy}))
        .collect()
}
