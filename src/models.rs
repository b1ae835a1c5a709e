//! The model registry at run time: each public name (and alias) resolves to one model with
//! its backend, token table, calibration and default layout. Built once at startup.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::vllm::VllmBackend;
use crate::backend::Backend;
use crate::calibrate::{Calibration, DEFAULT_FORMULA};
use crate::config::{BackendKind, ConfigError, Layout, ModelConfig};
use crate::tokens::TokenTable;

/// The alias that names the default model out of the box.
pub const DEFAULT_ALIAS: &str = "jev-latest";

/// One servable model.
#[derive(Debug)]
pub struct Model {
    /// Public name.
    pub name: String,
    /// Other public names.
    pub aliases: Vec<String>,
    /// The backend's id for it (also the `model` of answers with no upstream request).
    pub upstream_model: String,
    /// Where its reads go.
    pub backend: Arc<dyn Backend>,
    /// Its single-token labels.
    pub table: TokenTable,
    /// Its default-temperature formula.
    pub calibration: Calibration,
    /// Its default layout.
    pub layout: Layout,
}

/// Every model, by public name and alias.
#[derive(Debug)]
pub struct Models {
    /// In configuration order.
    list: Vec<Arc<Model>>,
    /// Name or alias → index into `list`.
    by_name: HashMap<String, usize>,
    /// Index of the default model.
    default: usize,
}

impl Models {
    /// Builds the registry, loading each model's table and calibration.
    pub fn from_configs(
        configs: &[ModelConfig],
        client: &reqwest::Client,
    ) -> Result<Self, ConfigError> {
        let mut list = Vec::with_capacity(configs.len());
        for c in configs {
            let table = TokenTable::load(&c.token_table)
                .map_err(|e| ConfigError::Invalid(format!("model {}: {e}", c.name)))?;
            let calibration = match &c.calibration {
                Some(path) => Calibration::load(path)
                    .map_err(|e| ConfigError::Invalid(format!("model {}: {e}", c.name)))?,
                None => DEFAULT_FORMULA,
            };
            let upstream_model = c.upstream_model.clone().unwrap_or_else(|| c.name.clone());
            let backend: Arc<dyn Backend> = match c.backend {
                BackendKind::Vllm => Arc::new(VllmBackend::new(
                    client.clone(),
                    &c.backend_url,
                    upstream_model.clone(),
                    c.backend_api_key.clone(),
                    c.max_ids_per_read,
                )),
                BackendKind::Llamacpp => {
                    return Err(ConfigError::Invalid(format!(
                        "model {}: the llamacpp dialect is not implemented yet; use --backend vllm",
                        c.name
                    )))
                }
            };
            list.push(Arc::new(Model {
                name: c.name.clone(),
                aliases: c.aliases.clone(),
                upstream_model,
                backend,
                table,
                calibration,
                layout: c.layout,
            }));
        }
        Self::new(list, configs.iter().position(|c| c.default).unwrap_or(0))
    }

    /// A registry from ready models (tests build backends of their own).
    pub fn new(list: Vec<Arc<Model>>, default: usize) -> Result<Self, ConfigError> {
        if list.is_empty() {
            return Err(ConfigError::Invalid("no models configured".into()));
        }
        let mut by_name = HashMap::new();
        for (i, m) in list.iter().enumerate() {
            for name in std::iter::once(&m.name).chain(&m.aliases) {
                if by_name.insert(name.clone(), i).is_some() {
                    return Err(ConfigError::Invalid(format!(
                        "model name {name:?} is used twice"
                    )));
                }
            }
        }
        let default = default.min(list.len() - 1);
        by_name.entry(DEFAULT_ALIAS.to_string()).or_insert(default);
        Ok(Models {
            list,
            by_name,
            default,
        })
    }

    /// The model a name or alias refers to.
    pub fn resolve(&self, name: &str) -> Option<&Arc<Model>> {
        self.by_name.get(name).map(|i| &self.list[*i])
    }

    /// The model used when a request names none.
    pub fn default_model(&self) -> &Arc<Model> {
        &self.list[self.default]
    }

    /// Every model in configuration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Model>> {
        self.list.iter()
    }

    /// Public names, for error messages and `/v1/models`.
    pub fn public_names(&self) -> Vec<String> {
        self.list.iter().map(|m| m.name.clone()).collect()
    }
}
