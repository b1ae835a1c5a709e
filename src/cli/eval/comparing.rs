//! `--compare-prior`: the lines sent again with `"prior_correction": false`, and both runs
//! side by side.

use serde_json::{json, Map, Value};

use super::data::{Line, Scored};
use super::printing::prior_table;
use super::scoring::summarise;
use super::sending::{reads_since, score_all, Target};
use super::EvalArgs;

/// One run of the lines, for the comparison.
pub(super) struct Pass<'a> {
    pub(super) scored: &'a [(usize, Scored)],
    pub(super) families: &'a Map<String, Value>,
    pub(super) reads: Option<f64>,
}

impl Pass<'_> {
    fn report(&self) -> Value {
        let answers = self.scored.len().max(1) as f64;
        json!({
            "answers": self.scored.len(),
            "corrected_answers": self.scored.iter().filter(|(_, s)| s.corrected).count(),
            "reads": self.reads,
            "reads_per_answer": self.reads.map(|r| r / answers),
            "families": self.families,
        })
    }
}

/// `--compare-prior`: the lines again without the position prior, and both runs side by
/// side (the report's `prior`, and the table's lines).
pub(super) async fn compare_prior(
    target: &Target,
    lines: Vec<Line>,
    args: &EvalArgs,
    with: Pass<'_>,
) -> Result<(Value, String), String> {
    let before = target.upstream_reads().await;
    let (mut scored, failures) = score_all(target, lines, args).await;
    let reads = reads_since(target, before).await;
    scored.sort_by_key(|(n, _)| *n);
    let summary = summarise(&scored, args)?;
    let without = Pass {
        scored: &scored,
        families: &summary.families,
        reads,
    };
    let (with, without) = (with.report(), without.report());
    let table = prior_table(&with, &without, failures.len());
    let report = json!({"with": with, "without": without, "without_failures": failures});
    Ok((report, table))
}
