//! Where the requests go (a running service, or the service's router in this process) and
//! sending the lines there, each answer joined with its gold label.

use axum::body::Body;
use futures::StreamExt;
use http_body_util::BodyExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use tower::ServiceExt;

use super::data::{join, Line, Scored};
use super::EvalArgs;
use crate::config::LedgerTarget;

/// Where the requests go.
pub(super) enum Target {
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
/// questions read in several orders can feed `calibrate prior`.
async fn in_process_state(args: &EvalArgs) -> Result<crate::AppState, String> {
    let mut state = crate::build_state(&args.service).map_err(|e| e.to_string())?;
    let settings = &args.service.ledger;
    if matches!(
        settings.ledger,
        LedgerTarget::Sqlite(_) | LedgerTarget::Postgres(_)
    ) {
        let thresholds = state.models.escalation_thresholds();
        state.ledger =
            crate::ledger::Ledger::open(settings, None, state.metrics.clone(), thresholds).await?;
    }
    Ok(state)
}

impl Target {
    pub(super) async fn new(args: &EvalArgs) -> Result<Self, String> {
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
    pub(super) fn describe(&self, args: &EvalArgs) -> String {
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
    pub(super) async fn upstream_reads(&self) -> Option<f64> {
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
        crate::cli::reads::upstream_reads(&text)
    }

    /// Sends one body; a non-2xx status is an error carrying the body.
    pub(super) async fn send(&self, body: String) -> Result<Value, String> {
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

/// Sends every line (`--concurrency` at once, with the progress bar) and joins each
/// answer with its gold label; what could not be sent or joined is a failure line.
pub(super) async fn score_all(
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

/// The reads the service made since `before`, when its `/metrics` said both times.
pub(super) async fn reads_since(target: &Target, before: Option<f64>) -> Option<f64> {
    Some(target.upstream_reads().await? - before?)
}
