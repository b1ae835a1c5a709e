//! `systemone calibrate`: fit a model's temperature formula from labelled raw
//! probabilities and write the calibration file the service reads.
//!
//! Input: JSON lines, one answered question each (blank lines skipped):
//! `{"question_group": "spam-noul", "probabilities": [0.93, 0.07], "label": 0}` —
//! the raw (T = 1) probabilities in option order and the gold option index. Every line of a
//! group must have the same option count.
//!
//! Output: `{"model", "formula", "a", "b", "groups": [...], "provenance": {...}}`, with `a`
//! and `b` top-level so [`crate::calibrate::Calibration::load`] reads it unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::fit::{self, GroupFit, Row};

/// One input line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLine {
    /// Rows with the same group share one fitted temperature.
    pub question_group: String,
    /// Raw probabilities in option order.
    pub probabilities: Vec<f64>,
    /// Gold option index.
    pub label: usize,
}

/// Rows grouped by `question_group` (sorted by name).
pub type Groups = BTreeMap<String, Vec<Row>>;

/// Parses the JSONL text into groups; errors name the 1-based line.
pub fn parse_groups(text: &str) -> Result<Groups, String> {
    let mut groups = Groups::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let raw: RawLine =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        let row =
            Row::new(raw.probabilities, raw.label).map_err(|e| format!("line {}: {e}", i + 1))?;
        let rows = groups.entry(raw.question_group.clone()).or_default();
        if let Some(first) = rows.first() {
            if first.probs.len() != row.probs.len() {
                return Err(format!(
                    "line {}: group {} has {} options, this line {}",
                    i + 1,
                    raw.question_group,
                    first.probs.len(),
                    row.probs.len()
                ));
            }
        }
        rows.push(row);
    }
    if groups.is_empty() {
        return Err("no rows".into());
    }
    Ok(groups)
}

/// Fits every group and the formula; returns the calibration file as JSON.
/// `data_sha256` and `date` go into the provenance as given.
pub fn calibrate(
    groups: &Groups,
    model: &str,
    data_file: &str,
    data_sha256: &str,
    date: &str,
) -> Value {
    let mut fits = Vec::new();
    let mut group_json = Vec::new();
    for (name, rows) in groups {
        let t = fit::fit_temperature(rows);
        let options = rows[0].probs.len();
        fits.push(GroupFit {
            options,
            rows: rows.len(),
            temperature: t,
        });
        group_json.push((name, rows, options, t));
    }
    let (a, b) = fit::fit_formula(&fits);
    let formula = crate::calibrate::Calibration { a, b };
    let groups_out: Vec<Value> = group_json
        .into_iter()
        .map(|(name, rows, options, t)| {
            let tf = formula.temperature(options);
            let tempered = |t: f64| -> Vec<Row> {
                rows.iter()
                    .map(|r| Row {
                        probs: fit::apply(&r.probs, t, &[]),
                        label: r.label,
                    })
                    .collect()
            };
            json!({
                "group": name,
                "options": options,
                "rows": rows.len(),
                "temperature": t,
                "formula_temperature": tf,
                "nll_raw": fit::mean_nll(rows, 1.0),
                "nll_fitted": fit::mean_nll(rows, t),
                "ece_raw": fit::metrics(rows, 0).ece_equal_size_15,
                "ece_fitted": fit::metrics(&tempered(t), 0).ece_equal_size_15,
                "ece_formula": fit::metrics(&tempered(tf), 0).ece_equal_size_15,
            })
        })
        .collect();
    let rows: usize = groups.values().map(Vec::len).sum();
    json!({
        "model": model,
        "formula": "ln T = a + b * ln(max(n, 2))",
        "a": a,
        "b": b,
        "groups": groups_out,
        "provenance": {
            "data_file": data_file,
            "data_sha256": data_sha256,
            "date": date,
            "rows": rows,
            "groups": groups.len(),
            "method": "per group: golden-section search (60 iterations) on ln T in [ln 0.05, ln 50] minimising mean NLL of softmax(ln p / T) + (5/n)(ln T)^2; formula: least squares of ln T on ln max(n, 2) weighted by group rows (b = 0 when all groups share n); ECE: 15 equal-size bins, on the fitting data itself",
            "tool": concat!("systemone ", env!("CARGO_PKG_VERSION"), " calibrate"),
        }
    })
}

/// Today's UTC date as `YYYY-MM-DD`.
pub fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date((secs / 86_400) as i64)
}

/// Days since 1970-01-01 → `YYYY-MM-DD` (Hinnant's `civil_from_days`).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `systemone calibrate --data FILE --model NAME [--out FILE]`: reads, fits, writes
/// (default `calibration/<model>.json`) and returns a one-screen summary.
pub fn run(data: &Path, model: &str, out: Option<&Path>) -> Result<String, String> {
    let bytes = std::fs::read(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let text = String::from_utf8(bytes).map_err(|e| format!("{}: {e}", data.display()))?;
    let groups = parse_groups(&text).map_err(|e| format!("{}: {e}", data.display()))?;
    let file = calibrate(
        &groups,
        model,
        &data.display().to_string(),
        &sha,
        &today_utc(),
    );
    let out: PathBuf = out.map_or_else(
        || PathBuf::from(format!("calibration/{model}.json")),
        Path::to_path_buf,
    );
    let mut body = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    body.push('\n');
    std::fs::write(&out, body).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut summary = format!(
        "wrote {}: ln T = {:.4} + {:.4}·ln n\n",
        out.display(),
        file["a"].as_f64().unwrap_or(f64::NAN),
        file["b"].as_f64().unwrap_or(f64::NAN)
    );
    for g in file["groups"].as_array().into_iter().flatten() {
        summary.push_str(&format!(
            "  {}: n={} rows={} T={:.3} ECE {:.4} → {:.4}\n",
            g["group"].as_str().unwrap_or("?"),
            g["options"],
            g["rows"],
            g["temperature"].as_f64().unwrap_or(f64::NAN),
            g["ece_raw"].as_f64().unwrap_or(f64::NAN),
            g["ece_fitted"].as_f64().unwrap_or(f64::NAN),
        ));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::SplitMix64;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(19_723), "2024-01-01");
    }

    #[test]
    fn bad_lines_name_their_line() {
        let err =
            parse_groups("\n{\"question_group\":\"g\",\"probabilities\":[0.5,0.5],\"label\":2}")
                .expect_err("label out of range");
        assert!(err.starts_with("line 2:"), "{err}");
        let err = parse_groups(
            "{\"question_group\":\"g\",\"probabilities\":[0.5,0.5],\"label\":0}\n\
             {\"question_group\":\"g\",\"probabilities\":[0.2,0.3,0.5],\"label\":0}",
        )
        .expect_err("mixed option counts");
        assert!(err.contains("has 2 options"), "{err}");
        assert!(parse_groups("").is_err());
        assert!(parse_groups(
            "{\"question_group\":\"g\",\"probabilities\":[1],\"label\":0,\"x\":1}"
        )
        .is_err());
    }

    #[test]
    fn run_writes_a_file_the_service_loads() {
        // Two groups (2 and 5 options), overconfident by T = 2 and T = 1.6.
        let mut rng = SplitMix64::new(42);
        let mut text = String::new();
        for (group, k, t) in [("noul", 2usize, 2.0f64), ("choice", 5, 1.6)] {
            for _ in 0..1500 {
                let z: Vec<f64> = (0..k).map(|_| 3.0 * rng.normal()).collect();
                let p = fit::softmax(&z);
                let label = rng.categorical(&fit::apply(&p, t, &[]));
                text.push_str(
                    &json!({"question_group": group, "probabilities": p, "label": label})
                        .to_string(),
                );
                text.push('\n');
            }
        }
        let dir = std::env::temp_dir().join(format!("systemone-cal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let data = dir.join("raw.jsonl");
        std::fs::write(&data, &text).expect("write data");
        let out = dir.join("toy.json");
        let summary = run(&data, "toy", Some(&out)).expect("calibrates");
        assert!(summary.contains("choice: n=5"), "{summary}");
        let cal = crate::calibrate::Calibration::load(&out.display().to_string()).expect("loads");
        assert!((cal.temperature(2) / 2.0 - 1.0).abs() < 0.1, "{cal:?}");
        assert!((cal.temperature(5) / 1.6 - 1.0).abs() < 0.1, "{cal:?}");
        let file: Value =
            serde_json::from_str(&std::fs::read_to_string(&out).expect("read")).expect("json");
        let prov = &file["provenance"];
        assert_eq!(prov["rows"], 3000);
        assert_eq!(prov["groups"], 2);
        let sha: String = Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(prov["data_sha256"], sha.as_str());
        assert_eq!(prov["date"].as_str().map(str::len), Some(10));
        for g in file["groups"].as_array().expect("groups") {
            assert!(g["ece_fitted"].as_f64() < g["ece_raw"].as_f64(), "{g}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
