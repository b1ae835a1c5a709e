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
//! `--permutations 2` can feed `systemone calibrate prior`.
//!
//! `--raw-out` writes one `{"question_group", "probabilities", "label", "type", "labels"}`
//! line per scored answer: the input of `systemone calibrate`.
//!
//! `--compare-prior` sends every line a second time with `"prior_correction": false` (which
//! neither corrects nor teaches the model's position prior) and reports both runs side by
//! side: accuracy and ECE per family with and without the correction, the answers it
//! corrected, and the upstream reads per answer of each run (from the service's
//! `/metrics`, the prior's own samples included).
//!
//! The files by idea: [`data`] (the labelled lines, and answers joined with their gold),
//! [`sending`] (where the requests go and how they are sent), [`scoring`] (metrics per
//! question family), [`printing`] (the table's lines and the raw rows), [`comparing`]
//! (`--compare-prior`'s second run), [`svg`] (the reliability diagram), and [`running`],
//! the command from top to bottom.

mod comparing;
mod data;
mod printing;
mod running;
mod scoring;
mod sending;
mod svg;

use std::path::PathBuf;

use clap::Args;

use crate::config::{LedgerTarget, ServeConfig};
use crate::secret::Secret;

pub use data::{join, split_line, Joined};
pub use running::{run, run_command, Evaluation};
pub use svg::reliability_svg;

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
