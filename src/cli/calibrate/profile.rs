//! `calibrate profile`: a server-side profile for one question group (temperature and
//! bias, conformal cutoffs, the automation threshold), written as the file
//! [`crate::calibration::profile::Profile::parse`] reads, with its fit report.

use serde_json::{json, Value};

use super::args::ProfileFit;
use super::formula::too_few_rows;
use super::rows::Group;
use crate::calibration::fit::{self, Row};

/// Fits a server-side profile for one group: temperature (and bias), conformal cutoffs and
/// the automation threshold. With a bias, cutoffs and the threshold are set on
/// [`fit::out_of_fold`] probabilities; without, on the in-sample tempered ones. Returns the
/// profile file as JSON, with a fit report judged on the same probabilities.
pub fn fit_profile(
    name: &str,
    model: &str,
    group_name: &str,
    group: &Group,
    args: &ProfileFit,
    provenance: Value,
) -> Result<Value, String> {
    let shape = group.shape.clone().ok_or_else(|| {
        format!(
            "group {group_name}: a profile needs the same \"type\" and \"labels\" on every row (systemone eval --raw-out writes them)"
        )
    })?;
    let rows = &group.rows;
    let k = shape.labels.len();
    check_profile_args(group_name, k, args)?;
    let (fitted, judged, judged_on) = fit_and_judge(rows, k, args)?;
    let cutoffs = if args.per_label {
        fit::conformal_cutoffs_per_label(&judged, k, args.coverage)
    } else {
        let scores: Vec<f64> = judged.iter().map(fit::score).collect();
        vec![fit::conformal_cutoff(&scores, args.coverage)]
    };
    let answers: Vec<(f64, bool)> = judged
        .iter()
        .map(|r| (r.top(), r.argmax() == r.label))
        .collect();
    let automation = fit::automation_threshold(&answers, args.epsilon, args.delta);
    Ok(json!({
        "name": name,
        "model": model,
        "question": {"type": shape.kind, "labels": shape.labels},
        "temperature": fitted.temperature,
        "bias": fitted.bias,
        "conformal": {"coverage": args.coverage, "per_label": args.per_label, "cutoffs": cutoffs},
        "automation": {
            "epsilon": args.epsilon,
            "delta": args.delta,
            "threshold": automation.as_ref().map(|a| a.threshold),
            "level": automation.as_ref().map(|a| a.level),
            "answers": automation.as_ref().map(|a| a.answers),
            "errors": automation.as_ref().map(|a| a.errors),
        },
        "fit": fit_report(group_name, rows, &judged, judged_on, &cutoffs, args.seed),
        "provenance": provenance,
    }))
}

/// The profile flags a fit needs in range, and at least two options.
fn check_profile_args(group_name: &str, k: usize, args: &ProfileFit) -> Result<(), String> {
    if k < 2 {
        return Err(format!(
            "group {group_name}: a profile needs at least 2 options, got {k}"
        ));
    }
    if !(args.coverage > 0.0 && args.coverage < 1.0) {
        return Err(format!(
            "--coverage must be in (0, 1), got {}",
            args.coverage
        ));
    }
    if !(args.epsilon > 0.0 && args.epsilon < 1.0 && args.delta > 0.0 && args.delta < 1.0) {
        return Err(format!(
            "--epsilon and --delta must be in (0, 1), got {} and {}",
            args.epsilon, args.delta
        ));
    }
    Ok(())
}

/// The fitted temperature (and bias), the recalibrated rows the cutoffs and threshold are
/// set on, and what those rows are: out-of-fold with a bias (a bias fitted in-sample
/// would judge itself), in-sample tempered without.
fn fit_and_judge(
    rows: &[Row],
    k: usize,
    args: &ProfileFit,
) -> Result<(fit::TemperatureBias, Vec<Row>, String), String> {
    if args.bias {
        let fitted = fit::fit_temperature_bias(rows)?;
        let judged = fit::out_of_fold(rows, args.folds, args.seed)?;
        let on = format!("{}-fold out-of-fold probabilities", args.folds.max(2));
        return Ok((fitted, judged, on));
    }
    let t = fit::fit_temperature(rows);
    let judged = rows
        .iter()
        .map(|r| Row {
            probs: fit::apply(&r.probs, t, &[]),
            label: r.label,
        })
        .collect();
    let fitted = fit::TemperatureBias {
        temperature: t,
        bias: vec![0.0; k],
    };
    Ok((
        fitted,
        judged,
        "in-sample tempered probabilities".to_string(),
    ))
}

/// The profile's `fit` section: raw vs calibrated NLL, accuracy and ECE, and the
/// prediction sets' coverage and size, judged on `judged`.
fn fit_report(
    group_name: &str,
    rows: &[Row],
    judged: &[Row],
    judged_on: String,
    cutoffs: &[f64],
    seed: u64,
) -> Value {
    let sets: Vec<Vec<usize>> = judged
        .iter()
        .map(|r| fit::prediction_set(&r.probs, cutoffs))
        .collect();
    let n = rows.len() as f64;
    let covered = judged
        .iter()
        .zip(&sets)
        .filter(|(r, s)| s.contains(&r.label))
        .count();
    let raw = fit::metrics(rows, seed);
    let after = fit::metrics(judged, seed);
    let (nll_raw, nll_calibrated) = (fit::mean_nll(rows, 1.0), fit::mean_nll(judged, 1.0));
    let mut warnings = too_few_rows(rows.len());
    if after.accuracy < raw.accuracy {
        warnings.push(format!(
            "the fit lowers {judged_on} accuracy from {:.3} to {:.3}: do not trust it",
            raw.accuracy, after.accuracy
        ));
    }
    if nll_calibrated > nll_raw {
        warnings.push(format!(
            "the fit raises {judged_on} NLL from {nll_raw:.4} to {nll_calibrated:.4}: do not trust it"
        ));
    }
    json!({
        "group": group_name,
        "rows": rows.len(),
        "judged_on": judged_on,
        "nll_raw": nll_raw,
        "nll_calibrated": nll_calibrated,
        "accuracy_raw": raw.accuracy,
        "accuracy_calibrated": after.accuracy,
        "ece_raw": raw.ece_equal_size_15,
        "ece_calibrated": after.ece_equal_size_15,
        "set_coverage": covered as f64 / n,
        "mean_set_size": sets.iter().map(Vec::len).sum::<usize>() as f64 / n,
        "warnings": warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::calibrate::jobs::warning_lines;
    use crate::cli::calibrate::MIN_TRUSTED_ROWS;

    #[test]
    fn a_fit_on_few_rows_or_one_that_hurts_out_of_fold_says_so() {
        let row = |p: f64| Row {
            probs: vec![p, 1.0 - p],
            label: 0,
        };
        let raw: Vec<Row> = (0..20).map(|_| row(0.8)).collect();
        let judged: Vec<Row> = (0..20).map(|_| row(0.4)).collect();
        let report = fit_report("g", &raw, &judged, "5-fold out-of-fold".into(), &[0.5], 0);
        let warnings: Vec<&str> = report["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            warnings,
            [
                "only 20 rows: too few to trust this fit (at least 100)",
                "the fit lowers 5-fold out-of-fold accuracy from 1.000 to 0.000: do not trust it",
                "the fit raises 5-fold out-of-fold NLL from 0.2231 to 0.9163: do not trust it",
            ]
        );
        assert!(warning_lines(&report["warnings"]).starts_with("  warning: only 20 rows"));
        let fine: Vec<Row> = (0..MIN_TRUSTED_ROWS).map(|_| row(0.8)).collect();
        let report = fit_report("g", &fine, &fine, "in-sample".into(), &[0.5], 0);
        assert_eq!(report["warnings"], json!([]), "nothing to warn of");
    }
}
