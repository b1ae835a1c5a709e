//! `systemone eval`: send labelled System One requests to a running service with raw
//! probabilities (`"temperature": 1`), join the answers with the gold labels, and report
//! [`crate::fit::Metrics`] per question family (the question id).
//!
//! Input: JSON lines, each a System One request body plus `"gold"`, an object from question
//! id to the gold answer: the option label (choice), `true`/`false` (noul), or the level
//! index (score). Questions without gold are asked but not scored. Any `temperature` in the
//! line is replaced by 1.
//!
//! `--raw-out` writes one `{"question_group", "probabilities", "label"}` line per scored
//! answer: the input of `systemone calibrate`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use futures::StreamExt;
use serde_json::{json, Map, Value};

use crate::config::EvalArgs;
use crate::fit::{self, Row};

/// One scored answer.
#[derive(Debug, Clone)]
struct Scored {
    family: String,
    kind: String,
    row: Row,
    option_mass: Option<f64>,
}

/// Splits a labelled line into the request body (temperature forced to 1) and its gold map.
pub fn split_line(line: &str) -> Result<(Value, Map<String, Value>), String> {
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
    obj.insert("temperature".into(), json!(1));
    Ok((v, gold))
}

/// The answer's probabilities in option order and the gold's index among them; an answer
/// tempered by anything but T = 1 is refused (its probabilities are not raw).
pub fn join(answer: &Value, gold: &Value) -> Result<(String, Row), String> {
    let kind = answer["type"].as_str().ok_or("answer without type")?;
    if let Some(t) = answer["temperature"].as_f64() {
        if t != 1.0 {
            return Err(format!("the service applied temperature {t}, not 1"));
        }
    }
    let (probs, label) = match kind {
        "noul" => {
            let p = answer["noul"].as_f64().ok_or("noul answer without noul")?;
            let g = gold.as_bool().ok_or("noul gold must be true or false")?;
            (vec![1.0 - p, p], usize::from(g))
        }
        "choice" | "score" => {
            let pairs = answer["probabilities"]
                .as_object()
                .ok_or("answer without probabilities")?;
            let probs: Vec<f64> = pairs
                .values()
                .map(|v| v.as_f64().ok_or("probability is not a number"))
                .collect::<Result<_, _>>()?;
            let label = if kind == "choice" {
                let g = gold.as_str().ok_or("choice gold must be a label")?;
                pairs
                    .keys()
                    .position(|k| k == g)
                    .ok_or_else(|| format!("gold label {g:?} is not an option"))?
            } else {
                gold.as_u64().ok_or("score gold must be a level index")? as usize
            };
            (probs, label)
        }
        other => return Err(format!("unknown answer type {other}")),
    };
    Ok((kind.to_string(), Row::new(probs, label)?))
}

/// A hand-written SVG reliability diagram: equal-width bins of all answers as bars, one
/// line per family, and the diagonal.
pub fn reliability_svg(families: &BTreeMap<String, Vec<Row>>, bins: usize) -> String {
    const SIZE: f64 = 400.0;
    const PAD: f64 = 50.0;
    const COLOURS: [&str; 6] = [
        "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
    ];
    let x = |v: f64| PAD + v * SIZE;
    let y = |v: f64| PAD + (1.0 - v) * SIZE;
    let conf_correct = |rows: &[Row]| -> (Vec<f64>, Vec<bool>) {
        (
            rows.iter().map(Row::top).collect(),
            rows.iter().map(|r| r.argmax() == r.label).collect(),
        )
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{cx}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">Reliability ({bins} equal-width bins)</text>\n\
         <rect x=\"{PAD}\" y=\"{PAD}\" width=\"{SIZE}\" height=\"{SIZE}\" fill=\"none\" stroke=\"black\"/>\n\
         <line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y1}\" stroke=\"grey\" stroke-dasharray=\"4 4\"/>\n\
         <text x=\"{cx}\" y=\"{xl}\" text-anchor=\"middle\">confidence (top probability)</text>\n\
         <text x=\"15\" y=\"{cy}\" text-anchor=\"middle\" transform=\"rotate(-90 15 {cy})\">accuracy</text>\n",
        w = SIZE + PAD + 160.0,
        h = SIZE + 2.0 * PAD,
        cx = PAD + SIZE / 2.0,
        cy = PAD + SIZE / 2.0,
        x0 = x(0.0),
        y0 = y(0.0),
        x1 = x(1.0),
        y1 = y(1.0),
        xl = SIZE + PAD + 35.0,
    );
    for t in 0..=4 {
        let v = t as f64 / 4.0;
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{v}</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{v}</text>\n",
            x(v),
            y(0.0) + 15.0,
            x(0.0) - 5.0,
            y(v) + 4.0
        ));
    }
    let all: Vec<Row> = families.values().flatten().cloned().collect();
    let (c, k) = conf_correct(&all);
    for b in fit::reliability_bins(&c, &k, bins)
        .iter()
        .filter(|b| b.count > 0)
    {
        svg.push_str(&format!(
            "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"#c6dbef\" stroke=\"#6baed6\"><title>{} answers, confidence {:.3}, accuracy {:.3}</title></rect>\n",
            x(b.lo),
            y(b.accuracy),
            SIZE / bins as f64,
            b.accuracy * SIZE,
            b.count,
            b.confidence,
            b.accuracy
        ));
    }
    for (i, (name, rows)) in families.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let (c, k) = conf_correct(rows);
        let points: Vec<String> = fit::reliability_bins(&c, &k, bins)
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| format!("{:.2},{:.2}", x(b.confidence), y(b.accuracy)))
            .collect();
        svg.push_str(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>\n",
            points.join(" ")
        ));
        for p in &points {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            svg.push_str(&format!(
                "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{colour}\"/>\n"
            ));
        }
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{} (n={})</text>\n",
            x(1.0) + 10.0,
            PAD + 15.0 + 18.0 * i as f64,
            xml_escape(name),
            rows.len()
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The outcome of a run (also written as the JSON report).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The JSON report.
    pub report: Value,
    /// The human-readable table.
    pub table: String,
}

/// Runs `systemone eval`: sends every line, scores, writes the report, the diagram and
/// (optionally) the raw rows.
pub async fn run(args: &EvalArgs) -> Result<Outcome, String> {
    let text =
        std::fs::read_to_string(&args.data).map_err(|e| format!("{}: {e}", args.data.display()))?;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = split_line(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        lines.push((i + 1, parsed));
    }
    if lines.is_empty() {
        return Err(format!("{}: no lines", args.data.display()));
    }
    let endpoint = if args.url.ends_with("/v1/systemone") {
        args.url.clone()
    } else {
        format!("{}/v1/systemone", args.url.trim_end_matches('/'))
    };
    let client = reqwest::Client::new();
    let total = lines.len();
    let started = Instant::now();
    let mut done = 0usize;
    let mut failures: Vec<String> = Vec::new();
    let mut scored: Vec<(usize, Scored)> = Vec::new();
    let mut stream = futures::stream::iter(lines.into_iter().map(|(n, (body, gold))| {
        let client = client.clone();
        let endpoint = endpoint.clone();
        let key = args.api_key.clone();
        async move {
            let mut req = client
                .post(&endpoint)
                .header("content-type", "application/json")
                .body(body.to_string());
            if let Some(key) = key {
                req = req.bearer_auth(key.expose());
            }
            let result = async {
                let resp = req.send().await.map_err(|e| e.to_string())?;
                let status = resp.status();
                let text = resp.text().await.map_err(|e| e.to_string())?;
                if !status.is_success() {
                    return Err(format!("status {status}: {}", text.trim()));
                }
                serde_json::from_str::<Value>(&text).map_err(|e| e.to_string())
            }
            .await;
            (n, gold, result)
        }
    }))
    .buffer_unordered(args.concurrency.max(1));
    while let Some((n, gold, result)) = stream.next().await {
        done += 1;
        if args.progress {
            eprint!("\reval: {done}/{total} lines");
        }
        let resp = match result {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("line {n}: {e}"));
                continue;
            }
        };
        for (id, g) in &gold {
            let answer = &resp["answers"][id];
            match join(answer, g) {
                Ok((kind, row)) => scored.push((
                    n,
                    Scored {
                        family: id.clone(),
                        kind,
                        row,
                        option_mass: answer["option_mass"].as_f64(),
                    },
                )),
                Err(e) => failures.push(format!("line {n} question {id}: {e}")),
            }
        }
    }
    if args.progress {
        eprintln!();
    }
    let seconds = started.elapsed().as_secs_f64();
    if scored.is_empty() {
        return Err(format!(
            "no answer could be scored; first failure: {}",
            failures.first().map_or("none", String::as_str)
        ));
    }
    // Input order, so raw-out and the report do not depend on arrival order.
    scored.sort_by_key(|(n, _)| *n);
    if let Some(path) = &args.raw_out {
        let mut out = String::new();
        for (_, s) in &scored {
            out.push_str(
                &json!({"question_group": s.family, "probabilities": s.row.probs, "label": s.row.label})
                    .to_string(),
            );
            out.push('\n');
        }
        write(path, &out)?;
    }
    let mut families: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for (_, s) in &scored {
        families
            .entry(s.family.clone())
            .or_default()
            .push(s.row.clone());
    }
    let mut family_json = Map::new();
    let mut table = format!(
        "{:<20} {:>6} {:>4} {:>6} {:>7} {:>6} {:>6} {:>7} {:>7} {:>7} {:>6}\n",
        "family", "type", "n", "acc", "norm", "F1", "Brier", "ECE15", "ECE10w", "excess", "mass"
    );
    for (name, rows) in &families {
        let m = fit::metrics(rows, args.seed);
        let of_family = || scored.iter().filter(|(_, s)| &s.family == name);
        let kind = of_family()
            .map(|(_, s)| s.kind.clone())
            .next()
            .unwrap_or_default();
        let masses: Vec<f64> = of_family().filter_map(|(_, s)| s.option_mass).collect();
        let mass = (!masses.is_empty()).then(|| masses.iter().sum::<f64>() / masses.len() as f64);
        table.push_str(&format!(
            "{:<20} {:>6} {:>4} {:>6.3} {:>7} {:>6.3} {:>6.3} {:>7.4} {:>7.4} {:>7.4} {:>6}\n",
            name,
            kind,
            m.n,
            m.accuracy,
            m.normalised_accuracy
                .map_or("-".into(), |v| format!("{v:.3}")),
            m.macro_f1,
            m.brier,
            m.ece_equal_size_15,
            m.ece_equal_width_10,
            m.excess_ece,
            mass.map_or("-".into(), |v| format!("{v:.3}")),
        ));
        let mut entry = serde_json::to_value(&m).map_err(|e| e.to_string())?;
        if let Some(obj) = entry.as_object_mut() {
            obj.insert("type".into(), json!(kind));
            obj.insert("mean_option_mass".into(), json!(mass));
            obj.insert(
                "reliability_equal_width_10".into(),
                json!(reliability_json(rows)),
            );
        }
        family_json.insert(name.clone(), entry);
    }
    let questions = scored.len();
    table.push_str(&format!(
        "{questions} answers from {total} lines in {seconds:.2}s ({:.1} questions/s), {} failures\n",
        questions as f64 / seconds.max(1e-9),
        failures.len()
    ));
    let report = json!({
        "data": args.data.display().to_string(),
        "url": endpoint,
        "temperature": 1,
        "lines": total,
        "scored_answers": questions,
        "failures": failures,
        "seconds": seconds,
        "questions_per_second": questions as f64 / seconds.max(1e-9),
        "seed": args.seed,
        "families": family_json,
    });
    let mut body = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    body.push('\n');
    write(&args.report, &body)?;
    write(&args.diagram, &reliability_svg(&families, 10))?;
    Ok(Outcome { report, table })
}

fn reliability_json(rows: &[Row]) -> Vec<Value> {
    let c: Vec<f64> = rows.iter().map(Row::top).collect();
    let k: Vec<bool> = rows.iter().map(|r| r.argmax() == r.label).collect();
    fit::reliability_bins(&c, &k, 10)
        .iter()
        .map(|b| json!({"lo": b.lo, "hi": b.hi, "count": b.count, "confidence": b.confidence, "accuracy": b.accuracy}))
        .collect()
}

fn write(path: &Path, body: &str) -> Result<(), String> {
    std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_into_body_and_gold() {
        let (body, gold) = split_line(
            r#"{"state":"s","questions":{"q":{"type":"noul","instructions":"?"}},"temperature":3,"gold":{"q":true}}"#,
        )
        .expect("splits");
        assert_eq!(body["temperature"], 1);
        assert!(body.get("gold").is_none());
        assert_eq!(gold["q"], true);
        assert!(split_line(r#"{"state":"s","questions":{}}"#).is_err());
        assert!(split_line(r#"{"state":"s","questions":{},"gold":{"x":1}}"#).is_err());
    }

    #[test]
    fn answers_join_gold_per_type() {
        let (k, row) = join(&json!({"type": "noul", "noul": 0.8}), &json!(true)).expect("noul");
        assert_eq!((k.as_str(), row.label), ("noul", 1));
        assert!((row.probs[0] - 0.2).abs() < 1e-12);
        let choice = json!({"type": "choice", "probabilities": {"spam": 0.7, "ham": 0.3}});
        assert_eq!(join(&choice, &json!("ham")).expect("choice").1.label, 1);
        assert!(join(&choice, &json!("other")).is_err());
        let score = json!({"type": "score", "probabilities": {"0": 0.1, "1": 0.2, "2": 0.7}});
        assert_eq!(join(&score, &json!(2)).expect("score").1.label, 2);
        assert!(join(&score, &json!(3)).is_err());
        let tempered = json!({"type": "noul", "noul": 0.8, "temperature": 2.48});
        assert!(join(&tempered, &json!(true)).is_err());
    }

    #[test]
    fn svg_has_bars_lines_and_legend() {
        let mut f = BTreeMap::new();
        f.insert(
            "a<b".to_string(),
            vec![
                Row::new(vec![0.9, 0.1], 0).expect("row"),
                Row::new(vec![0.3, 0.7], 0).expect("row"),
            ],
        );
        let svg = reliability_svg(&f, 10);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<polyline") && svg.contains("a&lt;b (n=2)"));
        assert_eq!(svg.matches("fill=\"#c6dbef\"").count(), 2);
    }
}
