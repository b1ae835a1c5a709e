//! `systemone ledger export` and `backup`, and the decision ledger as a source of labelled rows for
//! `calibrate --from-ledger` (the same JSON lines `calibrate --data` reads, so a fit from
//! the ledger and one from its export are the same fit).

use clap::{Args, Subcommand};

use crate::config::LedgerTarget;
use crate::ledger::query::Filter;
use crate::ledger::rows::{labelled, LabelledRow, Probabilities};
use crate::ledger::store::Store;

/// `systemone ledger …`
#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Print the labelled rows (answered questions with a current outcome) as JSON lines,
    /// the input of `systemone calibrate --data`.
    Export(ExportArgs),
    /// Write a consistent copy of an SQLite ledger to a new file while the service runs
    /// (SQLite's `VACUUM INTO`), checked with `PRAGMA integrity_check`. Never copy the live
    /// file (or copy over it): a copy taken mid-commit, or put back in place, is corrupt.
    Backup(BackupArgs),
}

/// `systemone ledger backup …`
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The ledger: `sqlite:PATH`.
    #[arg(long, env = "SYSTEMONE_LEDGER", hide_env_values = true)]
    pub ledger: LedgerTarget,
    /// The new file to write (must not exist). To restore, stop the service (or not) and
    /// move the copy in place of the ledger file (`mv`, a new file), removing its `-wal`
    /// and `-shm`; never copy bytes over the live file.
    #[arg(long)]
    pub to: std::path::PathBuf,
}

/// `systemone ledger export …`
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The ledger: `sqlite:PATH` or `postgres://…` (redacted in errors).
    #[arg(long, env = "SYSTEMONE_LEDGER", hide_env_values = true)]
    pub ledger: LedgerTarget,
    /// Only decisions at or after this instant: Unix milliseconds or a UTC date YYYY-MM-DD.
    #[arg(long)]
    pub since: Option<String>,
    /// Only decisions this configured model served.
    #[arg(long)]
    pub model: Option<String>,
}

/// Runs a `ledger` command.
pub fn run(command: LedgerCommand) -> Result<(), String> {
    match command {
        LedgerCommand::Export(args) => {
            let text = rows_jsonl(&args.ledger, args.model.as_deref(), args.since.as_deref())?;
            print!("{text}");
            Ok(())
        }
        LedgerCommand::Backup(args) => {
            let records = super::runtime()?.block_on(backup(&args.ledger, &args.to))?;
            println!("{records} records backed up to {}", args.to.display());
            Ok(())
        }
    }
}

/// Backs `target` up to `to` and checks the copy; returns how many records it holds.
async fn backup(target: &LedgerTarget, to: &std::path::Path) -> Result<i64, String> {
    let store = open(target).await?;
    store
        .backup(to)
        .await
        .map_err(|e| format!("--to {}: {e}", to.display()))?;
    store.pool().close().await;
    let copy = Store::sqlite(to)
        .await
        .map_err(|e| format!("--to {}: {e}", to.display()))?;
    let checked: String = sqlx::query_scalar("PRAGMA integrity_check(1)")
        .fetch_one(&copy.pool())
        .await
        .map_err(|e| format!("--to {}: {e}", to.display()))?;
    if checked != "ok" {
        return Err(format!(
            "--to {}: the copy fails its integrity check: {checked}",
            to.display()
        ));
    }
    let records: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM decisions")
        .fetch_one(&copy.pool())
        .await
        .map_err(|e| format!("--to {}: {e}", to.display()))?;
    copy.pool().close().await;
    Ok(records)
}

/// The labelled rows (raw probabilities) of `target`'s decisions (of `model`, since
/// `since`) as JSON lines.
pub(super) fn rows_jsonl(
    target: &LedgerTarget,
    model: Option<&str>,
    since: Option<&str>,
) -> Result<String, String> {
    let rows = super::runtime()?.block_on(rows(target, model, since, Probabilities::Raw))?;
    let mut text = String::new();
    for row in rows {
        text.push_str(&serde_json::to_string(&row).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    Ok(text)
}

/// The labelled rows of `target`'s decisions (of `model`, since `since`).
pub(super) async fn rows(
    target: &LedgerTarget,
    model: Option<&str>,
    since: Option<&str>,
    probabilities: Probabilities,
) -> Result<Vec<LabelledRow>, String> {
    let filter = filter(model, since)?;
    let store = open(target).await?;
    labelled(&store, &filter, probabilities)
        .await
        .map_err(|e| format!("--ledger {target:?}: {e}"))
}

/// The records of `model` (every model's without one) at or after `since`: Unix
/// milliseconds or a UTC date.
pub(super) fn filter(model: Option<&str>, since: Option<&str>) -> Result<Filter, String> {
    let since_ms = match since {
        None => None,
        Some(text) => Some(crate::days::instant_ms(text).ok_or_else(|| {
            format!("--since must be Unix milliseconds or a UTC date YYYY-MM-DD, got {text:?}")
        })?),
    };
    Ok(Filter {
        model: model.map(str::to_owned),
        since_ms,
        ..Filter::default()
    })
}

/// Opens the ledger database `target` names.
pub(super) async fn open(target: &LedgerTarget) -> Result<Store, String> {
    let opened = match target {
        LedgerTarget::Sqlite(path) => Store::sqlite(path).await,
        LedgerTarget::Postgres(url) => Store::postgres(url.expose()).await,
        LedgerTarget::Off | LedgerTarget::Default => {
            return Err("--ledger: name the database (sqlite:PATH or postgres://…)".into())
        }
    };
    opened.map_err(|e| format!("--ledger {target:?}: {e}"))
}
