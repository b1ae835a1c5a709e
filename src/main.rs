//! The `systemone` binary: parse the command line, run it ([`systemone::cli::run`]).

use clap::Parser;

fn main() -> std::process::ExitCode {
    systemone::cli::run(systemone::cli::Cli::parse())
}
