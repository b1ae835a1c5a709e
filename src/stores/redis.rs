//! A Redis client for `--redis-url`, and its connection manager's settings, as both the
//! limits and the prior use them (the `redis` crate's tokio connection manager, which
//! reconnects by itself; `quota/redis.rs` says why that crate).

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;

use crate::config::ConfigError;
use crate::secret::Secret;

/// The client for `url`, checked here (no connection is made). The error never echoes the
/// URL: it may carry a password.
pub fn client(url: &Secret) -> Result<redis::Client, ConfigError> {
    redis::Client::open(url.expose()).map_err(|e| {
        ConfigError::Invalid(format!(
            "--redis-url is not a Redis URL (redis://[user:password@]host:port[/db]): {}",
            e.category()
        ))
    })
}

/// A connection manager's bounds: on connecting, on one response, and how often a
/// command is retried on a dropped connection.
pub fn manager_config(
    connect: Duration,
    response: Duration,
    retries: usize,
) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(connect)
        .set_response_timeout(response)
        .set_number_of_retries(retries)
}
