//! `systemone calibrate`'s jobs as subcommands (`formula`, `profile NAME`, `prior`,
//! `check FORMULA…`), and the old form that picked the job by a flag, kept one release:
//!
//! * each old flag form reads as its subcommand, and runs to the same result (the same
//!   summary, the same file written, byte for byte);
//! * the old form says once on stderr that it is deprecated and which subcommands replace
//!   it; a subcommand says nothing of the kind;
//! * a job refuses another job's flags.

use systemone::cli::calibrate::{run, DEPRECATED};

use crate::support::{self, calibrate_args};

/// 300 noul rows (the shape a profile needs), overconfident: the top option is right
/// about two times in three whatever its probability says.
fn rows() -> String {
    (0..300)
        .map(|i| {
            let p = 0.55 + 0.4 * ((i * 37 % 100) as f64 / 100.0);
            let label = usize::from(i % 3 == 0);
            format!(
                "{{\"question_group\":\"spam\",\"probabilities\":[{p},{}],\"label\":{label},\"type\":\"noul\",\"labels\":[\"no\",\"yes\"]}}\n",
                1.0 - p
            )
        })
        .collect()
}

/// Runs one form (its arguments after `calibrate`; `OUT` stands for a fresh output path)
/// and returns the summary with the output path blanked, and the file it wrote.
fn result(form: &[&str], out: &std::path::Path) -> (String, Option<String>) {
    let out_text = out.display().to_string();
    let args: Vec<&str> = form
        .iter()
        .map(|a| if *a == "OUT" { out_text.as_str() } else { a })
        .collect();
    let summary = run(&calibrate_args(&args)).expect("the job runs");
    let file = std::fs::read_to_string(out).ok();
    (summary.replace(&out_text, "OUT"), file)
}

#[test]
fn every_old_flag_form_runs_as_its_subcommand() {
    let data = support::temp_file("rows.jsonl", &rows());
    let data = data.to_str().expect("utf-8");
    let dir = std::path::Path::new(data).parent().expect("a directory");
    let rows = ["--data", data, "--model", "m"];
    let cases: [(&str, Vec<&str>, Vec<&str>); 4] = [
        (
            "formula",
            vec!["--out", "OUT"],
            vec!["formula", "--out", "OUT"],
        ),
        (
            "formula, compact",
            vec!["--layout", "compact", "--out", "OUT"],
            vec!["formula", "--layout", "compact", "--out", "OUT"],
        ),
        (
            "profile",
            vec![
                "--profile",
                "spam",
                "--folds",
                "3",
                "--per-label",
                "--out",
                "OUT",
            ],
            vec![
                "profile",
                "spam",
                "--folds",
                "3",
                "--per-label",
                "--out",
                "OUT",
            ],
        ),
        (
            "check",
            vec!["--check", "glm-5.3-flash", "--check", "gemma-3-270m"],
            vec!["check", "glm-5.3-flash", "gemma-3-270m"],
        ),
    ];
    for (i, (job, old, new)) in cases.into_iter().enumerate() {
        let old: Vec<&str> = rows.iter().copied().chain(old).collect();
        let new: Vec<&str> = new.into_iter().chain(rows).collect();
        assert_eq!(
            format!("{:?}", calibrate_args(&old)),
            format!("{:?}", calibrate_args(&new)),
            "{job}: the same job"
        );
        let (before, after) = (
            dir.join(format!("old-{i}.json")),
            dir.join(format!("new-{i}.json")),
        );
        let (old_summary, old_file) = result(&old, &before);
        let (new_summary, new_file) = result(&new, &after);
        assert_eq!(old_summary, new_summary, "{job}");
        assert_eq!(old_file, new_file, "{job}: the same file");
        assert_eq!(old_file.is_some(), job != "check", "{job}: {old_summary}");
    }
    // The prior reads a ledger; the forms are the same job.
    let ledger = format!("sqlite:{}", dir.join("ledger.db").display());
    assert_eq!(
        format!(
            "{:?}",
            calibrate_args(&["--prior", "--from-ledger", &ledger, "--model", "m"])
        ),
        format!(
            "{:?}",
            calibrate_args(&["prior", "--from-ledger", &ledger, "--model", "m"])
        ),
    );
}

#[test]
fn the_old_form_says_it_is_deprecated_and_a_subcommand_does_not() {
    let data = support::temp_file("rows.jsonl", &rows());
    let data = data.to_str().expect("utf-8");
    let run = |args: &[&str]| {
        let out = support::binary()
            .arg("calibrate")
            .args(args)
            .output()
            .expect("the binary runs");
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
        (text(out.stdout), text(out.stderr))
    };
    let (old_out, old_err) = run(&["--data", data, "--model", "m", "--check", "gemma-3-270m"]);
    let (new_out, new_err) = run(&["check", "gemma-3-270m", "--data", data, "--model", "m"]);
    assert_eq!(old_out, new_out);
    assert!(old_out.starts_with("group\tn\trows\tformula"), "{old_out}");
    assert_eq!(old_err.matches(DEPRECATED).count(), 1, "{old_err}");
    assert!(
        DEPRECATED.contains("calibrate profile NAME") && DEPRECATED.contains("calibrate check"),
        "names the subcommands"
    );
    assert!(!new_err.contains("deprecated"), "{new_err}");
}

#[test]
fn a_job_refuses_another_jobs_flags() {
    let parse = |args: &[&str]| {
        let mut line = vec!["systemone", "calibrate"];
        line.extend_from_slice(args);
        <systemone::cli::Cli as clap::Parser>::try_parse_from(line).map(|_| ())
    };
    let rows = ["--data", "rows.jsonl", "--model", "m"];
    assert!(parse(&[&["formula"][..], &rows].concat()).is_ok());
    for wrong in [
        &["formula", "--profile", "spam"][..],
        &["formula", "--check", "glm-5.3-flash"],
        &["check", "--out", "x.json", "glm-5.3-flash"],
        &["prior", "--data", "rows.jsonl"],
        &["formula", "--prior"],
    ] {
        assert!(
            parse(&[wrong, &rows].concat()).is_err(),
            "{wrong:?} is refused"
        );
    }
    // Nor do the old flags mix with a subcommand.
    assert!(parse(&[
        "--profile",
        "spam",
        "formula",
        "--data",
        "d",
        "--model",
        "m"
    ])
    .is_err());
}
