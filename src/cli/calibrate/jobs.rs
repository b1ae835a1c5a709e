//! Running a job: the old flags read as their subcommand, the rows loaded, the file
//! fitted, written and summed up on one screen.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::args::{FormulaArgs, Job, ProfileArgs};
use super::check::check_formulas;
use super::formula::{calibrate, today_utc};
use super::profile::fit_profile;
use super::rows::{load, Rows};
use super::{CalibrateCommand, DEPRECATED};
use crate::config::Layout;

/// `systemone calibrate`: runs the job, and prints its summary (the old flags first say
/// which subcommand replaces them).
pub fn run_command(command: &CalibrateCommand) -> Result<(), String> {
    let job = match &command.job {
        Some(job) => job.clone(),
        None => {
            eprintln!("{DEPRECATED}");
            command.flags.job().map_err(|e| format!("calibrate: {e}"))?
        }
    };
    let summary = run(&job).map_err(|e| format!("calibrate: {e}"))?;
    print!("{summary}");
    Ok(())
}

/// Runs one job and returns its one-screen summary: the formula (default
/// `calibration/<model>.json`) or one group's profile (default
/// `calibration/profiles/<profile>.json`) fitted and written, the prior fitted (and a state
/// directory seeded), formulas judged, or the watch's figures reported.
pub fn run(job: &Job) -> Result<String, String> {
    match job {
        Job::Prior(args) => crate::cli::prior::run(crate::cli::prior::PriorFit {
            ledger: Some(&args.from_ledger),
            model: &args.model,
            since: args.since.as_deref(),
            seed: args.out.as_deref(),
            tenant: args.tenant.as_deref(),
        }),
        Job::Check(args) => check_formulas(&load(&args.rows)?.groups, &args.formulas),
        Job::Report(args) => super::report::run(args),
        Job::Formula(args) => {
            let rows = load(&args.rows)?;
            let file = calibrate(
                &rows.groups,
                &args.rows.model,
                &rows.file,
                &rows.sha256,
                &today_utc(),
            );
            let name = match args.layout {
                Layout::Compact => format!("calibration/{}.compact.json", args.rows.model),
                _ => format!("calibration/{}.json", args.rows.model),
            };
            write(args, file, name)
        }
        Job::Profile(args) => {
            let rows = load(&args.formula.rows)?;
            let file = profile_file(args, &rows)?;
            write(
                &args.formula,
                file,
                format!("calibration/profiles/{}.json", args.name),
            )
        }
    }
}

/// The profile file for `args.name`: its group (`--group`, or the data's only one) fitted,
/// with the provenance of the rows.
fn profile_file(args: &ProfileArgs, rows: &Rows) -> Result<Value, String> {
    let groups = &rows.groups;
    let group_name = match &args.fit.group {
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
        .ok_or_else(|| format!("no group {group_name} in {}", rows.file))?;
    let provenance = json!({
        "data_file": rows.file,
        "data_sha256": rows.sha256,
        "date": today_utc(),
        "rows": group.rows.len(),
        "method": "temperature (+ centred bias) minimising mean NLL of softmax(ln p / T + b) + (5/n)(ln T)^2 + (2/n)Σb^2 by L-BFGS; conformal cutoff: the ceil((n+1)·coverage)-th smallest 1 − p[label]; automation: top ceil(N·level/20) answers, ties kept, first level whose Binomial(size, ε) CDF at the errors exceeds δ stops the scan",
        "tool": concat!("systemone ", env!("CARGO_PKG_VERSION"), " calibrate --profile"),
    });
    let model = &args.formula.rows.model;
    fit_profile(&args.name, model, &group_name, group, &args.fit, provenance)
}

/// Writes a fitted file (marked `"layout": "compact"` when its rows were) to `--out`, or
/// to `default` when none was given, and returns its summary.
fn write(args: &FormulaArgs, mut file: Value, default: String) -> Result<String, String> {
    if args.layout == Layout::Compact {
        file["layout"] = json!(Layout::Compact.as_str());
    }
    let out: PathBuf = args.out.clone().unwrap_or_else(|| PathBuf::from(default));
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut body = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    body.push('\n');
    std::fs::write(&out, body).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(summary(&out, &file))
}

/// `warning: …` lines for a written file's warnings.
pub(super) fn warning_lines(warnings: &Value) -> String {
    warnings
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|w| format!("  warning: {w}\n"))
        .collect()
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
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::calibration::fit::{self, SplitMix64};
    use crate::cli::calibrate::{CheckArgs, ProfileFit, RowsArgs};

    fn args(data: &Path, model: &str, out: &Path) -> FormulaArgs {
        FormulaArgs {
            rows: RowsArgs {
                data: Some(data.to_path_buf()),
                from_ledger: None,
                since: None,
                model: model.into(),
            },
            out: Some(out.to_path_buf()),
            layout: Layout::Accuracy,
        }
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
        let summary = run(&Job::Formula(args(&data, "toy", &out))).expect("calibrates");
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
        let check = Job::Check(CheckArgs {
            formulas: vec![out.display().to_string(), "glm-5.3-flash".into()],
            rows: args(&data, "toy", &dir.join("unwritten.json")).rows,
        });
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
        let a = Job::Profile(ProfileArgs {
            name: "kind".into(),
            formula: args(&data, "m", &out),
            fit: ProfileFit {
                group: None,
                bias: true,
                coverage: 0.9,
                per_label: false,
                epsilon: 0.1,
                delta: 0.05,
                folds: 5,
                seed: 0,
            },
        });
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
