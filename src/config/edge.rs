//! [`EdgeSettings`]: deadlines, caps and head limits on client connections.

use std::time::Duration;

use clap::Args;

use super::parse::{at_least_one, clap_defaults, deadline, seconds};

/// How the edge treats client connections (`src/http/edge/`): deadlines, caps, head
/// limits. A timeout of 0 turns that rule off.
#[derive(Debug, Clone, Args)]
pub struct EdgeSettings {
    /// Seconds a client may take to send a request's head (method, path, headers), from
    /// its first byte (or from connecting, for the first request); then 408
    /// `system_one_request_timeout` and the connection is closed.
    #[arg(long, env = "SYSTEMONE_HEADER_READ_TIMEOUT_SECS", default_value_t = 10.0, value_parser = seconds)]
    pub header_read_timeout_secs: f64,

    /// Seconds a client may take to send a request's body, from the end of its head; then
    /// 408 `system_one_request_timeout`.
    #[arg(long, env = "SYSTEMONE_BODY_READ_TIMEOUT_SECS", default_value_t = 30.0, value_parser = seconds)]
    pub body_read_timeout_secs: f64,

    /// Seconds a keep-alive connection may sit idle between requests before it is closed
    /// (without a response: none is due).
    #[arg(long, env = "SYSTEMONE_IDLE_TIMEOUT_SECS", default_value_t = 60.0, value_parser = seconds)]
    pub idle_timeout_secs: f64,

    /// Most client connections open at once. A connection beyond it is answered 503
    /// `system_one_overloaded` with `Retry-After` and closed; open ones are served as usual.
    #[arg(long, env = "SYSTEMONE_MAX_CONNECTIONS", default_value_t = 4096, value_parser = at_least_one)]
    pub max_connections: usize,

    /// Most API requests (`/v1`, `/v2`) being handled at once, waiting for upstream slots
    /// included; beyond it a request is answered 503 `system_one_overloaded` with
    /// `Retry-After` at once rather than queued. Health, readiness and metrics are not
    /// counted, so an operator can still look in.
    #[arg(long, env = "SYSTEMONE_MAX_CONCURRENT_REQUESTS", default_value_t = 512, value_parser = at_least_one)]
    pub max_concurrent_requests: usize,

    /// MiB that request bodies being decompressed and parsed may hold together (the wire
    /// bytes, the decoded bytes and the parsed JSON, estimated). A 23 KB gzip body can
    /// expand to the whole body limit and parse to more, so without a shared cap 512
    /// concurrent requests could ask for tens of GB. A request that cannot get its share
    /// waits for it up to `--body-read-timeout-secs`, then gets 503 `system_one_overloaded`
    /// with `Retry-After`. 1024 MiB leaves room for about 20 bodies at the 24 MiB limit
    /// (each its text and its value) at once and keeps the service under 1 GB on a
    /// machine it shares with the model server.
    #[arg(long, env = "SYSTEMONE_MAX_BODY_MEMORY_MB", default_value_t = 1024, value_parser = at_least_one)]
    pub max_body_memory_mb: usize,

    /// Most bytes of one request head (request line and headers); beyond it 431
    /// `system_one_headers_too_large`.
    #[arg(long, env = "SYSTEMONE_MAX_HEADER_BYTES", default_value_t = 32 * 1024, value_parser = at_least_one)]
    pub max_header_bytes: usize,

    /// Most header lines in one request head; beyond it 431 `system_one_headers_too_large`.
    #[arg(long, env = "SYSTEMONE_MAX_HEADERS", default_value_t = 100, value_parser = at_least_one)]
    pub max_headers: usize,
}

impl Default for EdgeSettings {
    /// The flags' defaults.
    fn default() -> Self {
        clap_defaults()
    }
}

impl EdgeSettings {
    /// The head deadline (`None`: off).
    pub fn header_read_timeout(&self) -> Option<Duration> {
        deadline(self.header_read_timeout_secs)
    }
    /// The body deadline (`None`: off).
    pub fn body_read_timeout(&self) -> Option<Duration> {
        deadline(self.body_read_timeout_secs)
    }
    /// The idle keep-alive deadline (`None`: off).
    pub fn idle_timeout(&self) -> Option<Duration> {
        deadline(self.idle_timeout_secs)
    }
}
