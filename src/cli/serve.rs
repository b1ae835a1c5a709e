//! `systemone serve`: logging, the listener, signals; the service itself is
//! [`crate::build_state`] + [`crate::app`] + [`crate::serve`].

use tokio::net::TcpListener;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, ServeConfig};
use crate::telemetry::{self, Telemetry};

/// Serves until SIGTERM or ctrl-c.
pub fn run(config: &ServeConfig) -> Result<(), String> {
    return_large_blocks_at_once();
    let runtime = super::serve_runtime(config.worker_threads)?;
    // Dropped when `run` returns: what is still buffered is written before the caller's
    // error line.
    let (_flush, telemetry) = init_tracing(config, runtime.handle())?;
    runtime.block_on(async {
        let served = serve(config).await.map_err(|e| format!("serve: {e}"));
        if let Some(telemetry) = telemetry {
            telemetry.shutdown().await;
        }
        served
    })
}

/// Large allocations (a decoded body, a long string parsed from it) go straight to the
/// system and back, whatever was freed before.
///
/// glibc serves a block over its mmap threshold (128 KiB) with `mmap` and unmaps it on
/// free, but the first such free raises the threshold to the freed size (up to 32 MiB):
/// from then on 24 MiB bodies come from the malloc arenas, which keep freed memory for
/// reuse, fragmented. After bursts of 64 and 128 bodies that expand to 23 MB, the service
/// still held 515–869 MiB 3 s later; with the threshold fixed (which turns the raising off,
/// as glibc documents) it held 20–26 MiB (`cargo bench --bench body_memory`).
/// Setting it in code rather than through `MALLOC_MMAP_THRESHOLD_` makes it hold however
/// the binary is started. A no-op off glibc.
#[allow(unsafe_code)]
fn return_large_blocks_at_once() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets an allocator parameter; it is called before the runtime
    // starts its threads, and with a valid parameter and value.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Logs to stderr in batches ([`super::log`]; the guard writes what is left) and, when
/// traces are on, exports the spans of [`telemetry::TARGET`] from a task on `runtime`
/// ([`crate::telemetry`]), which the log never shows.
fn init_tracing(
    config: &ServeConfig,
    runtime: &tokio::runtime::Handle,
) -> Result<(super::log::Flush, Option<Telemetry>), String> {
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if let Some(quiet) = telemetry::not_in_the_log() {
        filter = filter.add_directive(quiet);
    }
    let (writer, flush) = super::log::batched_stderr();
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer);
    let log = match config.log_format {
        LogFormat::Json => log.json().with_filter(filter).boxed(),
        LogFormat::Text => log.with_filter(filter).boxed(),
    };
    let (traces, telemetry) = telemetry::layer(&config.trace, runtime)?.unzip();
    let layers: Vec<_> = std::iter::once(log).chain(traces).collect();
    tracing_subscriber::registry().with(layers).init();
    if let Some(telemetry) = &telemetry {
        tracing::info!(
            endpoint = telemetry.endpoint(),
            sampler = telemetry.sampler(),
            "exporting traces over OTLP/HTTP (docs/operations/tracing.md)"
        );
        if let Some(warning) = telemetry.warning() {
            tracing::warn!("{warning}");
        }
    }
    Ok((flush, telemetry))
}

async fn serve(config: &ServeConfig) -> Result<(), Box<dyn std::error::Error>> {
    let mut state = crate::build_state(config)?;
    state.ledger = open_ledger(config, &state).await?;
    for model in state.models.iter() {
        let table = model.table.get();
        tracing::info!(
            model = %model.name,
            dialect = model.serving.dialect(),
            labels = table.as_ref().map(|t| t.capacity()),
            options = table.as_ref().map(|t| t.option_capacity()),
            token_table = if model.table.is_auto() { "auto" } else { "file" },
            "serving model"
        );
    }
    // Each model's upkeep (host probe, token-table check) starts now, in the background,
    // so the log says at startup how each host is read, or why it is refused.
    state.models.start_upkeep(state.pipeline.in_flight());
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {} (--listen): {e}", config.listen))?;
    // Scripts wait for this line to learn the bound address (useful with port 0).
    tracing::info!(address = %listener.local_addr()?, "listening");
    let quotas = &state.quotas;
    match quotas.connect().await {
        Ok(()) => tracing::info!(
            store = quotas.store_kind(),
            policy = quotas.status().await.policy,
            "per-key limits and usage counted in this store"
        ),
        Err(e) => tracing::warn!(
            store = quotas.store_kind(),
            error = %e,
            policy = quotas.status().await.policy,
            "the limit store does not answer yet; its failure policy applies until it does"
        ),
    }
    if state.keys.is_open() {
        tracing::warn!("no API keys or tokens configured: the service is open to any caller");
    } else {
        let tokens = state.keys.jwt().is_some();
        tracing::info!(keys = state.keys.len(), tokens, "API keys configured");
    }
    let mut edge = crate::Edge::new(&state);
    // Each model's pool may keep up to --max-in-flight connections.
    edge.fit_to_fd_limit(config.upstream.max_in_flight * state.models.iter().count().max(1));
    let models = state.models.clone();
    crate::serve(
        listener,
        crate::app(state),
        edge,
        shutdown_signal(),
        config.admission.shutdown_grace(),
    )
    .await?;
    // What the position priors learned since their last exchange, before the process ends.
    models.sync_priors().await;
    Ok(())
}

/// The configured decision ledger, opened (migrations applied, writer started), and a
/// line saying where records go.
async fn open_ledger(
    config: &ServeConfig,
    state: &crate::AppState,
) -> Result<crate::ledger::Ledger, String> {
    let settings = &config.ledger;
    let ledger = crate::ledger::Ledger::open(
        settings,
        config.limit_store.state_dir.as_deref(),
        state.metrics.clone(),
        state.models.escalation_thresholds(),
    )
    .await?;
    match ledger.store_kind() {
        Some(store) => tracing::info!(
            store,
            target = ?settings.target(config.limit_store.state_dir.as_deref()).ok(),
            policy = settings.ledger_policy.as_str(),
            key_id = ledger.key().map(|k| k.id()),
            "decisions are recorded in the ledger before they are answered"
        ),
        None => tracing::warn!("--ledger off: no decision is recorded"),
    }
    Ok(ledger)
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
