//! [`Models`]: every model by public name and alias, the default model, and the calibration
//! profiles requests may name.

use std::collections::HashMap;
use std::sync::Arc;

use super::checks::{check_escalations, check_fallbacks};
use super::model::Model;
use super::prior_sync::PriorSync;
use super::upkeep;
use crate::calibration::profile::Profiles;
use crate::config::ConfigError;

/// The alias that names the default model out of the box.
pub const DEFAULT_ALIAS: &str = "jev-latest";

/// Every model, by public name and alias.
#[derive(Debug)]
pub struct Models {
    /// In configuration order.
    pub(super) list: Vec<Arc<Model>>,
    /// Name or alias → index into `list`.
    pub(super) by_name: HashMap<String, usize>,
    /// Index of the default model.
    default: usize,
    /// Calibration profiles requests may name.
    profiles: Profiles,
    /// Where the models' position priors outlive the process, if anywhere.
    prior_sync: Option<Arc<PriorSync>>,
}

impl Models {
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
        // Before the checks: a fallback or escalation may name `jev-latest` (a pinned model
        // falling back to the latest one).
        by_name.entry(DEFAULT_ALIAS.to_string()).or_insert(default);
        check_fallbacks(&list, &by_name)?;
        check_escalations(&list, &by_name)?;
        Ok(Models {
            list,
            by_name,
            default,
            profiles: Profiles::default(),
            prior_sync: None,
        })
    }

    /// The registry with these calibration profiles.
    pub fn with_profiles(self, profiles: Profiles) -> Self {
        Models { profiles, ..self }
    }

    /// The same registry, its position priors kept by `sync` (started with the upkeep).
    pub fn with_prior_sync(self, sync: Option<PriorSync>) -> Self {
        Models {
            prior_sync: sync.map(Arc::new),
            ..self
        }
    }

    /// The position priors' store's line of `/readyz` (`None`: no store).
    pub fn prior_status(&self) -> Option<super::prior_sync::PriorStatus> {
        self.prior_sync.as_ref().map(|s| s.status())
    }

    /// The calibration profiles requests may name.
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// The model a name or alias refers to.
    pub fn resolve(&self, name: &str) -> Option<&Arc<Model>> {
        self.by_name.get(name).map(|i| &self.list[*i])
    }

    /// The model used when a request names none.
    pub fn default_model(&self) -> &Arc<Model> {
        &self.list[self.default]
    }

    /// The models that serve `model`'s requests while its circuit is open, in order.
    pub fn fallbacks_of<'a>(&'a self, model: &'a Model) -> impl Iterator<Item = &'a Arc<Model>> {
        model.fallback.iter().filter_map(|name| self.resolve(name))
    }

    /// Starts every model's background [`upkeep`] (once; later calls do nothing).
    pub fn start_upkeep(&self, in_flight: &crate::in_flight::InFlight) {
        for model in &self.list {
            upkeep::start(model, in_flight);
        }
        if let Some(sync) = &self.prior_sync {
            sync.start(&self.list);
        }
    }

    /// Hands every learning model's new position-prior sums to the store now (`serve` at
    /// shutdown); nothing without a store.
    pub async fn sync_priors(&self) {
        if let Some(sync) = &self.prior_sync {
            sync.exchange_all(&self.list).await;
        }
    }

    /// Each model's `escalate_below`, by name (models escalating on another rule, or not
    /// at all, have none): the calibration watch's share of answers under it.
    pub fn escalation_thresholds(&self) -> std::collections::HashMap<String, f64> {
        use crate::models::escalation::Rule;
        self.list
            .iter()
            .filter_map(|m| match m.escalation.as_ref()?.rule {
                Rule::Below(below) => Some((m.name.clone(), below)),
                Rule::NotAutomate => None,
            })
            .collect()
    }

    /// Every model in configuration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Model>> {
        self.list.iter()
    }

    /// Whether some model counts tokens with its real tokenizer, which makes validating a
    /// request heavy work (before parsing, which model serves is not yet known).
    pub fn any_counts_exactly(&self) -> bool {
        self.list.iter().any(|m| m.counter.is_exact())
    }

    /// Public names, for error messages and `/v1/models`.
    pub fn public_names(&self) -> Vec<String> {
        self.list.iter().map(|m| m.name.clone()).collect()
    }

    /// Every name a request may use (each model's name, then its aliases, then
    /// [`DEFAULT_ALIAS`] when no model claims it), with the model it names.
    pub fn every_name(&self) -> Vec<(&str, &Arc<Model>)> {
        let mut names: Vec<(&str, &Arc<Model>)> = Vec::new();
        for m in &self.list {
            names.push((&m.name, m));
            names.extend(m.aliases.iter().map(|a| (a.as_str(), m)));
        }
        if !names.iter().any(|(n, _)| *n == DEFAULT_ALIAS) {
            names.push((DEFAULT_ALIAS, self.default_model()));
        }
        names
    }

    /// Waits for the first build of every automatic table not built yet (each bounded by
    /// its model's check timeout; at once when every table exists), so that a request
    /// arriving while the service starts is answered rather than refused with 503
    /// `system_one_token_table_pending`. Front doors call it before validation.
    pub async fn tables_built(&self) {
        for m in self.list.iter().filter(|m| m.table.get().is_none()) {
            m.verifier.first_finished().await;
        }
    }
}
