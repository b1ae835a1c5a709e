//! Every command of the `systemone` binary and its arguments: `serve`, `tokens`, `eval`,
//! `calibrate`, `usage`. The top layer: nothing outside `cli/` imports it. The offline commands'
//! maths ([`fit`]) lives here too, beside the commands that fit.

pub mod calibrate;
pub mod docs;
pub mod eval;
pub mod ledger;
mod log;
pub mod serve;
pub mod tokens;
pub mod usage;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::ServeConfig;

/// The `systemone` command line.
#[derive(Debug, Parser)]
#[command(
    name = "systemone",
    version,
    about = "System One semantics over any chat LLM"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve `POST /v1/systemone` in front of a chat-completion backend.
    Serve(Box<ServeConfig>),
    /// Build or check token tables from a HuggingFace `tokenizer.json`.
    #[command(subcommand)]
    Tokens(tokens::TokensCommand),
    /// Fit a model's temperature formula from labelled raw probabilities (JSON lines) and
    /// write its calibration file.
    Calibrate(calibrate::CalibrateArgs),
    /// Score labelled System One requests against a service (running, or in-process), with
    /// raw probabilities or a named calibration profile.
    Eval(Box<eval::EvalArgs>),
    /// Print the OpenAPI 3.1 description of every route (what `GET /openapi.json` serves).
    Openapi,
    /// Print a running service's per-key usage (`GET /v1/usage`) as a table or CSV.
    Usage(usage::UsageArgs),
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

/// A multi-threaded tokio runtime for the commands that need one.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Runtime::new().map_err(|e| format!("cannot start the runtime: {e}"))
}

/// The service's runtime: `workers` async threads, else half the CPUs; with 0, or by
/// default where half the CPUs is one or none, tokio's current-thread runtime: one thread
/// serves everything, with no worker to hand work to or wake, the cheapest per answer where
/// one worker would do (see `--worker-threads`).
fn serve_runtime(workers: Option<u16>) -> Result<tokio::runtime::Runtime, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = workers.map_or(default_workers(cpus), usize::from);
    let mut builder = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut multi = tokio::runtime::Builder::new_multi_thread();
        multi.worker_threads(workers);
        multi
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// `--worker-threads` when not given: half of `cpus`, or 0 (one thread) where that is one
/// or none.
fn default_workers(cpus: usize) -> usize {
    match cpus / 2 {
        0 | 1 => 0,
        half => half,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_is_well_formed() {
        // clap checks flag names, env twins and defaults across every subcommand.
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn zero_workers_is_the_current_thread_runtime_and_more_is_multi_threaded() {
        use tokio::runtime::RuntimeFlavor;
        let flavor = |workers| {
            serve_runtime(workers)
                .expect("a runtime")
                .handle()
                .runtime_flavor()
        };
        assert_eq!(flavor(Some(0)), RuntimeFlavor::CurrentThread);
        assert_eq!(flavor(Some(1)), RuntimeFlavor::MultiThread);
        assert_eq!(flavor(Some(3)), RuntimeFlavor::MultiThread);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = u16::try_from(default_workers(cpus)).expect("fits");
        assert_eq!(flavor(None), flavor(Some(workers)));
    }

    #[test]
    fn the_default_is_one_thread_up_to_three_cpus_then_half_of_them() {
        let defaults: Vec<usize> = [1, 2, 3, 4, 5, 16].map(default_workers).to_vec();
        assert_eq!(defaults, [0, 0, 0, 2, 2, 8]);
    }
}
