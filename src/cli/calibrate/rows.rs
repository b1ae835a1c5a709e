//! The labelled rows a job reads: `--data`'s JSON lines or `--from-ledger`'s labelled
//! decisions, grouped by `question_group`.

use std::collections::BTreeMap;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::args::RowsArgs;
use crate::calibration::fit::Row;
use crate::calibration::profile::QuestionShape;

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

/// The rows read, grouped, and where they came from.
pub(super) struct Rows {
    /// `--data`'s file, or the ledger (its URL redacted).
    pub(super) file: String,
    /// The SHA-256 of the rows' bytes, for the provenance.
    pub(super) sha256: String,
    /// The rows by group.
    pub(super) groups: Groups,
}

/// Reads, hashes and groups the rows.
pub(super) fn load(args: &RowsArgs) -> Result<Rows, String> {
    let (file, bytes) = read_rows(args)?;
    let sha256: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let text = String::from_utf8(bytes).map_err(|e| format!("{file}: {e}"))?;
    let groups = parse_groups(&text).map_err(|e| format!("{file}: {e}"))?;
    Ok(Rows {
        file,
        sha256,
        groups,
    })
}

/// The rows' JSON lines and where they came from: `--data`'s file, or `--from-ledger`'s
/// labelled decisions (named by the ledger, its URL redacted).
fn read_rows(args: &RowsArgs) -> Result<(String, Vec<u8>), String> {
    match (&args.data, &args.from_ledger) {
        (Some(data), _) => {
            let bytes = std::fs::read(data).map_err(|e| format!("{}: {e}", data.display()))?;
            Ok((data.display().to_string(), bytes))
        }
        (None, Some(target)) => {
            let text =
                crate::cli::ledger::rows_jsonl(target, Some(&args.model), args.since.as_deref())?;
            Ok((format!("ledger {target:?}"), text.into_bytes()))
        }
        (None, None) => Err("--data or --from-ledger is needed".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
