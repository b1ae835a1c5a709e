//! `systemone eval`: send labelled System One requests to a service with raw
//! probabilities (`"temperature": 1`), or with a named server-side calibration profile
//! (`--profile`), join the answers with the gold labels, and report
//! [`crate::calibration::fit::Metrics`] per question family (the question id).
//!
//! Input: JSON lines, each a System One request body plus `"gold"`, an object from question
//! id to the gold answer: the option label (choice), `true`/`false` (noul), or the level
//! index (score). Questions without gold are asked but not scored. Any `temperature` or
//! `calibration` in the line is replaced.
//!
//! The service is a running one (`--url`) or, without it, one built in-process from the
//! `serve` flags and called without a network hop (its backend still over HTTP). The
//! in-process one records in a ledger only when `--ledger` names one, so a run with
//! `--permutations 2` can feed `systemone calibrate --prior`.
//!
//! `--raw-out` writes one `{"question_group", "probabilities", "label", "type", "labels"}`
//! line per scored answer: the input of `systemone calibrate`.
//!
//! `--compare-prior` sends every line a second time with `"prior_correction": false` (which
//! neither corrects nor teaches the model's position prior) and reports both runs side by
//! side: accuracy and ECE per family with and without the correction, the answers it
//! corrected, and the upstream reads per answer of each run (from the service's
//! `/metrics`, the prior's own samples included).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use axum::body::Body;
use futures::StreamExt;
use http_body_util::BodyExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Map, Value};
use tower::ServiceExt;

use clap::Args;

use crate::calibration::fit::{self, Row};
use crate::config::{LedgerTarget, ServeConfig};
use crate::secret::Secret;

/// `systemone eval …`
#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// JSON lines: a System One request body plus `"gold": {question id: label | bool | level}`.
    #[arg(long, required_unless_present = "from_ledger")]
    pub data: Option<PathBuf>,
    /// Score the decisions a ledger recorded instead (`sqlite:PATH` or `postgres://…`): the
    /// answered questions with an outcome, as they were answered (no request is sent), one
    /// family per question; `--model` and `--since` select them.
    #[arg(long, conflicts_with_all = ["data", "url", "profile", "raw_out"])]
    pub from_ledger: Option<LedgerTarget>,
    /// With `--from-ledger`: only decisions at or after this instant (Unix milliseconds or
    /// a UTC date YYYY-MM-DD).
    #[arg(long, requires = "from_ledger")]
    pub since: Option<String>,
    /// The service's base URL (or its full `/v1/systemone` URL). Without it the service runs
    /// in-process, configured by the `serve` flags below (its backend is still called over
    /// HTTP).
    #[arg(long)]
    pub url: Option<String>,
    /// Ask for this server-side calibration profile (the request's `"calibration"`) instead
    /// of raw probabilities; the report then also measures its prediction sets and
    /// automation.
    #[arg(long)]
    pub profile: Option<String>,
    /// Bearer key for a service with API keys.
    #[arg(long, env = "SYSTEMONE_EVAL_API_KEY")]
    pub api_key: Option<Secret>,
    /// Also write the raw rows here (the input of `systemone calibrate`).
    #[arg(long)]
    pub raw_out: Option<PathBuf>,
    /// Also write the machine-readable report (JSON) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Also write the reliability diagram (SVG) here.
    #[arg(long)]
    pub diagram: Option<PathBuf>,
    /// Requests in flight at once. The default suits the local one-slot llama-server, where
    /// more callers only queue at the backend (and may time out there).
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Also send every line with `"prior_correction": false` and report accuracy, ECE and
    /// reads per answer with and without the position prior side by side (the report's
    /// `prior`; docs/calibration/prior.md).
    #[arg(long, conflicts_with_all = ["profile", "from_ledger"])]
    pub compare_prior: bool,
    /// Seed of the excess-ECE draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Show a progress bar on stderr (drawn only when stderr is a terminal).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub progress: bool,
    /// The in-process service's configuration (used without `--url`).
    #[command(flatten)]
    pub service: ServeConfig,
}

/// One scored answer.
#[derive(Debug, Clone)]
struct Scored {
    family: String,
    answer: Joined,
    option_mass: Option<f64>,
    /// The answer said the position prior was taken out (`prior_correction`).
    corrected: bool,
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

/// The diagram's plot area: a square of this side, inside a margin of [`SVG_PAD`].
const SVG_SIZE: f64 = 400.0;
const SVG_PAD: f64 = 50.0;
/// One colour per family, in turn.
const SVG_COLOURS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// The diagram's x of a confidence.
fn svg_x(v: f64) -> f64 {
    SVG_PAD + v * SVG_SIZE
}

/// The diagram's y of an accuracy.
fn svg_y(v: f64) -> f64 {
    SVG_PAD + (1.0 - v) * SVG_SIZE
}

/// Each row's top probability, and whether its top option was the label.
fn conf_correct(rows: &[Row]) -> (Vec<f64>, Vec<bool>) {
    (
        rows.iter().map(Row::top).collect(),
        rows.iter().map(|r| r.argmax() == r.label).collect(),
    )
}

/// A hand-written SVG reliability diagram: equal-width bins of all answers as bars, one
/// line per family, and the diagonal.
pub fn reliability_svg(families: &BTreeMap<String, Vec<Row>>, bins: usize) -> String {
    let all: Vec<Row> = families.values().flatten().cloned().collect();
    let mut svg = svg_frame(bins);
    svg.push_str(&svg_bars(&all, bins));
    for (i, (name, rows)) in families.iter().enumerate() {
        svg.push_str(&svg_family(i, name, rows, bins));
    }
    svg.push_str("</svg>\n");
    svg
}

/// The head of the diagram: title, plot frame, diagonal, axis labels and ticks.
fn svg_frame(bins: usize) -> String {
    let (size, pad) = (SVG_SIZE, SVG_PAD);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{cx}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">Reliability ({bins} equal-width bins)</text>\n\
         <rect x=\"{pad}\" y=\"{pad}\" width=\"{size}\" height=\"{size}\" fill=\"none\" stroke=\"black\"/>\n\
         <line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y1}\" stroke=\"grey\" stroke-dasharray=\"4 4\"/>\n\
         <text x=\"{cx}\" y=\"{xl}\" text-anchor=\"middle\">confidence (top probability)</text>\n\
         <text x=\"15\" y=\"{cy}\" text-anchor=\"middle\" transform=\"rotate(-90 15 {cy})\">accuracy</text>\n",
        w = size + pad + 160.0,
        h = size + 2.0 * pad,
        cx = pad + size / 2.0,
        cy = pad + size / 2.0,
        x0 = svg_x(0.0),
        y0 = svg_y(0.0),
        x1 = svg_x(1.0),
        y1 = svg_y(1.0),
        xl = size + pad + 35.0,
    );
    for t in 0..=4 {
        let v = t as f64 / 4.0;
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{v}</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{v}</text>\n",
            svg_x(v),
            svg_y(0.0) + 15.0,
            svg_x(0.0) - 5.0,
            svg_y(v) + 4.0
        ));
    }
    svg
}

/// The bars: every answer's bins, each with its count above the axis, and their legend.
fn svg_bars(all: &[Row], bins: usize) -> String {
    let mut svg = String::new();
    let width = SVG_SIZE / bins as f64;
    let (c, k) = conf_correct(all);
    for b in fit::reliability_bins(&c, &k, bins)
        .iter()
        .filter(|b| b.count > 0)
    {
        svg.push_str(&format!(
            "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"#c6dbef\" stroke=\"#6baed6\"><title>{} answers, confidence {:.3}, accuracy {:.3}</title></rect>\n",
            svg_x(b.lo),
            svg_y(b.accuracy),
            width,
            b.accuracy * SVG_SIZE,
            b.count,
            b.confidence,
            b.accuracy
        ));
        // The bin's answer count above the axis, so a bar of one answer is not read as a
        // trend.
        svg.push_str(&format!(
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\" font-size=\"10\" fill=\"#08519c\">{}</text>\n",
            svg_x(b.lo) + width / 2.0,
            svg_y(0.0) - 4.0,
            b.count
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#08519c\">bars: all answers</text>\n<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#08519c\">(number: answers in the bin)</text>\n",
        svg_x(1.0) + 10.0,
        svg_y(0.0) - 16.0,
        svg_x(1.0) + 10.0,
        svg_y(0.0) - 4.0
    ));
    svg
}

/// Family `i`'s line through its bins, its points and its legend entry.
fn svg_family(i: usize, name: &str, rows: &[Row], bins: usize) -> String {
    let colour = SVG_COLOURS[i % SVG_COLOURS.len()];
    let (c, k) = conf_correct(rows);
    let points: Vec<String> = fit::reliability_bins(&c, &k, bins)
        .iter()
        .filter(|b| b.count > 0)
        .map(|b| format!("{:.2},{:.2}", svg_x(b.confidence), svg_y(b.accuracy)))
        .collect();
    let mut svg = format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>\n",
        points.join(" ")
    );
    for p in &points {
        let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
        svg.push_str(&format!(
            "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{colour}\"/>\n"
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{} (n={})</text>\n",
        svg_x(1.0) + 10.0,
        SVG_PAD + 15.0 + 18.0 * i as f64,
        xml_escape(name),
        rows.len()
    ));
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

/// Where the requests go.
enum Target {
    /// A running service.
    Http {
        client: reqwest::Client,
        endpoint: String,
        key: Option<crate::secret::Secret>,
    },
    /// The service's router, called in this process.
    InProcess(axum::Router),
}

/// The in-process service. It records in a ledger only when `--ledger` names one
/// (`sqlite:PATH`, `postgres://…`), not in the default one a `serve` would open: then its
/// questions read in several orders can feed `calibrate --prior`.
async fn in_process_state(args: &EvalArgs) -> Result<crate::AppState, String> {
    let mut state = crate::build_state(&args.service).map_err(|e| e.to_string())?;
    let settings = &args.service.ledger;
    if matches!(
        settings.ledger,
        LedgerTarget::Sqlite(_) | LedgerTarget::Postgres(_)
    ) {
        state.ledger = crate::ledger::Ledger::open(settings, None, state.metrics.clone()).await?;
    }
    Ok(state)
}

impl Target {
    async fn new(args: &EvalArgs) -> Result<Self, String> {
        Ok(match &args.url {
            Some(url) => Target::Http {
                client: reqwest::Client::new(),
                endpoint: if url.ends_with("/v1/systemone") {
                    url.clone()
                } else {
                    format!("{}/v1/systemone", url.trim_end_matches('/'))
                },
                key: args.api_key.clone(),
            },
            None => Target::InProcess(crate::app(in_process_state(args).await?)),
        })
    }

    /// For the report: the URL, or where the in-process service's model is served.
    fn describe(&self, args: &EvalArgs) -> String {
        match self {
            Target::Http { endpoint, .. } => endpoint.clone(),
            Target::InProcess(_) => {
                format!(
                    "in-process, backend {}",
                    args.service.model.backend_url.join(",")
                )
            }
        }
    }

    /// The upstream reads the service made so far (its `/metrics`), when it says.
    async fn upstream_reads(&self) -> Option<f64> {
        let text = match self {
            Target::Http {
                client,
                endpoint,
                key,
            } => {
                let base = endpoint.trim_end_matches("/v1/systemone");
                let mut req = client.get(format!("{base}/metrics"));
                if let Some(key) = key {
                    req = req.bearer_auth(key.expose());
                }
                req.send().await.ok()?.text().await.ok()?
            }
            Target::InProcess(router) => {
                let req = axum::http::Request::get("/metrics")
                    .body(Body::empty())
                    .ok()?;
                let resp = router.clone().oneshot(req).await.ok()?;
                let bytes = resp.into_body().collect().await.ok()?.to_bytes();
                String::from_utf8_lossy(&bytes).into_owned()
            }
        };
        super::reads::upstream_reads(&text)
    }

    /// Sends one body; a non-2xx status is an error carrying the body.
    async fn send(&self, body: String) -> Result<Value, String> {
        let (status, text) = match self {
            Target::Http {
                client,
                endpoint,
                key,
            } => {
                let mut req = client
                    .post(endpoint)
                    .header("content-type", "application/json")
                    .body(body);
                if let Some(key) = key {
                    req = req.bearer_auth(key.expose());
                }
                let resp = req.send().await.map_err(|e| e.to_string())?;
                let status = resp.status();
                (status, resp.text().await.map_err(|e| e.to_string())?)
            }
            Target::InProcess(router) => {
                let req = axum::http::Request::post("/v1/systemone")
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .map_err(|e| e.to_string())?;
                let resp = router
                    .clone()
                    .oneshot(req)
                    .await
                    .map_err(|e| e.to_string())?;
                let status = resp.status();
                let bytes = resp
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?
                    .to_bytes();
                (status, String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        if !status.is_success() {
            return Err(format!("status {status}: {}", text.trim()));
        }
        serde_json::from_str::<Value>(&text).map_err(|e| e.to_string())
    }
}

/// A progress bar on stderr with rate and ETA; hidden when asked, and drawn by indicatif
/// only when stderr is a terminal (so logs and CI output stay clean).
fn progress_bar(total: usize, show: bool) -> ProgressBar {
    let target = if show {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(total as u64), target);
    if let Ok(style) = ProgressStyle::with_template(
        "eval {bar:30} {pos}/{len} lines · {per_sec} · ETA {eta} · {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// `systemone eval`: runs, prints the table and where the report and diagram went.
pub fn run_command(args: &EvalArgs) -> Result<(), String> {
    let outcome = super::runtime()?
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
pub async fn run(args: &EvalArgs) -> Result<Outcome, String> {
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
    Ok(Outcome { report, table })
}

/// The lines again, each asking `"prior_correction": false`.
fn opted_out(lines: &[Line]) -> Vec<Line> {
    lines
        .iter()
        .map(|(n, (body, gold))| {
            let mut body = body.clone();
            body["prior_correction"] = json!(false);
            (*n, (body, gold.clone()))
        })
        .collect()
}

/// The reads the service made since `before`, when its `/metrics` said both times.
async fn reads_since(target: &Target, before: Option<f64>) -> Option<f64> {
    Some(target.upstream_reads().await? - before?)
}

/// One run of the lines, for the comparison.
struct Pass<'a> {
    scored: &'a [(usize, Scored)],
    families: &'a Map<String, Value>,
    reads: Option<f64>,
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
async fn compare_prior(
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

/// The side-by-side lines: per family accuracy and both ECEs with / without, then the
/// answers corrected and the reads per answer of each run.
fn prior_table(with: &Value, without: &Value, failures: usize) -> String {
    let mut out = format!(
        "position prior, with / without (\"prior_correction\": false):\n{:<20} {:>13} {:>15} {:>15}\n",
        "family", "acc", "ECE15", "ECE10w"
    );
    let pair = |f: &str, key: &str| {
        let get = |v: &Value| v["families"][f][key].as_f64().unwrap_or(f64::NAN);
        format!("{:.3} / {:.3}", get(with), get(without))
    };
    for family in with["families"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
    {
        out.push_str(&format!(
            "{:<20} {:>13} {:>15} {:>15}\n",
            family,
            pair(family, "accuracy"),
            pair(family, "ece_equal_size_15"),
            pair(family, "ece_equal_width_10")
        ));
    }
    let reads = |v: &Value| {
        v["reads_per_answer"]
            .as_f64()
            .map_or("-".into(), |r| format!("{r:.3}"))
    };
    out.push_str(&format!(
        "{} of {} answers corrected; reads per answer {} / {}; {failures} failures without\n",
        with["corrected_answers"],
        with["answers"],
        reads(with),
        reads(without)
    ));
    out
}

/// The first few failures, so a run that lost lines says why without opening the report.
fn failure_lines(failures: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut out: String = failures
        .iter()
        .take(SHOWN)
        .map(|f| format!("  failed: {f}\n"))
        .collect();
    if failures.len() > SHOWN {
        out.push_str(&format!(
            "  … and {} more (all in --report)\n",
            failures.len() - SHOWN
        ));
    }
    out
}

/// One input line: its number, the request body and the gold answers.
type Line = (usize, (Value, Map<String, Value>));

/// The non-blank lines of `--data`, each split into body and gold.
/// `--data`'s file, or the ledger.
fn data_name(args: &EvalArgs) -> String {
    match (&args.data, &args.from_ledger) {
        (Some(data), _) => data.display().to_string(),
        (None, Some(target)) => format!("ledger {target:?}"),
        (None, None) => String::new(),
    }
}

/// `eval --from-ledger`: scores the recorded answers that have outcomes, as answered.
async fn run_ledger(args: &EvalArgs, target: &LedgerTarget) -> Result<Outcome, String> {
    let model = args.service.model.name.as_str();
    let rows = super::ledger::rows(
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
    Ok(Outcome { report, table })
}

fn read_lines(args: &EvalArgs) -> Result<Vec<Line>, String> {
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

/// Sends every line (`--concurrency` at once, with the progress bar) and joins each
/// answer with its gold label; what could not be sent or joined is a failure line.
async fn score_all(
    target: &Target,
    lines: Vec<Line>,
    args: &EvalArgs,
) -> (Vec<(usize, Scored)>, Vec<String>) {
    let calibration = args.profile.as_deref();
    let bar = progress_bar(lines.len(), args.progress);
    let mut failures: Vec<String> = Vec::new();
    let mut scored: Vec<(usize, Scored)> = Vec::new();
    let mut stream =
        futures::stream::iter(lines.into_iter().map(|(n, (body, gold))| async move {
            (n, gold, target.send(body.to_string()).await)
        }))
        .buffer_unordered(args.concurrency.max(1));
    while let Some((n, gold, result)) = stream.next().await {
        bar.inc(1);
        let resp = match result {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("line {n}: {e}"));
                bar.set_message(format!("{} failed", failures.len()));
                continue;
            }
        };
        for (id, g) in &gold {
            let answer = &resp["answers"][id];
            match join(answer, g, calibration) {
                Ok(joined) => scored.push((
                    n,
                    Scored {
                        family: id.clone(),
                        answer: joined,
                        option_mass: answer["option_mass"].as_f64(),
                        corrected: answer.get("prior_correction").is_some(),
                    },
                )),
                Err(e) => failures.push(format!("line {n} question {id}: {e}")),
            }
        }
    }
    bar.finish_and_clear();
    (scored, failures)
}

/// `--raw-out`: one JSON line per scored answer, the input of `systemone calibrate`.
fn raw_rows(scored: &[(usize, Scored)]) -> String {
    let mut out = String::new();
    for (_, s) in scored {
        let a = &s.answer;
        out.push_str(
            &json!({"question_group": s.family, "probabilities": a.row.probs, "label": a.row.label, "type": a.kind, "labels": a.labels})
                .to_string(),
        );
        out.push('\n');
    }
    out
}

/// The per-family results: the printed table, the report's `families` and the rows the
/// reliability diagram draws.
struct Summary {
    table: String,
    families: Map<String, Value>,
    rows: BTreeMap<String, Vec<Row>>,
}

/// Scores each question family (question id) and writes its table line and report entry.
fn summarise(scored: &[(usize, Scored)], args: &EvalArgs) -> Result<Summary, String> {
    let mut families: BTreeMap<String, Vec<&Scored>> = BTreeMap::new();
    for (_, s) in scored {
        families.entry(s.family.clone()).or_default().push(s);
    }
    let mut summary = Summary {
        table: format!(
            "{:<20} {:>6} {:>4} {:>6} {:>7} {:>6} {:>6} {:>7} {:>7} {:>7} {:>6}\n",
            "family",
            "type",
            "n",
            "acc",
            "norm",
            "F1",
            "Brier",
            "ECE15",
            "ECE10w",
            "excess",
            "mass"
        ),
        families: Map::new(),
        rows: BTreeMap::new(),
    };
    let mut profile_lines = String::new();
    for (name, members) in &families {
        let rows: Vec<Row> = members.iter().map(|s| s.answer.row.clone()).collect();
        let m = fit::metrics(&rows, args.seed);
        let kind = members[0].answer.kind.clone();
        let masses: Vec<f64> = members.iter().filter_map(|s| s.option_mass).collect();
        let mass = (!masses.is_empty()).then(|| masses.iter().sum::<f64>() / masses.len() as f64);
        summary.table.push_str(&table_line(name, &kind, &m, mass));
        let mut entry = serde_json::to_value(&m).map_err(|e| e.to_string())?;
        if let Some(obj) = entry.as_object_mut() {
            obj.insert("type".into(), json!(kind));
            obj.insert("mean_option_mass".into(), json!(mass));
            obj.insert(
                "reliability_equal_width_10".into(),
                json!(reliability_json(&rows)),
            );
            if args.profile.is_some() {
                let stats = profile_stats(members);
                profile_lines.push_str(&profile_line(name, &stats, members.len()));
                obj.insert("profile".into(), stats);
            }
        }
        summary.families.insert(name.clone(), entry);
        summary.rows.insert(name.clone(), rows);
    }
    summary.table.push_str(&profile_lines);
    Ok(summary)
}

/// One family's line of the printed table.
fn table_line(name: &str, kind: &str, m: &fit::Metrics, mass: Option<f64>) -> String {
    format!(
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
    )
}

/// One family's profile line: set coverage and size, automated share and accuracy.
fn profile_line(name: &str, stats: &Value, answers: usize) -> String {
    format!(
        "{name}: prediction sets cover {:.3} (mean size {:.2}); {} of {} automated ({:.3}), accuracy among them {}\n",
        stats["set_coverage"].as_f64().unwrap_or(f64::NAN),
        stats["mean_set_size"].as_f64().unwrap_or(f64::NAN),
        stats["automated"],
        answers,
        stats["automated_share"].as_f64().unwrap_or(f64::NAN),
        stats["automated_accuracy"].as_f64().map_or("-".into(), |v| format!("{v:.3}")),
    )
}

/// How a profile's prediction sets and automation did on one family.
fn profile_stats(members: &[&Scored]) -> Value {
    let n = members.len().max(1) as f64;
    let covered = members
        .iter()
        .filter(|s| {
            s.answer
                .prediction_set
                .as_ref()
                .is_some_and(|set| set.contains(&s.answer.row.label))
        })
        .count();
    let size: usize = members
        .iter()
        .filter_map(|s| s.answer.prediction_set.as_ref().map(Vec::len))
        .sum();
    let automated: Vec<&&Scored> = members
        .iter()
        .filter(|s| s.answer.automate == Some(true))
        .collect();
    let right = automated
        .iter()
        .filter(|s| s.answer.row.argmax() == s.answer.row.label)
        .count();
    json!({
        "set_coverage": covered as f64 / n,
        "mean_set_size": size as f64 / n,
        "automated": automated.len(),
        "automated_share": automated.len() as f64 / n,
        "automated_accuracy": (!automated.is_empty()).then(|| right as f64 / automated.len() as f64),
    })
}

fn reliability_json(rows: &[Row]) -> Vec<Value> {
    let c: Vec<f64> = rows.iter().map(Row::top).collect();
    let k: Vec<bool> = rows.iter().map(|r| r.argmax() == r.label).collect();
    fit::reliability_bins(&c, &k, 10)
        .iter()
        .map(|b| json!({"lo": b.lo, "hi": b.hi, "count": b.count, "confidence": b.confidence, "accuracy": b.accuracy}))
        .collect()
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

fn write(path: &Path, body: &str) -> Result<(), String> {
    std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))
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
        // Each bar carries its answer count.
        assert_eq!(
            svg.matches("font-size=\"10\" fill=\"#08519c\">1</text>")
                .count(),
            2
        );
    }
}
