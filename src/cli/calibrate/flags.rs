//! The old form of `systemone calibrate`, kept for one release: every job's flags on one
//! command, the job picked by `--profile NAME`, `--prior` or `--check F` (none: the
//! formula). It reads as the subcommand it stands for ([`CalibrateFlags::job`]), so both
//! forms run the same code, and says once on stderr which subcommand to use instead.

use std::path::PathBuf;

use clap::Args;

use super::args::{CheckArgs, FormulaArgs, Job, PriorArgs, ProfileArgs, ProfileFit, RowsArgs};
use crate::config::{Layout, LedgerTarget};

/// The line the old form prints on stderr.
pub const DEPRECATED: &str = "warning: `systemone calibrate` with job flags is deprecated and goes in the next release; use `calibrate formula`, `calibrate profile NAME`, `calibrate prior` or `calibrate check FORMULA…`";

/// `systemone calibrate --data … --model …` (deprecated: the subcommands replace it).
#[derive(Debug, Clone, Args)]
pub struct CalibrateFlags {
    /// Deprecated form: `calibrate formula|profile|check --data`.
    #[arg(long, required_unless_present = "from_ledger")]
    pub data: Option<PathBuf>,
    /// Deprecated form: `calibrate formula|profile|check|prior --from-ledger`.
    #[arg(long, conflicts_with = "data")]
    pub from_ledger: Option<LedgerTarget>,
    /// Deprecated form: `calibrate … --since`.
    #[arg(long, requires = "from_ledger")]
    pub since: Option<String>,
    /// Deprecated form: `calibrate … --model`.
    #[arg(long, required = true)]
    pub model: Option<String>,
    /// Deprecated form: `calibrate formula|profile|prior --out`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Deprecated form: `calibrate profile NAME`.
    #[arg(long)]
    pub profile: Option<String>,
    /// Deprecated form: `calibrate profile`'s flags.
    #[command(flatten)]
    pub fit: ProfileFit,
    /// Deprecated form: `calibrate check FORMULA…`.
    #[arg(long)]
    pub check: Vec<String>,
    /// Deprecated form: `calibrate formula|profile --layout`.
    #[arg(long, value_enum, default_value_t = Layout::Accuracy)]
    pub layout: Layout,
    /// Deprecated form: `calibrate prior`.
    #[arg(long, requires = "from_ledger", conflicts_with_all = ["profile", "check"])]
    pub prior: bool,
    /// Deprecated form: `calibrate prior --tenant`.
    #[arg(long, requires = "prior")]
    pub tenant: Option<String>,
}

impl CalibrateFlags {
    /// The subcommand these flags stand for: `--prior` first, then `--check`, then
    /// `--profile`, else the formula (the order the one command tried them in).
    pub fn job(&self) -> Result<Job, String> {
        let model = self.model.clone().ok_or("--model is needed")?;
        if self.prior {
            let from_ledger = self
                .from_ledger
                .clone()
                .ok_or("--prior needs --from-ledger")?;
            return Ok(Job::Prior(PriorArgs {
                from_ledger,
                since: self.since.clone(),
                model,
                out: self.out.clone(),
                tenant: self.tenant.clone(),
            }));
        }
        let rows = RowsArgs {
            data: self.data.clone(),
            from_ledger: self.from_ledger.clone(),
            since: self.since.clone(),
            model,
        };
        if !self.check.is_empty() {
            let formulas = self.check.clone();
            return Ok(Job::Check(CheckArgs { formulas, rows }));
        }
        let formula = FormulaArgs {
            rows,
            out: self.out.clone(),
            layout: self.layout,
        };
        Ok(match &self.profile {
            None => Job::Formula(formula),
            Some(name) => Job::Profile(ProfileArgs {
                name: name.clone(),
                formula,
                fit: self.fit.clone(),
            }),
        })
    }
}
