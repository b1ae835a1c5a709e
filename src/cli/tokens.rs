//! `systemone tokens build|check`: token tables from a HuggingFace `tokenizer.json`.

use std::path::PathBuf;

use clap::Subcommand;

use crate::models::tokens::build::{build, check, LoadedTokenizer, DEFAULT_SEARCH_LIMIT};
use crate::models::tokens::TokenTable;

/// `systemone tokens …`
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Write `token-tables/<name>.json`: the integers that are single tokens after the prefix.
    Build {
        /// The model's `tokenizer.json`.
        #[arg(long)]
        tokenizer: PathBuf,
        /// The table's name (also the default output file name).
        #[arg(long)]
        name: String,
        /// Human-readable tokenizer name recorded in the table (defaults to `--name`).
        #[arg(long)]
        tokenizer_name: Option<String>,
        /// The assistant prefill the labels follow.
        #[arg(long, default_value = "answer=")]
        prefix: String,
        /// Most labels to collect.
        #[arg(long, default_value_t = 255)]
        max: usize,
        /// Integers below this are tried.
        #[arg(long, default_value_t = DEFAULT_SEARCH_LIMIT)]
        search_limit: u32,
        /// Output file (default `token-tables/<name>.json`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Verify a table against a tokenizer; exits non-zero on any mismatch.
    Check {
        /// The model's `tokenizer.json`.
        #[arg(long)]
        tokenizer: PathBuf,
        /// The table file.
        #[arg(long)]
        table: PathBuf,
    },
}

/// `systemone tokens build|check`.
pub fn run(command: TokensCommand) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        TokensCommand::Build {
            tokenizer,
            name,
            tokenizer_name,
            prefix,
            max,
            search_limit,
            out,
        } => {
            let tk = LoadedTokenizer::from_file(&tokenizer)?;
            let table = build(
                &tk,
                &name,
                tokenizer_name.as_deref().unwrap_or(&name),
                &prefix,
                max,
                search_limit,
            )?;
            let out = out.unwrap_or_else(|| format!("token-tables/{name}.json").into());
            std::fs::write(&out, table.to_json())?;
            println!(
                "wrote {} ({} labels, last {}, tokenizer sha256 {})",
                out.display(),
                table.capacity(),
                table.labels.last().map_or(0, |l| l.number),
                tk.sha256
            );
            Ok(())
        }
        TokensCommand::Check { tokenizer, table } => {
            let tk = LoadedTokenizer::from_file(&tokenizer)?;
            let table = TokenTable::load(&table.display().to_string())?;
            let problems = check(&tk, &table)?;
            if problems.is_empty() {
                println!(
                    "ok: {} labels of {} match the tokenizer",
                    table.capacity(),
                    table.name
                );
                Ok(())
            } else {
                for p in &problems {
                    eprintln!("mismatch: {p}");
                }
                Err(format!("{} mismatches", problems.len()).into())
            }
        }
    }
}
