//! `systemone calibrate`: five jobs on labelled raw probabilities, each a subcommand.
//!
//! * `formula`: fit a model's temperature formula and write the calibration file the
//!   service reads ([`formula`]).
//! * `profile`: fit a server-side profile for one question group
//!   ([`crate::calibration::profile`]; [`profile`]).
//! * `prior`: fit a model's position prior again from a ledger (`cli/prior.rs`).
//! * `check`: judge formulas on the rows, writing nothing ([`check`]).
//! * `report`: the calibration watch's figures over a ledger, as a table and an SVG
//!   reliability diagram ([`report`]).
//!
//! Input (`formula`, `profile`, `check`): JSON lines, one answered question each (blank
//! lines skipped):
//! `{"question_group": "spam-noul", "probabilities": [0.93, 0.07], "label": 0,
//!   "type": "noul", "labels": ["no", "yes"]}` —
//! the raw (T = 1) probabilities in option order and the gold option index; `type` and the
//! lowered option `labels` (written by `systemone eval --raw-out`) are needed for a profile
//! only. Every line of a group must have the same option count ([`rows`]).
//!
//! The jobs were flags of one command before (`--profile NAME`, `--prior`, `--check F`,
//! none for the formula); that form still works for one release, saying on stderr which
//! subcommand replaces it ([`flags`]).

mod args;
mod check;
mod flags;
mod formula;
mod jobs;
mod profile;
mod report;
mod rows;

use clap::Args;

pub use args::{
    CheckArgs, FormulaArgs, Job, PriorArgs, ProfileArgs, ProfileFit, ReportArgs, RowsArgs,
};
pub use flags::{CalibrateFlags, DEPRECATED};
pub use formula::{calibrate, today_utc, MIN_TRUSTED_ROWS};
pub use jobs::{run, run_command};
pub use profile::fit_profile;
pub use rows::{parse_groups, Group, Groups, RawLine};

/// `systemone calibrate …`: a job's subcommand, or (deprecated) the old flags.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CalibrateCommand {
    /// The job.
    #[command(subcommand)]
    pub job: Option<Job>,
    /// The old form: the job picked by `--profile`, `--prior` or `--check` (deprecated).
    #[command(
        flatten,
        next_help_heading = "Deprecated: the old form (use a subcommand)"
    )]
    pub flags: CalibrateFlags,
}
