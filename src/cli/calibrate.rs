//! `systemone calibrate`: fit a model's temperature formula from labelled raw
//! probabilities and write the calibration file the service reads, or (`--profile`) fit a
//! server-side profile for one question group ([`crate::calibration::profile`]).
//!
//! Input: JSON lines, one answered question each (blank lines skipped):
//! `{"question_group": "spam-noul", "probabilities": [0.93, 0.07], "label": 0,
//!   "type": "noul", "labels": ["no", "yes"]}` —
//! the raw (T = 1) probabilities in option order and the gold option index; `type` and the
//! lowered option `labels` (written by `systemone eval --raw-out`) are needed for a profile
//! only. Every line of a group must have the same option count.
//!
//! Output: `{"model", "formula", "a", "b", "groups": [...], "provenance": {...}}`, with `a`
//! and `b` top-level so [`crate::calibration::Calibration::load`] reads it unchanged; or the
//! profile file [`crate::calibration::profile::Profile::parse`] reads, with its fit report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use clap::Args;

use crate::calibration::fit::{self, GroupFit, Row};
use crate::calibration::profile::QuestionShape;
use crate::calibration::Calibration;
use crate::config::{Layout, LedgerTarget};

/// `systemone calibrate …`
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// JSON lines: `{"question_group": "...", "probabilities": [...], "label": INDEX}`.
    #[arg(long, required_unless_present = "from_ledger")]
    pub data: Option<PathBuf>,
    /// Read the rows from a decision ledger instead (`sqlite:PATH` or `postgres://…`): the
    /// questions `--model` answered that have an outcome, one group per question (what
    /// `systemone ledger export` prints).
    #[arg(long, conflicts_with = "data")]
    pub from_ledger: Option<LedgerTarget>,
    /// With `--from-ledger`: only decisions at or after this instant (Unix milliseconds or
    /// a UTC date YYYY-MM-DD).
    #[arg(long, requires = "from_ledger")]
    pub since: Option<String>,
    /// The model the file is for (also the default output name).
    #[arg(long)]
    pub model: String,
    /// Output file (default `calibration/<model>.json`, or
    /// `calibration/profiles/<profile>.json` with `--profile`); with `--prior`, a new state
    /// directory to seed (nothing is written without it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write a server-side profile of this name for one question group (temperature, bias,
    /// conformal cutoffs, automation threshold) instead of the model's formula.
    #[arg(long)]
    pub profile: Option<String>,
    /// With `--profile`: the question group to fit (default: the only one in the data).
    #[arg(long)]
    pub group: Option<String>,
    /// With `--profile`: fit a centred bias per option beside the temperature (cutoffs and
    /// the threshold are then set on out-of-fold probabilities).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub bias: bool,
    /// With `--profile`: the prediction sets' target coverage.
    #[arg(long, default_value_t = 0.9)]
    pub coverage: f64,
    /// With `--profile`: one conformal cutoff per gold label instead of one for all.
    #[arg(long)]
    pub per_label: bool,
    /// With `--profile`: the error rate ε the automated answers must stay under.
    #[arg(long, default_value_t = 0.1)]
    pub epsilon: f64,
    /// With `--profile`: the chance δ that the bound is wrong.
    #[arg(long, default_value_t = 0.05)]
    pub delta: f64,
    /// With `--profile` and `--bias`: folds of the out-of-fold probabilities.
    #[arg(long, default_value_t = 5)]
    pub folds: usize,
    /// With `--profile`: seed of the fold assignment.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Judge these formulas (calibration files or shipped names; repeatable) on the data
    /// instead of fitting: per option count, NLL and ECE raw and under each. For held-out
    /// rows none of them was fitted on. Writes nothing.
    #[arg(long)]
    pub check: Vec<String>,
    /// The prompt layout the rows were asked in (`systemone eval --layout`). A formula or
    /// profile covers only the layout family it was fitted on: `compact` writes
    /// `"layout": "compact"` and, by default, `calibration/<model>.compact.json`, which the
    /// service uses for that layout alone; `accuracy` and `cost` (the reference's bytes)
    /// write the files as before.
    #[arg(long, value_enum, default_value_t = Layout::Accuracy)]
    pub layout: Layout,
    /// Fit `--model`'s position prior instead, from the ledger's questions read in two or
    /// more orders (needs `--from-ledger`), the way the service learns it; print per shape
    /// the held-out check and what a single read would get. With `--out DIR`, seed
    /// `DIR/prior.redb` for `serve --state-dir DIR` (a new directory).
    #[arg(long, requires = "from_ledger", conflicts_with_all = ["profile", "check"])]
    pub prior: bool,
    /// With `--prior`: fit one tenant's prior (a key's name, or a token caller's name as
    /// the ledger records it) from that caller's records only, and seed it as that
    /// tenant's, the prior a service with keys or tokens corrects its single reads by.
    #[arg(long, requires = "prior")]
    pub tenant: Option<String>,
}

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
    /// The question type (`choice`, `noul`, `score`); needed for a profile.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The lowered option labels; needed for a profile.
    #[serde(default)]
    pub labels: Option<Vec<String>>,
}

/// The rows of one question group.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// In input order.
    pub rows: Vec<Row>,
    /// The question shape, when every line gave the same `type` and `labels`.
    pub shape: Option<QuestionShape>,
}

/// Rows grouped by `question_group` (sorted by name).
pub type Groups = BTreeMap<String, Group>;

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
        let shape = match (raw.kind, raw.labels) {
            (Some(kind), Some(labels)) if labels.len() == row.probs.len() => {
                Some(QuestionShape { kind, labels })
            }
            (Some(_), Some(labels)) => {
                return Err(format!(
                    "line {}: {} labels for {} probabilities",
                    i + 1,
                    labels.len(),
                    row.probs.len()
                ))
            }
            _ => None,
        };
        let group = groups.entry(raw.question_group.clone()).or_default();
        if group.rows.is_empty() {
            group.shape = shape;
        } else if group.shape != shape {
            group.shape = None;
        }
        let rows = &mut group.rows;
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

/// Fits a server-side profile for one group: temperature (and bias), conformal cutoffs and
/// the automation threshold. With a bias, cutoffs and the threshold are set on
/// [`fit::out_of_fold`] probabilities; without, on the in-sample tempered ones. Returns the
/// profile file as JSON, with a fit report judged on the same probabilities.
pub fn fit_profile(
    name: &str,
    model: &str,
    group_name: &str,
    group: &Group,
    args: &CalibrateArgs,
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
fn check_profile_args(group_name: &str, k: usize, args: &CalibrateArgs) -> Result<(), String> {
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
    args: &CalibrateArgs,
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

/// Fewest rows a fit is trusted on: below it the estimates (and the out-of-fold numbers
/// that judge them) swing from one sample to the next.
pub const MIN_TRUSTED_ROWS: usize = 100;

/// The warning for a fit on fewer than [`MIN_TRUSTED_ROWS`] rows, if it is one.
fn too_few_rows(rows: usize) -> Vec<String> {
    if rows >= MIN_TRUSTED_ROWS {
        return Vec::new();
    }
    vec![format!(
        "only {rows} rows: too few to trust this fit (at least {MIN_TRUSTED_ROWS})"
    )]
}

/// `warning: …` lines for a written file's warnings.
fn warning_lines(warnings: &Value) -> String {
    warnings
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|w| format!("  warning: {w}\n"))
        .collect()
}

/// `systemone calibrate`: fits, writes the file and prints the summary.
pub fn run_command(args: &CalibrateArgs) -> Result<(), String> {
    let summary = run(args).map_err(|e| format!("calibrate: {e}"))?;
    print!("{summary}");
    Ok(())
}

/// The rows' JSON lines and where they came from: `--data`'s file, or `--from-ledger`'s
/// labelled decisions (named by the ledger, its URL redacted).
fn read_rows(args: &CalibrateArgs) -> Result<(String, Vec<u8>), String> {
    match (&args.data, &args.from_ledger) {
        (Some(data), _) => {
            let bytes = std::fs::read(data).map_err(|e| format!("{}: {e}", data.display()))?;
            Ok((data.display().to_string(), bytes))
        }
        (None, Some(target)) => {
            let text = super::ledger::rows_jsonl(target, Some(&args.model), args.since.as_deref())?;
            Ok((format!("ledger {target:?}"), text.into_bytes()))
        }
        (None, None) => Err("--data or --from-ledger is needed".into()),
    }
}

/// `systemone calibrate`: reads the rows, fits the model's formula (default
/// `calibration/<model>.json`) or, with `--profile`, one group's profile (default
/// `calibration/profiles/<profile>.json`), writes it and returns a one-screen summary.
pub fn run(args: &CalibrateArgs) -> Result<String, String> {
    if args.prior {
        return super::prior::run(super::prior::PriorFit {
            ledger: args.from_ledger.as_ref(),
            model: &args.model,
            since: args.since.as_deref(),
            seed: args.out.as_deref(),
            tenant: args.tenant.as_deref(),
        });
    }
    let (data_file, bytes) = read_rows(args)?;
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let text = String::from_utf8(bytes).map_err(|e| format!("{data_file}: {e}"))?;
    let groups = parse_groups(&text).map_err(|e| format!("{data_file}: {e}"))?;
    if !args.check.is_empty() {
        return check_formulas(&groups, &args.check);
    }
    let compact = args.layout == Layout::Compact;
    let (mut file, out) = match &args.profile {
        None if compact => (
            calibrate(&groups, &args.model, &data_file, &sha, &today_utc()),
            format!("calibration/{}.compact.json", args.model),
        ),
        None => (
            calibrate(&groups, &args.model, &data_file, &sha, &today_utc()),
            format!("calibration/{}.json", args.model),
        ),
        Some(name) => {
            let group_name = match &args.group {
                Some(g) => g.clone(),
                None if groups.len() == 1 => groups.keys().next().cloned().unwrap_or_default(),
                None => {
                    return Err(format!(
                        "--group is needed: the data has {} groups ({})",
                        groups.len(),
                        groups.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                }
            };
            let group = groups
                .get(&group_name)
                .ok_or_else(|| format!("no group {group_name} in {data_file}"))?;
            let provenance = json!({
                "data_file": data_file,
                "data_sha256": sha,
                "date": today_utc(),
                "rows": group.rows.len(),
                "method": "temperature (+ centred bias) minimising mean NLL of softmax(ln p / T + b) + (5/n)(ln T)^2 + (2/n)Σb^2 by L-BFGS; conformal cutoff: the ceil((n+1)·coverage)-th smallest 1 − p[label]; automation: top ceil(N·level/20) answers, ties kept, first level whose Binomial(size, ε) CDF at the errors exceeds δ stops the scan",
                "tool": concat!("systemone ", env!("CARGO_PKG_VERSION"), " calibrate --profile"),
            });
            (
                fit_profile(name, &args.model, &group_name, group, args, provenance)?,
                format!("calibration/profiles/{name}.json"),
            )
        }
    };
    if compact {
        file["layout"] = json!(Layout::Compact.as_str());
    }
    let out: PathBuf = args.out.clone().unwrap_or_else(|| PathBuf::from(out));
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut body = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    body.push('\n');
    std::fs::write(&out, body).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(summary(&out, &file))
}

/// `--check`: each group's rows judged raw (T = 1) and under each formula at the group's
/// option count (NLL, ECE over 15 equal-size bins), then every group together.
fn check_formulas(groups: &Groups, names: &[String]) -> Result<String, String> {
    let formulas: Vec<(&str, Calibration)> = names
        .iter()
        .map(|n| Calibration::load(n).map(|c| (n.as_str(), c)))
        .collect::<Result<_, _>>()?;
    let mut table = String::from("group\tn\trows\tformula\tT\tNLL\tECE\taccuracy\n");
    let mut totals = vec![(0.0, 0usize); formulas.len() + 1];
    for (name, group) in groups {
        let n = group.rows[0].probs.len();
        let temperatures = std::iter::once(("raw", 1.0))
            .chain(formulas.iter().map(|(f, c)| (*f, c.temperature(n))));
        for (k, (formula, t)) in temperatures.enumerate() {
            let tempered: Vec<Row> = group
                .rows
                .iter()
                .map(|r| Row {
                    probs: fit::apply(&r.probs, t, &[]),
                    label: r.label,
                })
                .collect();
            let (nll, m) = (fit::mean_nll(&group.rows, t), fit::metrics(&tempered, 0));
            totals[k].0 += nll * group.rows.len() as f64;
            totals[k].1 += group.rows.len();
            table.push_str(&format!(
                "{name}\t{n}\t{}\t{formula}\t{t:.3}\t{nll:.4}\t{:.4}\t{:.3}\n",
                group.rows.len(),
                m.ece_equal_size_15,
                m.accuracy
            ));
        }
    }
    let labels = std::iter::once("raw").chain(formulas.iter().map(|(f, _)| *f));
    for ((sum, rows), formula) in totals.iter().zip(labels) {
        table.push_str(&format!(
            "all\t\t{rows}\t{formula}\t\t{:.4}\t\t\n",
            sum / *rows as f64
        ));
    }
    Ok(table)
}

/// A one-screen summary of a written calibration file or profile.
fn summary(out: &Path, file: &Value) -> String {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    if let Some(fit) = file.get("fit") {
        return format!(
            "wrote {}: T = {:.3}, bias {}, cutoffs {}, automation threshold {}\n  on {} rows ({}): NLL {:.4} → {:.4}, ECE {:.4} → {:.4}, set coverage {:.3}, mean set size {:.2}\n",
            out.display(),
            num(&file["temperature"]),
            file["bias"],
            file["conformal"]["cutoffs"],
            file["automation"]["threshold"],
            fit["rows"],
            fit["judged_on"].as_str().unwrap_or("?"),
            num(&fit["nll_raw"]),
            num(&fit["nll_calibrated"]),
            num(&fit["ece_raw"]),
            num(&fit["ece_calibrated"]),
            num(&fit["set_coverage"]),
            num(&fit["mean_set_size"]),
        ) + &warning_lines(&fit["warnings"]);
    }
    let mut summary = format!(
        "wrote {}: ln T = {:.4} + {:.4}·ln n\n",
        out.display(),
        num(&file["a"]),
        num(&file["b"])
    );
    for g in file["groups"].as_array().into_iter().flatten() {
        summary.push_str(&format!(
            "  {}: n={} rows={} T={:.3} ECE {:.4} → {:.4}\n",
            g["group"].as_str().unwrap_or("?"),
            g["options"],
            g["rows"],
            num(&g["temperature"]),
            num(&g["ece_raw"]),
            num(&g["ece_fitted"]),
        ));
        summary.push_str(&warning_lines(&g["warnings"]));
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::fit::SplitMix64;

    fn args(data: &Path, model: &str, out: &Path) -> CalibrateArgs {
        CalibrateArgs {
            data: Some(data.to_path_buf()),
            from_ledger: None,
            since: None,
            model: model.into(),
            out: Some(out.to_path_buf()),
            profile: None,
            group: None,
            bias: true,
            coverage: 0.9,
            per_label: false,
            epsilon: 0.1,
            delta: 0.05,
            folds: 5,
            seed: 0,
            check: Vec::new(),
            layout: Layout::Accuracy,
            prior: false,
            tenant: None,
        }
    }

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
        let summary = run(&args(&data, "toy", &out)).expect("calibrates");
        assert!(summary.contains("choice: n=5"), "{summary}");
        let cal = crate::calibration::Calibration::load(&out.display().to_string()).expect("loads");
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
        // --check judges the written formula (and a shipped one) on the rows, writing nothing.
        let mut check = args(&data, "toy", &dir.join("unwritten.json"));
        check.check = vec![out.display().to_string(), "glm-5.3-flash".into()];
        let table = run(&check).expect("checks");
        assert!(
            !dir.join("unwritten.json").exists(),
            "--check writes nothing"
        );
        let overall = |formula: &str| -> f64 {
            let line = table
                .lines()
                .find(|l| l.starts_with("all\t") && l.split('\t').nth(3) == Some(formula))
                .unwrap_or_else(|| panic!("no overall line for {formula}:\n{table}"));
            line.split('\t')
                .nth(5)
                .and_then(|x| x.parse().ok())
                .expect("NLL")
        };
        let fitted = overall(&out.display().to_string());
        assert!(fitted < overall("raw"), "{table}");
        assert!(table.contains("choice\t5\t1500\tglm-5.3-flash"), "{table}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn profile_recovers_temperature_and_bias_and_loads() {
        // 3 options drawn at T = 2 with bias [0.5, 0, −0.5] on the raw log-probabilities.
        let mut rng = SplitMix64::new(7);
        let mut text = String::new();
        for _ in 0..3000 {
            let z: Vec<f64> = (0..3).map(|_| 3.0 * rng.normal()).collect();
            let p = fit::softmax(&z);
            let label = rng.categorical(&fit::apply(&p, 2.0, &[0.5, 0.0, -0.5]));
            text.push_str(
                &json!({"question_group": "kind", "probabilities": p, "label": label,
                        "type": "choice", "labels": ["spam", "ham", "news"]})
                .to_string(),
            );
            text.push('\n');
        }
        let dir = std::env::temp_dir().join(format!("systemone-prof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let data = dir.join("raw.jsonl");
        std::fs::write(&data, &text).expect("write data");
        let out = dir.join("kind.json");
        let mut a = args(&data, "m", &out);
        a.profile = Some("kind".into());
        let summary = run(&a).expect("fits");
        assert!(summary.contains("out-of-fold"), "{summary}");
        let body = std::fs::read_to_string(&out).expect("read");
        let p = crate::calibration::profile::Profile::parse(&body).expect("the service reads it");
        assert_eq!(&*p.name, "kind");
        assert_eq!(p.question.labels, ["spam", "ham", "news"]);
        assert!((p.temperature / 2.0 - 1.0).abs() < 0.1, "{p:?}");
        for (b, want) in p.bias.iter().zip([0.5, 0.0, -0.5]) {
            assert!((b - want).abs() < 0.15, "{p:?}");
        }
        let file: Value = serde_json::from_str(&body).expect("json");
        let coverage = file["fit"]["set_coverage"].as_f64().expect("coverage");
        assert!((coverage - 0.9).abs() < 0.03, "{coverage}");
        assert!(file["fit"]["ece_calibrated"].as_f64() < file["fit"]["ece_raw"].as_f64());
        // Without type/labels, or with two groups and no --group, it says what is missing.
        std::fs::write(
            &data,
            "{\"question_group\":\"g\",\"probabilities\":[0.5,0.5],\"label\":0}\n",
        )
        .expect("write");
        let err = run(&a).expect_err("no shape");
        assert!(err.contains("\"type\" and \"labels\""), "{err}");
        std::fs::write(
            &data,
            "{\"question_group\":\"g\",\"probabilities\":[0.5,0.5],\"label\":0}\n\
             {\"question_group\":\"h\",\"probabilities\":[0.5,0.5],\"label\":0}\n",
        )
        .expect("write");
        assert!(run(&a).expect_err("two groups").contains("--group"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
