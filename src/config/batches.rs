//! [`BatchSettings`]: how batch jobs (`/v1/batches`) share the service with online callers,
//! and how their progress is committed.

use clap::Args;

use super::parse::clap_defaults;

/// Batch jobs' limits and scheduling.
#[derive(Debug, Clone, Args)]
pub struct BatchSettings {
    /// Share of the upstream in-flight cap (`--max-in-flight`) batch work may fill: a batch
    /// line starts only while fewer than `share × cap` upstream reads (online and batch
    /// together) are in flight, so online callers always have the rest of the cap, and a
    /// batch takes what online traffic leaves of its share.
    #[arg(long, env = "SYSTEMONE_BATCH_SHARE", default_value_t = 0.5, value_parser = share)]
    pub batch_share: f64,

    /// Milliseconds after an online answer in which no batch line starts (nor while any
    /// online request is in progress, from its arrival to its answer): a caller sending
    /// requests one after another sends its next within this gap (9-30 ms measured on
    /// llama-server), and a line started there would hold the server ahead of it. Lines
    /// already running are not stopped. Under continuous online traffic a batch waits; 0
    /// lets lines start as soon as no online request is in progress.
    #[arg(long, env = "SYSTEMONE_BATCH_ONLINE_GAP_MS", default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub batch_online_gap_ms: u64,

    /// Lines of one batch run at once, at most.
    #[arg(long, env = "SYSTEMONE_BATCH_CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch_concurrency: u32,

    /// Lines of every batch together run at once, at most.
    #[arg(long, env = "SYSTEMONE_BATCH_MAX_CONCURRENCY", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub batch_max_concurrency: u32,

    /// Largest batch input file, in MB (after decompression), as OpenAI's 200 MB.
    #[arg(long, env = "SYSTEMONE_BATCH_MAX_FILE_MB", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=2048))]
    pub batch_max_file_mb: u64,

    /// Finished lines committed together, at most: a group commit is one transaction (one
    /// fsync) for up to this many lines' progress and outputs.
    #[arg(long, env = "SYSTEMONE_BATCH_COMMIT_LINES", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_commit_lines: u32,

    /// Milliseconds a finished line may wait for others to share its commit.
    #[arg(long, env = "SYSTEMONE_BATCH_COMMIT_MS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub batch_commit_ms: u64,
}

impl Default for BatchSettings {
    /// The flags' defaults.
    fn default() -> Self {
        clap_defaults()
    }
}

impl BatchSettings {
    /// Most bytes of an input file.
    pub fn max_file_bytes(&self) -> usize {
        usize::try_from(self.batch_max_file_mb.saturating_mul(1_000_000)).unwrap_or(usize::MAX)
    }
}

/// A share in (0, 1].
fn share(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not in (0, 1]"))
    }
}
