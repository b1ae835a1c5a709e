//! [`LedgerSettings`]: where the decision ledger is kept, what it keeps, and how long.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::error::ConfigError;
use super::limit_store::FailurePolicy;
use super::parse::clap_defaults;
use crate::secret::Secret;

/// Where the decision ledger is kept: `sqlite:PATH`, `postgres://…` or `off`.
#[derive(Clone, PartialEq, Eq)]
pub enum LedgerTarget {
    /// No ledger: nothing is recorded.
    Off,
    /// The default: an embedded SQLite file, `ledger.sqlite` under `--state-dir` (else the
    /// user's state directory, see [`LedgerSettings::target`]).
    Default,
    /// An embedded SQLite file at this path.
    Sqlite(PathBuf),
    /// A PostgreSQL URL (redacted in `Debug`: it may hold a password).
    Postgres(Secret),
}

impl std::fmt::Debug for LedgerTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerTarget::Off => f.write_str("off"),
            LedgerTarget::Default => f.write_str("default"),
            LedgerTarget::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            LedgerTarget::Postgres(_) => f.write_str("postgres://[redacted]"),
        }
    }
}

impl std::str::FromStr for LedgerTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "off" {
            return Ok(LedgerTarget::Off);
        }
        if s == "default" {
            return Ok(LedgerTarget::Default);
        }
        if let Some(path) = s.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err("sqlite: needs a file path (sqlite:PATH)".into());
            }
            return Ok(LedgerTarget::Sqlite(PathBuf::from(path)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(LedgerTarget::Postgres(Secret::new(s)));
        }
        Err("expected off, sqlite:PATH or postgres://… (the value is not repeated: it may hold a password)".into())
    }
}

/// Whether the ledger keeps the request body itself (`--ledger-inputs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LedgerInputs {
    /// Keyed hashes of the caller's text only: names, labels and the body.
    #[default]
    #[value(name = "hashes")]
    Hashes,
    /// The validated request too (state, questions, labels): only where the operator may
    /// keep callers' content.
    #[value(name = "full")]
    Full,
}

/// The decision ledger: a record per answered or refused request, durable before the
/// answer leaves (docs/operations/ledger.md).
#[derive(Debug, Clone, Args)]
pub struct LedgerSettings {
    /// Where decisions are recorded: `sqlite:PATH`, `postgres://…` (many replicas; needs
    /// `SYSTEMONE_LEDGER_KEY`) or `off` [default: `ledger.sqlite` under `--state-dir`,
    /// else under `$XDG_STATE_HOME/systemone` or `~/.local/state/systemone`].
    #[arg(
        long,
        env = "SYSTEMONE_LEDGER",
        hide_env_values = true,
        default_value = "default",
        hide_default_value = true
    )]
    pub ledger: LedgerTarget,

    /// Milliseconds a request waits for its record to be committed before the ledger
    /// policy applies.
    #[arg(long, env = "SYSTEMONE_LEDGER_TIMEOUT_MS", default_value_t = 1000)]
    pub ledger_timeout_ms: u64,

    /// What to do when the ledger is down or slower than its timeout: `fail_closed` (503
    /// `system_one_ledger_unavailable`: nothing is answered that is not on record) or
    /// `fail_open` (answer, and count the miss).
    #[arg(long, env = "SYSTEMONE_LEDGER_POLICY", value_enum, default_value_t = FailurePolicy::FailClosed)]
    pub ledger_policy: FailurePolicy,

    /// Microseconds the group-commit writer waits, when more than one record is waiting,
    /// for more to join the batch before it writes (PostgreSQL's `commit_delay`, with one
    /// sibling): fewer, larger commits for less CPU per answer under load, at up to this
    /// much added latency. A lone record never waits; 0 writes at once. 500 was the best of
    /// 0, 500 and 2000 at 64 callers on CPU and p50 alike (docs/benchmarks.md).
    #[arg(long, env = "SYSTEMONE_LEDGER_COMMIT_DELAY_US", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub ledger_commit_delay_us: u64,

    /// Days a record is kept; older ones are deleted in the background (0 keeps them all).
    #[arg(long, env = "SYSTEMONE_LEDGER_RETENTION_DAYS", default_value_t = 400)]
    pub ledger_retention_days: u64,

    /// `hashes` (keyed hashes of names, labels and the body) or `full` (the validated
    /// request too, kept `--ledger-inputs-retention-days`).
    #[arg(long, env = "SYSTEMONE_LEDGER_INPUTS", value_enum, default_value_t = LedgerInputs::Hashes)]
    pub ledger_inputs: LedgerInputs,

    /// Days the full inputs (`--ledger-inputs full`) are kept before they are erased from
    /// their records (the hashes stay).
    #[arg(
        long,
        env = "SYSTEMONE_LEDGER_INPUTS_RETENTION_DAYS",
        default_value_t = 30
    )]
    pub ledger_inputs_retention_days: u64,

    /// The key of the ledger's keyed hashes (HMAC-SHA256). Without it the embedded ledger
    /// makes one and keeps it beside its file (`ledger.key`); PostgreSQL refuses to start
    /// without it (replicas must hash alike). Redacted in every log and `Debug`.
    #[arg(long, env = "SYSTEMONE_LEDGER_KEY", hide_env_values = true)]
    pub ledger_key: Option<Secret>,

    /// The calibration watch's reference window, `FROM..UNTIL` (each Unix milliseconds or a
    /// UTC date `YYYY-MM-DD`, its midnight): the traffic every window's drift figures
    /// (PSI, the EM prior, CBPE) compare against. Without it, the first full week (Monday
    /// to Monday, UTC) after the first answer the ledger holds.
    #[arg(long, env = "SYSTEMONE_CALIBRATION_REFERENCE", value_parser = parse_reference)]
    pub calibration_reference: Option<(i64, i64)>,

    /// Runs the ledger without the calibration watch: no figures, gauges, `/v1/calibration`
    /// (404) or `/calibration` charts. The watch costs a few additions per answer on the
    /// ledger's writer; this flag is there to measure that cost, or to shed it.
    #[arg(long, env = "SYSTEMONE_NO_CALIBRATION_WATCH")]
    pub no_calibration_watch: bool,

    /// How often the retention sweep runs (at startup, then on this interval). Not a flag:
    /// hourly in a service; tests shorten it to see a sweep happen.
    #[arg(skip = LEDGER_RETENTION_EVERY)]
    pub ledger_retention_every: Duration,
}

/// The retention sweep's interval in a service.
pub const LEDGER_RETENTION_EVERY: Duration = Duration::from_secs(3_600);

impl Default for LedgerSettings {
    /// The flags' defaults: the embedded file, `fail_closed`, 1 s, 400 days.
    fn default() -> Self {
        clap_defaults()
    }
}

impl LedgerSettings {
    /// The bound on one request's wait for its record.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.ledger_timeout_ms.max(1))
    }

    /// How long the writer waits for a batch to fill (`--ledger-commit-delay-us`).
    pub fn commit_delay(&self) -> Duration {
        Duration::from_micros(self.ledger_commit_delay_us)
    }

    /// The ledger to open: `--ledger`, the default resolved against `state_dir` and the
    /// user's state directory (`None`: off).
    pub fn target(&self, state_dir: Option<&std::path::Path>) -> Result<LedgerTarget, ConfigError> {
        if self.ledger != LedgerTarget::Default {
            return Ok(self.ledger.clone());
        }
        let dir = match state_dir {
            Some(dir) => dir.to_path_buf(),
            None => user_state_dir().ok_or_else(|| {
                ConfigError::Invalid(
                    "--ledger: neither --state-dir, XDG_STATE_HOME nor HOME is set; name a file (sqlite:PATH) or say off".into(),
                )
            })?,
        };
        Ok(LedgerTarget::Sqlite(dir.join("ledger.sqlite")))
    }
}

/// `FROM..UNTIL` as Unix milliseconds, `FROM` before `UNTIL`.
pub fn parse_reference(text: &str) -> Result<(i64, i64), String> {
    let (from, until) = text
        .split_once("..")
        .ok_or("expected FROM..UNTIL (Unix milliseconds or UTC dates YYYY-MM-DD)")?;
    let instant = |t: &str| {
        crate::days::instant_ms(t)
            .ok_or_else(|| format!("{t:?} is neither Unix milliseconds nor a UTC date YYYY-MM-DD"))
    };
    let (from, until) = (instant(from)?, instant(until)?);
    if from >= until {
        return Err("FROM must be before UNTIL".into());
    }
    Ok((from, until))
}

/// `$XDG_STATE_HOME/systemone`, else `$HOME/.local/state/systemone`.
fn user_state_dir() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(state) = non_empty("XDG_STATE_HOME") {
        return Some(PathBuf::from(state).join("systemone"));
    }
    non_empty("HOME").map(|home| PathBuf::from(home).join(".local/state/systemone"))
}
