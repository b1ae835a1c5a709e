//! Each job's arguments: the rows it reads ([`RowsArgs`], shared by `formula`, `profile`
//! and `check`), and what only that job takes.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::calibration::watch::{Class, Span};
use crate::config::{Layout, LedgerTarget};

/// The job `systemone calibrate` does.
#[derive(Debug, Clone, Subcommand)]
pub enum Job {
    /// Fit `--model`'s temperature formula (temperature by option count) and write its
    /// calibration file (default `calibration/<model>.json`).
    Formula(FormulaArgs),
    /// Fit a server-side profile for one question group (temperature, bias, conformal
    /// cutoffs, automation threshold) and write it (default
    /// `calibration/profiles/<name>.json`).
    Profile(ProfileArgs),
    /// Fit `--model`'s position prior from a ledger's questions read in two or more orders,
    /// the way the service learns it; print per shape the held-out check and what a single
    /// read would get.
    Prior(PriorArgs),
    /// Judge formulas on the rows: per option count, NLL and ECE raw and under each. For
    /// held-out rows none of them was fitted on. Writes nothing.
    Check(CheckArgs),
    /// The calibration watch's figures (`GET /v1/calibration`'s) over a ledger's records
    /// and outcomes, computed by the watch's own code: a table per shape and window, and
    /// with `--svg` a reliability diagram. Writes nothing else.
    Report(ReportArgs),
}

/// The labelled rows a job reads, and the model they are for.
#[derive(Debug, Clone, Args)]
pub struct RowsArgs {
    /// JSON lines: `{"question_group": "...", "probabilities": [...], "label": INDEX}`.
    #[arg(long, required_unless_present = "from_ledger")]
    pub data: Option<PathBuf>,
    /// Read the rows from a decision ledger instead (`sqlite:PATH` or `postgres://…`): the
    /// questions `--model` answered that have an outcome, one group per question (what
    /// `systemone ledger export` prints).
    #[arg(long, conflicts_with = "data")]
    pub from_ledger: Option<LedgerTarget>,
    /// With `--from-ledger`: only decisions at or after this instant (Unix milliseconds or
    /// a UTC date YYYY-MM-DD).
    #[arg(long, requires = "from_ledger")]
    pub since: Option<String>,
    /// The model the file is for (also the default output name).
    #[arg(long)]
    pub model: String,
}

/// `systemone calibrate formula …`
#[derive(Debug, Clone, Args)]
pub struct FormulaArgs {
    /// The rows.
    #[command(flatten)]
    pub rows: RowsArgs,
    /// Output file (default `calibration/<model>.json`, or `calibration/<model>.compact.json`
    /// with `--layout compact`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The prompt layout the rows were asked in (`systemone eval --layout`). A formula or
    /// profile covers only the layout family it was fitted on: `compact` writes
    /// `"layout": "compact"` and, by default, `calibration/<model>.compact.json`, which the
    /// service uses for that layout alone; `accuracy` and `cost` (the reference's bytes)
    /// write the files as before.
    #[arg(long, value_enum, default_value_t = Layout::Accuracy)]
    pub layout: Layout,
}

/// `systemone calibrate profile NAME …`
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// The profile's name (what a request's `"calibration"` asks for).
    pub name: String,
    /// The rows, the model and where to write.
    #[command(flatten)]
    pub formula: FormulaArgs,
    /// How the profile is fitted.
    #[command(flatten)]
    pub fit: ProfileFit,
}

/// How a profile is fitted: the group, the bias, the prediction sets and automation.
#[derive(Debug, Clone, Args)]
pub struct ProfileFit {
    /// The question group to fit (default: the only one in the data).
    #[arg(long)]
    pub group: Option<String>,
    /// Fit a centred bias per option beside the temperature (cutoffs and the threshold are
    /// then set on out-of-fold probabilities).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub bias: bool,
    /// The prediction sets' target coverage.
    #[arg(long, default_value_t = 0.9)]
    pub coverage: f64,
    /// One conformal cutoff per gold label instead of one for all.
    #[arg(long)]
    pub per_label: bool,
    /// The error rate ε the automated answers must stay under.
    #[arg(long, default_value_t = 0.1)]
    pub epsilon: f64,
    /// The chance δ that the bound is wrong.
    #[arg(long, default_value_t = 0.05)]
    pub delta: f64,
    /// With `--bias`: folds of the out-of-fold probabilities.
    #[arg(long, default_value_t = 5)]
    pub folds: usize,
    /// Seed of the fold assignment.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `systemone calibrate prior …`
#[derive(Debug, Clone, Args)]
pub struct PriorArgs {
    /// The ledger (`sqlite:PATH` or `postgres://…`) whose questions read in several orders
    /// the prior is fitted on: `--raw-out` rows hold a question's average over its orders,
    /// not each order's reads.
    #[arg(long)]
    pub from_ledger: LedgerTarget,
    /// Only decisions at or after this instant (Unix milliseconds or a UTC date YYYY-MM-DD).
    #[arg(long)]
    pub since: Option<String>,
    /// The model whose prior is fitted.
    #[arg(long)]
    pub model: String,
    /// A new state directory to seed: `DIR/prior.redb`, which `serve --state-dir DIR`
    /// starts from (nothing is written without it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fit one tenant's prior (a key's name, or a token caller's name as the ledger records
    /// it) from that caller's records only, and seed it as that tenant's: the prior a
    /// service with keys or tokens corrects that tenant's single reads by.
    #[arg(long)]
    pub tenant: Option<String>,
}

/// `systemone calibrate check FORMULA… …`
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The formulas to judge: calibration files or shipped names.
    #[arg(required = true)]
    pub formulas: Vec<String>,
    /// The rows.
    #[command(flatten)]
    pub rows: RowsArgs,
}

/// `systemone calibrate report …`
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The ledger (`sqlite:PATH` or `postgres://…`) whose answers and outcomes are read.
    #[arg(long)]
    pub from_ledger: LedgerTarget,
    /// The windows: `hour` (the last 24), `day` (the last 7) or `week` (the last 4), up to
    /// the one holding the newest answer (or `--until`).
    #[arg(long, default_value = "day", value_parser = parse_span)]
    pub window: Span,
    /// The last window is the one holding this instant (Unix milliseconds or a UTC date
    /// YYYY-MM-DD) instead of the newest answer's.
    #[arg(long)]
    pub until: Option<String>,
    /// The reference window the drift figures compare against, `FROM..UNTIL` (as `serve
    /// --calibration-reference`); default the first full week after the first answer.
    #[arg(long, value_parser = crate::config::parse_reference)]
    pub reference: Option<(i64, i64)>,
    /// Only this key's answers (a key's name, or a token caller's name as the ledger
    /// records it); default every key's, merged.
    #[arg(long)]
    pub key: Option<String>,
    /// Only this configured model's answers.
    #[arg(long)]
    pub model: Option<String>,
    /// Only this question type (`choice`, `noul`, `score`).
    #[arg(long = "type")]
    pub kind: Option<String>,
    /// Only questions of this many options.
    #[arg(long)]
    pub options: Option<usize>,
    /// Only this prompt layout.
    #[arg(long)]
    pub layout: Option<String>,
    /// Only this class: `raw`, `prior` (corrected by the position prior) or `profile`
    /// (covered by a calibration profile).
    #[arg(long, value_parser = parse_class)]
    pub class: Option<Class>,
    /// Write the reliability diagram (every shape's outcomes as bars, one line per shape)
    /// to this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

fn parse_span(text: &str) -> Result<Span, String> {
    Span::ALL
        .into_iter()
        .find(|s| s.as_str() == text)
        .ok_or_else(|| format!("expected hour, day or week, got {text:?}"))
}

fn parse_class(text: &str) -> Result<Class, String> {
    Class::parse(text).ok_or_else(|| format!("expected raw, prior or profile, got {text:?}"))
}
