//! The subcommands, and running the one the command line names.

use std::process::ExitCode;

use clap::Subcommand;

use super::{batch, calibrate, docs, eval, ledger, serve, tokens, usage, Cli};
use crate::config::ServeConfig;

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve `POST /v1/systemone` in front of a chat-completion backend.
    Serve(Box<ServeConfig>),
    /// Build or check token tables from a HuggingFace `tokenizer.json`.
    #[command(subcommand)]
    Tokens(tokens::TokensCommand),
    /// Fit from labelled raw probabilities (JSON lines) or a ledger: a model's temperature
    /// `formula`, a task's `profile`, a model's position `prior`, or `check` formulas.
    Calibrate(Box<calibrate::CalibrateCommand>),
    /// Score labelled System One requests against a service (running, or in-process), with
    /// raw probabilities or a named calibration profile.
    Eval(Box<eval::EvalArgs>),
    /// Print the OpenAPI 3.1 description of every route (what `GET /openapi.json` serves).
    Openapi,
    /// Print a running service's per-key usage (`GET /v1/usage`) as a table or CSV.
    Usage(usage::UsageArgs),
    /// Run a JSONL file as a batch job on a running service: upload, follow with a
    /// progress bar, write the output and error files.
    Batch(Box<batch::BatchArgs>),
    /// Read the decision ledger: `export` its labelled rows as JSON lines.
    #[command(subcommand)]
    Ledger(ledger::LedgerCommand),
    /// Write the book's generated reference pages (flags, error codes, metrics) under
    /// `docs/`, or with `--check` fail when a committed one is stale.
    Docs(docs::DocsArgs),
}

/// Runs one parsed command line; the exit code says whether it succeeded (the reason is
/// already on stderr).
pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Serve(config) => serve::run(&config),
        Command::Tokens(command) => tokens::run(command).map_err(|e| format!("tokens: {e}")),
        Command::Eval(args) => eval::run_command(&args),
        Command::Calibrate(args) => calibrate::run_command(&args),
        Command::Openapi => {
            println!("{}", crate::http::openapi::document());
            Ok(())
        }
        Command::Usage(args) => usage::run_command(&args),
        Command::Batch(args) => batch::run_command(&args),
        Command::Ledger(command) => ledger::run(command).map_err(|e| format!("ledger: {e}")),
        Command::Docs(args) => docs::run_command(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("systemone {e}");
            ExitCode::FAILURE
        }
    }
}
