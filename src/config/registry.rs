//! The TOML registry file: read, parsed, and each model's backend key resolved from its
//! environment variable.

use serde::Deserialize;

use super::error::ConfigError;
use super::model::ModelConfig;
use crate::secret::Secret;

/// The TOML file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryFile {
    /// The models, in the order `/v1/models` lists them.
    pub model: Vec<ModelConfig>,
    /// Redis for the per-key limits and usage (`--redis-url` overrides it).
    #[serde(default)]
    pub redis_url: Option<Secret>,
}

/// Reads and parses a registry file.
pub(super) fn read_registry(path: &std::path::Path) -> Result<RegistryFile, ConfigError> {
    let err = |reason: String| ConfigError::File {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    toml::from_str(&text).map_err(|e| err(e.to_string()))
}

/// Reads a `[[model]]` registry and resolves each model's key from its env variable.
pub fn load_registry(path: &std::path::Path) -> Result<Vec<ModelConfig>, ConfigError> {
    let err = |reason: String| ConfigError::File {
        path: path.display().to_string(),
        reason,
    };
    let file = read_registry(path)?;
    if file.model.is_empty() {
        return Err(err("no [[model]] entries".into()));
    }
    let mut models = file.model;
    for m in &mut models {
        if let Some(var) = &m.backend_api_key_env {
            m.backend_api_key = std::env::var(var).ok().map(Secret::new);
        }
    }
    Ok(models)
}
