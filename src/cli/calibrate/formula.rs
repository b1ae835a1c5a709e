//! `calibrate formula`: a temperature fitted per question group, and the formula (ln T
//! linear in ln n) fitted through them, written as the calibration file the service reads.
//!
//! Output: `{"model", "formula", "a", "b", "groups": [...], "provenance": {...}}`, with `a`
//! and `b` top-level so [`crate::calibration::Calibration::load`] reads it unchanged.

use serde_json::{json, Value};

use super::rows::{Group, Groups};
use crate::calibration::fit::{self, GroupFit, Row};
use crate::calibration::Calibration;

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
    for (name, Group { rows, .. }) in groups {
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
    let formula = Calibration { a, b };
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
                "warnings": too_few_rows(rows.len()),
            })
        })
        .collect();
    let rows: usize = groups.values().map(|g| g.rows.len()).sum();
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

/// Days since 1970-01-01 → `YYYY-MM-DD` (the usage records' dates, [`crate::days::date_of`]).
fn civil_date(days: i64) -> String {
    crate::days::date_of(u64::try_from(days).unwrap_or(0))
}

/// Fewest rows a fit is trusted on: below it the estimates (and the out-of-fold numbers
/// that judge them) swing from one sample to the next.
pub const MIN_TRUSTED_ROWS: usize = 100;

/// The warning for a fit on fewer than [`MIN_TRUSTED_ROWS`] rows, if it is one.
pub(super) fn too_few_rows(rows: usize) -> Vec<String> {
    if rows >= MIN_TRUSTED_ROWS {
        return Vec::new();
    }
    vec![format!(
        "only {rows} rows: too few to trust this fit (at least {MIN_TRUSTED_ROWS})"
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(19_723), "2024-01-01");
    }
}
