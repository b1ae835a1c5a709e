//! The labelled lines of `--data` (a request body and its gold answers), and an answer
//! joined with its gold label.

use serde_json::{json, Map, Value};

use super::EvalArgs;
use crate::calibration::fit::Row;

/// One input line: its number, the request body and the gold answers.
pub(super) type Line = (usize, (Value, Map<String, Value>));

/// One scored answer.
#[derive(Debug, Clone)]
pub(super) struct Scored {
    pub(super) family: String,
    pub(super) answer: Joined,
    pub(super) option_mass: Option<f64>,
    /// The answer said the position prior was taken out (`prior_correction`).
    pub(super) corrected: bool,
}

/// Splits a labelled line into the request body and its gold map. The body asks for raw
/// probabilities (`temperature` 1), or for the profile `calibration` when one is given.
pub fn split_line(
    line: &str,
    calibration: Option<&str>,
) -> Result<(Value, Map<String, Value>), String> {
    let mut v: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let obj = v.as_object_mut().ok_or("not a JSON object")?;
    let gold = match obj.remove("gold") {
        Some(Value::Object(m)) => m,
        Some(_) => return Err("\"gold\" must be an object".into()),
        None => return Err("no \"gold\"".into()),
    };
    let questions = obj
        .get("questions")
        .and_then(Value::as_object)
        .ok_or("no \"questions\" object")?;
    if let Some(id) = gold.keys().find(|id| !questions.contains_key(*id)) {
        return Err(format!("gold for unknown question {id}"));
    }
    obj.remove("temperature");
    obj.remove("calibration");
    match calibration {
        None => obj.insert("temperature".into(), json!(1)),
        Some(name) => obj.insert("calibration".into(), json!(name)),
    };
    Ok((v, gold))
}

/// An answer joined with its gold label.
#[derive(Debug, Clone, PartialEq)]
pub struct Joined {
    /// `choice`, `noul` or `score`.
    pub kind: String,
    /// The lowered option labels (`no`/`yes`, the choice labels, `level_i`).
    pub labels: Vec<String>,
    /// Probabilities in option order and the gold index.
    pub row: Row,
    /// The profile's prediction set as option indexes (profile answers only).
    pub prediction_set: Option<Vec<usize>>,
    /// The profile's automation flag (profile answers only).
    pub automate: Option<bool>,
}

/// Joins an answer with its gold. Without `calibration` the answer must be raw (T = 1);
/// with it, the answer must carry that profile (an uncovered question is refused: its
/// probabilities were tempered by the default formula, which is neither being measured).
pub fn join(answer: &Value, gold: &Value, calibration: Option<&str>) -> Result<Joined, String> {
    let kind = answer["type"].as_str().ok_or("answer without type")?;
    match calibration {
        None => {
            if let Some(t) = answer["temperature"].as_f64() {
                if t != 1.0 {
                    return Err(format!("the service applied temperature {t}, not 1"));
                }
            }
        }
        Some(name) => {
            if answer["calibration"].as_str() != Some(name) {
                return Err(format!("the answer is not covered by profile {name}"));
            }
        }
    }
    let (labels, probs, label): (Vec<String>, Vec<f64>, usize) = match kind {
        "noul" => {
            let p = answer["noul"].as_f64().ok_or("noul answer without noul")?;
            let g = gold.as_bool().ok_or("noul gold must be true or false")?;
            (
                vec!["no".into(), "yes".into()],
                vec![1.0 - p, p],
                usize::from(g),
            )
        }
        "choice" | "score" => {
            let pairs = answer["probabilities"]
                .as_object()
                .ok_or("answer without probabilities")?;
            let probs: Vec<f64> = pairs
                .values()
                .map(|v| v.as_f64().ok_or("probability is not a number"))
                .collect::<Result<_, _>>()?;
            let (labels, label) = if kind == "choice" {
                let g = gold.as_str().ok_or("choice gold must be a label")?;
                let label = pairs
                    .keys()
                    .position(|k| k == g)
                    .ok_or_else(|| format!("gold label {g:?} is not an option"))?;
                (pairs.keys().cloned().collect(), label)
            } else {
                let labels = (0..probs.len()).map(|i| format!("level_{i}")).collect();
                (
                    labels,
                    gold.as_u64().ok_or("score gold must be a level index")? as usize,
                )
            };
            (labels, probs, label)
        }
        other => return Err(format!("unknown answer type {other}")),
    };
    let prediction_set = match answer.get("prediction_set") {
        None => None,
        Some(set) => Some(
            set.as_array()
                .ok_or("prediction_set is not an array")?
                .iter()
                .map(|m| set_index(kind, &labels, m))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    Ok(Joined {
        kind: kind.to_string(),
        row: Row::new(probs, label)?,
        labels,
        prediction_set,
        automate: answer["automate"].as_bool(),
    })
}

/// The option index of a prediction-set member as answers write it (the choice label,
/// `true`/`false`, the level key).
fn set_index(kind: &str, labels: &[String], member: &Value) -> Result<usize, String> {
    let index = match (kind, member) {
        ("noul", Value::Bool(b)) => Some(usize::from(*b)),
        ("choice", Value::String(l)) => labels.iter().position(|x| x == l),
        ("score", Value::String(k)) => k.parse().ok().filter(|i| *i < labels.len()),
        _ => None,
    };
    index.ok_or_else(|| format!("prediction_set member {member} is not an option"))
}

/// The non-blank lines of `--data`, each split into body and gold.
pub(super) fn read_lines(args: &EvalArgs) -> Result<Vec<Line>, String> {
    let data = args
        .data
        .as_ref()
        .ok_or("--data or --from-ledger is needed")?;
    let text = std::fs::read_to_string(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = split_line(line, args.profile.as_deref())
            .map_err(|e| format!("line {}: {e}", i + 1))?;
        lines.push((i + 1, parsed));
    }
    if lines.is_empty() {
        return Err(format!("{}: no lines", data.display()));
    }
    Ok(lines)
}

/// `--data`'s file, or the ledger.
pub(super) fn data_name(args: &EvalArgs) -> String {
    match (&args.data, &args.from_ledger) {
        (Some(data), _) => data.display().to_string(),
        (None, Some(target)) => format!("ledger {target:?}"),
        (None, None) => String::new(),
    }
}

/// The lines again, each asking `"prior_correction": false`.
pub(super) fn opted_out(lines: &[Line]) -> Vec<Line> {
    lines
        .iter()
        .map(|(n, (body, gold))| {
            let mut body = body.clone();
            body["prior_correction"] = json!(false);
            (*n, (body, gold.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_into_body_and_gold() {
        let line = r#"{"state":"s","questions":{"q":{"type":"noul","instructions":"?"}},"temperature":3,"gold":{"q":true}}"#;
        let (body, gold) = split_line(line, None).expect("splits");
        assert_eq!(body["temperature"], 1);
        assert!(body.get("gold").is_none() && body.get("calibration").is_none());
        assert_eq!(gold["q"], true);
        let (body, _) = split_line(line, Some("spam")).expect("splits");
        assert!(body.get("temperature").is_none());
        assert_eq!(body["calibration"], "spam");
        assert!(split_line(r#"{"state":"s","questions":{}}"#, None).is_err());
        assert!(split_line(r#"{"state":"s","questions":{},"gold":{"x":1}}"#, None).is_err());
    }

    #[test]
    fn answers_join_gold_per_type() {
        let j = join(&json!({"type": "noul", "noul": 0.8}), &json!(true), None).expect("noul");
        assert_eq!((j.kind.as_str(), j.row.label), ("noul", 1));
        assert_eq!(j.labels, ["no", "yes"]);
        assert!((j.row.probs[0] - 0.2).abs() < 1e-12);
        let choice = json!({"type": "choice", "probabilities": {"spam": 0.7, "ham": 0.3}});
        let j = join(&choice, &json!("ham"), None).expect("choice");
        assert_eq!(
            (j.row.label, j.labels.clone()),
            (1, vec!["spam".to_string(), "ham".to_string()])
        );
        assert!(join(&choice, &json!("other"), None).is_err());
        let score = json!({"type": "score", "probabilities": {"0": 0.1, "1": 0.2, "2": 0.7}});
        let j = join(&score, &json!(2), None).expect("score");
        assert_eq!((j.row.label, j.labels[2].as_str()), (2, "level_2"));
        assert!(join(&score, &json!(3), None).is_err());
        let tempered = json!({"type": "noul", "noul": 0.8, "temperature": 2.48});
        assert!(join(&tempered, &json!(true), None).is_err());
        assert!(
            join(&tempered, &json!(true), Some("spam")).is_err(),
            "not covered"
        );
        let covered = json!({"type": "noul", "noul": 0.8, "temperature": 2.48,
            "calibration": "spam", "prediction_set": [true, false], "automate": false});
        let j = join(&covered, &json!(true), Some("spam")).expect("covered");
        assert_eq!(
            (j.prediction_set, j.automate),
            (Some(vec![1, 0]), Some(false))
        );
        let odd = json!({"type": "choice", "probabilities": {"a": 0.5, "b": 0.5},
            "calibration": "p", "prediction_set": ["c"]});
        assert!(join(&odd, &json!("a"), Some("p")).is_err());
    }
}
