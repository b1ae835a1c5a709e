//! The `systemone` binary: parse the configuration, set up logging, serve.

use clap::Parser;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use systemone::config::{Cli, Command, LogFormat, ServeConfig, TokensCommand};
use systemone::tokens::build::{build, check, LoadedTokenizer};
use systemone::tokens::TokenTable;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(config) => {
            init_tracing(config.log_format);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("systemone: cannot start the runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(&config)) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("systemone: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::Tokens(command) => match tokens(command) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("systemone tokens: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Eval(args) => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("systemone: cannot start the runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            match runtime.block_on(systemone::eval::run(&args)) {
                Ok(outcome) => {
                    print!("{}", outcome.table);
                    println!(
                        "report: {}, diagram: {}",
                        args.report.display(),
                        args.diagram.display()
                    );
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("systemone eval: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::Calibrate(args) => match systemone::calibrate_cmd::run(&args) {
            Ok(summary) => {
                print!("{summary}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("systemone calibrate: {e}");
                std::process::ExitCode::FAILURE
            }
        },
    }
}

/// `systemone tokens build|check`.
fn tokens(command: TokensCommand) -> Result<(), Box<dyn std::error::Error>> {
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

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn serve(config: &ServeConfig) -> Result<(), Box<dyn std::error::Error>> {
    let state = systemone::build_state(config)?;
    for model in state.models.iter() {
        tracing::info!(
            model = %model.name,
            dialect = model.backend.dialect(),
            labels = model.table.capacity(),
            "serving model"
        );
    }
    let listener = TcpListener::bind(config.listen).await?;
    // Scripts wait for this line to learn the bound address (useful with port 0).
    tracing::info!(address = %listener.local_addr()?, "listening");
    if state.keys.is_open() {
        tracing::warn!("no API keys configured: the service is open to any caller");
    } else {
        tracing::info!(keys = state.keys.len(), "API keys configured");
    }
    systemone::serve(
        listener,
        systemone::app(state),
        shutdown_signal(),
        config.gateway.shutdown_grace(),
    )
    .await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
