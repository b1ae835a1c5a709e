//! `systemone tokens build|check`: token tables from a HuggingFace `tokenizer.json`, or
//! built from a running backend's tokenizer.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::backend::llamacpp::LlamaCppBackend;
use crate::backend::vllm::VllmBackend;
use crate::backend::Backend;
use crate::config::BackendKind;
use crate::in_flight::InFlight;
use crate::models::tokens::build::{
    build_with, check, letters_scheme, BuildOptions, LoadedTokenizer, DEFAULT_SEARCH_LIMIT,
};
use crate::models::tokens::live::build_live;
use crate::models::tokens::{MultiTokenScheme, TokenTable};
use crate::secret::Secret;

/// `systemone tokens …`
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Write `token-tables/<name>.json`: the integers that are single tokens after the
    /// prefix, the fixed-width numeral labels (`00`…`99`, `000`…`254`) with the token ids
    /// each adds after the prefix, and the letters `A`…`Z`, `a`…`z` when each is one token
    /// after the prefix. From a `tokenizer.json`, or from a running backend's tokenizer
    /// (`--backend vllm|llamacpp --backend-url …`: what `--token-table auto` builds).
    Build(BuildArgs),
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

/// `systemone tokens build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The model's `tokenizer.json`.
    #[arg(long, required_unless_present = "backend", conflicts_with = "backend")]
    tokenizer: Option<PathBuf>,
    /// Build from a running backend's tokenizer (its `/tokenize`) instead of a file.
    #[arg(long, value_enum, requires = "backend_url")]
    backend: Option<BackendKind>,
    /// The backend's base URL (ending in `/v1`).
    #[arg(long)]
    backend_url: Option<String>,
    /// The backend's id for the model (vLLM needs it; defaults to `--name`).
    #[arg(long)]
    upstream_model: Option<String>,
    /// Bearer key for the backend (never printed).
    #[arg(long, env = "SYSTEMONE_BACKEND_API_KEY", hide_env_values = true)]
    backend_api_key: Option<Secret>,
    /// The table's name (also the default output file name).
    #[arg(long)]
    name: String,
    /// Human-readable tokenizer name recorded in the table (defaults to `--name`, or to
    /// `<backend> <upstream model>` for a backend).
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
}

impl BuildArgs {
    fn options(&self) -> BuildOptions {
        BuildOptions {
            max: self.max,
            search_limit: self.search_limit,
            numeral_widths: if self.no_multi_token {
                Vec::new()
            } else {
                self.numeral_widths.clone()
            },
            letters: !(self.no_multi_token || self.no_letters),
        }
    }
}

/// `systemone tokens build|check`.
pub fn run(command: TokensCommand) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        TokensCommand::Build(args) => {
            let table = match &args.tokenizer {
                Some(path) => from_file(path, &args)?,
                None => from_backend(&args)?,
            };
            let out = args.out.clone();
            let out = out.unwrap_or_else(|| format!("token-tables/{}.json", args.name).into());
            std::fs::write(&out, table.to_json())?;
            println!(
                "wrote {} ({} labels, last {}, tokenizer {})",
                out.display(),
                table.capacity(),
                table.labels.last().map_or(0, |l| l.number),
                table.tokenizer.sha256.as_deref().map_or_else(
                    || table.tokenizer.name.clone(),
                    |sha| format!("sha256 {sha}")
                )
            );
            describe_schemes(&table);
            Ok(())
        }
        TokensCommand::Check { tokenizer, table } => check_command(&tokenizer, &table),
    }
}

/// The table from a `tokenizer.json`, saying why letters were left out when they were.
fn from_file(path: &Path, args: &BuildArgs) -> Result<TokenTable, Box<dyn std::error::Error>> {
    let tk = LoadedTokenizer::from_file(path)?;
    let options = args.options();
    let tokenizer_name = args.tokenizer_name.as_deref().unwrap_or(&args.name);
    let table = build_with(&tk, &args.name, tokenizer_name, &args.prefix, &options)?;
    if options.letters {
        if let Err(why) =
            letters_scheme(|t| tk.encode(t), &args.prefix, &table.prefix_ids, args.max)
        {
            println!("  letters: left out, {why}");
        }
    }
    Ok(table)
}

/// The table from a running backend's tokenizer, as `--token-table auto` builds it.
fn from_backend(args: &BuildArgs) -> Result<TokenTable, Box<dyn std::error::Error>> {
    let (Some(kind), Some(url)) = (args.backend, &args.backend_url) else {
        return Err("--backend needs --backend-url".into());
    };
    let upstream = args
        .upstream_model
        .clone()
        .unwrap_or_else(|| args.name.clone());
    let client = crate::backend::pool::pool(std::time::Duration::from_secs(10), 4)?;
    let key = args.backend_api_key.clone();
    let backend: Box<dyn Backend> =
        match kind {
            BackendKind::Vllm => Box::new(VllmBackend::new(client, url, upstream.clone(), key, 1)),
            BackendKind::Llamacpp => Box::new(LlamaCppBackend::new(
                client,
                url,
                upstream.clone(),
                key,
                true,
                None,
            )),
            BackendKind::Openai => {
                return Err("an OpenAI-compatible host serves no tokenizer: use --tokenizer".into())
            }
            BackendKind::Systemone => return Err(
                "a native System One upstream labels its options itself: it needs no token table"
                    .into(),
            ),
        };
    let default_name = format!("{} {upstream}", kind.as_str());
    let tokenizer_name = args.tokenizer_name.clone().unwrap_or(default_name);
    let in_flight = InFlight::new(BUILD_IN_FLIGHT);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let built = runtime.block_on(build_live(
        backend.as_ref(),
        &in_flight,
        &args.name,
        &tokenizer_name,
        &args.prefix,
        &args.options(),
    ))?;
    Ok(built)
}

/// Tokenize requests `tokens build --backend` keeps in flight.
const BUILD_IN_FLIGHT: usize = 4;

/// One line per multi-token scheme: its labels and how many tokens each takes.
fn describe_schemes(table: &TokenTable) {
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
}

/// `systemone tokens check`: every mismatch printed, non-zero exit when any.
fn check_command(tokenizer: &Path, table: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let tk = LoadedTokenizer::from_file(tokenizer)?;
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
