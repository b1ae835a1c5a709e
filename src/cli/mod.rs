//! Every command of the `systemone` binary and its arguments: `serve`, `tokens`, `eval`,
//! `calibrate`, `usage`, `ledger`, `batch`, `openapi`, `docs`. The top layer: nothing outside `cli/` imports it. The offline commands'
//! maths lives in [`crate::calibration::fit`].

pub mod batch;
pub mod calibrate;
mod command;
pub mod docs;
pub mod eval;
pub mod ledger;
mod log;
mod prior;
mod reads;
mod runtime;
pub mod serve;
pub mod tokens;
pub mod usage;

use clap::Parser;

pub use command::{run, Command};
use runtime::{runtime, serve_runtime};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_is_well_formed() {
        // clap checks flag names, env twins and defaults across every subcommand.
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
