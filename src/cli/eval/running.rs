//! `systemone eval` from top to bottom: read the lines (or the ledger), send them, score
//! them, compare with the prior off when asked, and write the report and diagram.

use std::time::Instant;

use serde_json::{json, Value};

use super::comparing::{compare_prior, Pass};
use super::data::{data_name, opted_out, read_lines, Joined, Scored};
use super::printing::{failure_lines, raw_rows, write};
use super::scoring::{summarise, Summary};
use super::sending::{reads_since, score_all, Target};
use super::svg::reliability_svg;
use super::EvalArgs;
use crate::calibration::fit::Row;
use crate::config::LedgerTarget;

/// What a run found: the JSON report and the printed table.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// The JSON report.
    pub report: Value,
    /// The human-readable table.
    pub table: String,
}

/// `systemone eval`: runs, prints the table and where the report and diagram went.
pub fn run_command(args: &EvalArgs) -> Result<(), String> {
    let outcome = crate::cli::runtime()?
        .block_on(run(args))
        .map_err(|e| format!("eval: {e}"))?;
    print!("{}", outcome.table);
    for (what, path) in [("report", &args.report), ("diagram", &args.diagram)] {
        if let Some(path) = path {
            println!("{what}: {}", path.display());
        }
    }
    Ok(())
}

/// Runs `systemone eval`: sends every line, scores, writes the report, the diagram and
/// (optionally) the raw rows.
pub async fn run(args: &EvalArgs) -> Result<Evaluation, String> {
    if let Some(target) = &args.from_ledger {
        return run_ledger(args, target).await;
    }
    let lines = read_lines(args)?;
    let total = lines.len();
    let target = Target::new(args).await?;
    let opted_out = args.compare_prior.then(|| opted_out(&lines));
    let reads_before = match args.compare_prior {
        true => target.upstream_reads().await,
        false => None,
    };
    let started = Instant::now();
    let (mut scored, failures) = score_all(&target, lines, args).await;
    let seconds = started.elapsed().as_secs_f64();
    let reads = match args.compare_prior {
        true => reads_since(&target, reads_before).await,
        false => None,
    };
    if scored.is_empty() {
        return Err(format!(
            "no answer could be scored; first failure: {}",
            failures.first().map_or("none", String::as_str)
        ));
    }
    // Input order, so raw-out and the report do not depend on arrival order.
    scored.sort_by_key(|(n, _)| *n);
    if let Some(path) = &args.raw_out {
        write(path, &raw_rows(&scored))?;
    }
    let summary = summarise(&scored, args)?;
    let mut table = summary.table.clone();
    let questions = scored.len();
    let prior = match opted_out {
        Some(lines) => {
            let with = Pass {
                scored: &scored,
                families: &summary.families,
                reads,
            };
            Some(compare_prior(&target, lines, args, with).await?)
        }
        None => None,
    };
    table.push_str(&format!(
        "{questions} answers from {total} lines in {seconds:.2}s ({:.2} questions/s), {} failures\n",
        questions as f64 / seconds.max(1e-9),
        failures.len()
    ));
    table.push_str(&failure_lines(&failures));
    let calibration = args.profile.as_deref();
    let mut report = json!({
        "data": data_name(args),
        "url": target.describe(args),
        "temperature": if calibration.is_some() { Value::Null } else { json!(1) },
        "calibration": calibration,
        "lines": total,
        "scored_answers": questions,
        "failures": failures,
        "seconds": seconds,
        "questions_per_second": questions as f64 / seconds.max(1e-9),
        "seed": args.seed,
        "families": summary.families,
    });
    if let Some((value, lines)) = prior {
        report["prior"] = value;
        table.push_str(&lines);
    }
    write_outputs(args, &report, &summary)?;
    Ok(Evaluation { report, table })
}

/// `eval --from-ledger`: scores the recorded answers that have outcomes, as answered.
async fn run_ledger(args: &EvalArgs, target: &LedgerTarget) -> Result<Evaluation, String> {
    let model = args.service.model.name.as_str();
    let rows = crate::cli::ledger::rows(
        target,
        Some(model),
        args.since.as_deref(),
        crate::ledger::rows::Probabilities::Answered,
    )
    .await?;
    if rows.is_empty() {
        return Err(format!(
            "no decision of {model} with an outcome in the ledger"
        ));
    }
    let mut scored = Vec::new();
    for (n, row) in rows.into_iter().enumerate() {
        let labels = (0..row.probabilities.len())
            .map(|i| i.to_string())
            .collect();
        let joined = Joined {
            kind: row.kind,
            labels,
            row: Row::new(row.probabilities, row.label)?,
            prediction_set: None,
            automate: None,
        };
        let family = row.question_group;
        scored.push((
            n,
            Scored {
                family,
                answer: joined,
                option_mass: None,
                corrected: false,
            },
        ));
    }
    let summary = summarise(&scored, args)?;
    let report = json!({
        "data": data_name(args),
        "model": model,
        "scored_answers": scored.len(),
        "seed": args.seed,
        "families": summary.families,
    });
    write_outputs(args, &report, &summary)?;
    let table = format!(
        "{}{} answers with outcomes from the ledger\n",
        summary.table,
        scored.len()
    );
    Ok(Evaluation { report, table })
}

/// Writes the report (`--report`) and the reliability diagram (`--diagram`) when asked.
fn write_outputs(args: &EvalArgs, report: &Value, summary: &Summary) -> Result<(), String> {
    let mut body = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    body.push('\n');
    if let Some(path) = &args.report {
        write(path, &body)?;
    }
    if let Some(path) = &args.diagram {
        write(path, &reliability_svg(&summary.rows, 10))?;
    }
    Ok(())
}
