//! [`ConfigError`]: why a configuration cannot be used.

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}
