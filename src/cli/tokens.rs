//! `systemone tokens build|check`: token tables from a HuggingFace `tokenizer.json`.

use std::path::PathBuf;

use clap::Subcommand;

use crate::models::tokens::build::{
    build_with, check, letters_scheme, BuildOptions, LoadedTokenizer, DEFAULT_SEARCH_LIMIT,
};
use crate::models::tokens::{MultiTokenScheme, TokenTable};

/// `systemone tokens …`
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Write `token-tables/<name>.json`: the integers that are single tokens after the
    /// prefix, the fixed-width numeral labels (`00`…`99`, `000`…`254`) with the token ids
    /// each adds after the prefix, and the letters `A`…`Z`, `a`…`z` when each is one token
    /// after the prefix.
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
        /// Most labels to collect (single-token, and per multi-token scheme).
        #[arg(long, default_value_t = 255)]
        max: usize,
        /// Widths of the fixed-width numeral schemes to write (`2`: `00`…`99`).
        #[arg(long, value_delimiter = ',', default_value = "2,3")]
        numeral_widths: Vec<usize>,
        /// Write no multi-token schemes (single-token labels only).
        #[arg(long)]
        no_multi_token: bool,
        /// Leave the letters scheme out even where the tokenizer allows it.
        #[arg(long)]
        no_letters: bool,
        /// Integers below this are tried.
        #[arg(long, default_value_t = DEFAULT_SEARCH_LIMIT)]
        search_limit: u32,
        /// Output file (default `token-tables/<name>.json`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Verify a table against a tokenizer (prefix, single-token labels and every multi-token
    /// label); exits non-zero on any mismatch.
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
            numeral_widths,
            no_multi_token,
            no_letters,
            search_limit,
            out,
        } => {
            let tk = LoadedTokenizer::from_file(&tokenizer)?;
            let options = BuildOptions {
                max,
                search_limit,
                numeral_widths: if no_multi_token {
                    Vec::new()
                } else {
                    numeral_widths
                },
                letters: !(no_multi_token || no_letters),
            };
            let table = build_with(
                &tk,
                &name,
                tokenizer_name.as_deref().unwrap_or(&name),
                &prefix,
                &options,
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
            if options.letters {
                if let Err(why) = letters_scheme(|t| tk.encode(t), &prefix, &table.prefix_ids, max)
                {
                    println!("  letters: left out, {why}");
                }
            }
            for scheme in &table.multi_token {
                let lengths = match token_lengths(scheme) {
                    (a, b) if a == b => format!("{a}"),
                    (a, b) => format!("{a} to {b}"),
                };
                println!(
                    "  {}: {} labels {:?}…{:?}, prefix-free, {lengths} tokens each{}",
                    scheme.describe(),
                    scheme.capacity(),
                    scheme.labels.first().map_or("", |l| l.text.as_str()),
                    scheme.labels.last().map_or("", |l| l.text.as_str()),
                    if scheme.one_token_per_digit {
                        " (one per character)"
                    } else {
                        " (not one per character)"
                    }
                );
            }
            Ok(())
        }
        TokensCommand::Check { tokenizer, table } => {
            let tk = LoadedTokenizer::from_file(&tokenizer)?;
            let table = TokenTable::load(&table.display().to_string())?;
            let problems = check(&tk, &table)?;
            if problems.is_empty() {
                println!(
                    "ok: {} labels and {} multi-token labels ({}) of {} match the tokenizer",
                    table.capacity(),
                    table.multi_label_count(),
                    schemes(&table),
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

/// The fewest and most tokens a label of `scheme` has.
fn token_lengths(scheme: &MultiTokenScheme) -> (usize, usize) {
    let lengths = scheme.labels.iter().map(|l| l.ids.len());
    (
        lengths.clone().min().unwrap_or(0),
        lengths.max().unwrap_or(0),
    )
}

/// The table's schemes for a message: `numerals width 2, numerals width 3` (or `none`).
fn schemes(table: &TokenTable) -> String {
    if table.multi_token.is_empty() {
        return "none".into();
    }
    let names: Vec<String> = table
        .multi_token
        .iter()
        .map(MultiTokenScheme::describe)
        .collect();
    names.join(", ")
}
