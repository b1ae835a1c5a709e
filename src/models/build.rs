//! [`Models::from_configs`]: the registry built from configuration, each model with its
//! table, tokenizer, calibration and the backend of its dialect (the one place that knows
//! every dialect).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::circuit::Circuit;
use super::escalation;
use super::fleet::{label, Fleet, Replica};
use super::model::Model;
use super::registry::Models;
use super::serving::Serving;
use super::tokens::build::{check, LoadedTokenizer};
use super::tokens::served::ServedTable;
use super::tokens::verify::Verifier;
use super::tokens::{TokenCounter, TokenTable};
use crate::backend::llamacpp::LlamaCppBackend;
use crate::backend::openai::{CompatBackend, LabelTexts};
use crate::backend::systemone::SystemOneBackend;
use crate::backend::vllm::VllmBackend;
use crate::backend::Backend;
use crate::calibration::prior::{PriorBook, PriorSettings};
use crate::calibration::{Calibration, FormulaSource};
use crate::config::{BackendKind, CircuitSettings, ConfigError, ModelConfig, AUTO_TABLE};

impl Models {
    /// Builds the registry, loading each model's table and calibration.
    pub fn from_configs(
        configs: &[ModelConfig],
        client: &crate::backend::Pool,
        check_timeout: Duration,
        circuit: CircuitSettings,
    ) -> Result<Self, ConfigError> {
        let mut list = Vec::with_capacity(configs.len());
        for c in configs {
            let mut model = Self::build_model(c, client, check_timeout, circuit)?;
            model.circuit = Circuit::new(c.name.clone(), circuit);
            model.fallback = c.fallback.as_ref().map(|f| f.names()).unwrap_or_default();
            model.escalation = escalation::Escalation::from_config(c);
            list.push(Arc::new(model));
        }
        Self::new(list, configs.iter().position(|c| c.default).unwrap_or(0))
    }

    /// One model from its configuration: table, tokenizer (checked against the table),
    /// calibration and backend.
    fn build_model(
        c: &ModelConfig,
        client: &crate::backend::Pool,
        check_timeout: Duration,
        circuit: CircuitSettings,
    ) -> Result<Model, ConfigError> {
        c.check()?;
        let invalid = |e: String| ConfigError::Invalid(format!("model {}: {e}", c.name));
        let upstream_model = c.upstream_model.clone().unwrap_or_else(|| c.name.clone());
        let table = Self::table(c, &upstream_model).map_err(invalid)?;
        let counter = Self::token_counter(c, table.get().as_deref()).map_err(invalid)?;
        let calibration = Self::calibration(c).map_err(invalid)?;
        let compact_calibration = Self::compact_calibration(c).map_err(invalid)?;
        let serving = Self::serving(
            c,
            client,
            &upstream_model,
            table.get().as_deref(),
            (check_timeout, circuit),
        )
        .map_err(invalid)?;
        let mut check_interval = c.token_check_interval();
        if serving.fleet().is_some() && !table.is_auto() {
            // Each replica checks a fixed table against its own tokenizer; the model's own
            // check would only repeat one of them (and take the whole model out with it).
            check_interval = Duration::ZERO;
        }
        Ok(Model {
            aliases: c.aliases.clone(),
            upstream_model,
            counter,
            calibration,
            compact_calibration,
            layout: c.layout,
            permutations: c.permutations,
            prior: Arc::new(PriorBook::new(PriorSettings {
                enabled: c.prior_correction,
                sample_share: c.prior_sample_share,
            })),
            vision: c.vision,
            release_date: c.release_date.clone(),
            rerank_question: c.rerank_question.clone(),
            routing_headers: c.routing_headers(),
            verifier: Arc::new(Verifier::new(check_interval, check_timeout)),
            ..Model::with_table(c.name.clone(), serving, table)
        })
    }

    /// The configured table in the model's label scheme, or an automatic one (`auto`: built
    /// from the backend's tokenizer, which plain OpenAI hosts do not serve).
    fn table(c: &ModelConfig, upstream_model: &str) -> Result<ServedTable, String> {
        if c.backend == BackendKind::Systemone {
            // The upstream labels the options itself: only its option cap matters here.
            let max_options = crate::backend::systemone::max_options(c.flavor);
            return Ok(ServedTable::fixed(TokenTable::native(max_options)));
        }
        if c.token_table != AUTO_TABLE {
            let table = TokenTable::load(&c.token_table).map_err(|e| e.to_string())?;
            return Ok(ServedTable::fixed(table.with_label_scheme(c.label_scheme)?));
        }
        if c.backend == BackendKind::Openai {
            return Err(
                "token_table auto needs a backend that serves its tokenizer (vllm or \
                        llamacpp); an OpenAI-compatible host needs a table file"
                    .into(),
            );
        }
        let source = format!("{} {upstream_model}", c.backend.as_str());
        Ok(ServedTable::auto(&c.name, &source, c.label_scheme))
    }

    /// The model's temperature formula, and one startup line saying which file won: the
    /// configured one (`--calibration`, `calibration` in the registry), else
    /// `calibration/<model>.json` in the working directory (a warning: a file there
    /// silently changes answers otherwise), else the shipped one, else GLM-5.3-Flash's.
    fn calibration(c: &ModelConfig) -> Result<Calibration, String> {
        if let Some(path) = &c.calibration {
            tracing::info!(model = %c.name, from = %path, "calibration formula (configured)");
            return Calibration::load(path);
        }
        let (formula, from) = Calibration::for_model(&c.name)?;
        if let FormulaSource::WorkingDir(_) = from {
            tracing::warn!(model = %c.name, from = %from, "calibration formula from the working directory, over the shipped one; pass --calibration to choose a file");
        } else {
            tracing::info!(model = %c.name, from = %from, "calibration formula");
        }
        Ok(formula)
    }

    /// The model's formula for the `compact` layout (`calibration/<model>.compact.json`,
    /// else the shipped one), and a startup line saying which, or that compact answers use
    /// the default formula: the model's own was fitted on another prompt's probabilities.
    fn compact_calibration(c: &ModelConfig) -> Result<Option<Calibration>, String> {
        let dir = std::path::Path::new("calibration");
        match Calibration::compact_for_model_in(dir, &c.name)? {
            Some((formula, from)) => {
                tracing::info!(model = %c.name, from = %from, "calibration formula for the compact layout");
                Ok(Some(formula))
            }
            None => {
                tracing::info!(model = %c.name, "no calibration formula fitted for the compact layout: its answers use the default (glm-5.3-flash) formula");
                Ok(None)
            }
        }
    }

    /// The configured tokenizer (loaded, and a fixed `table` checked against it), or the
    /// estimate.
    fn token_counter(c: &ModelConfig, table: Option<&TokenTable>) -> Result<TokenCounter, String> {
        let Some(path) = &c.tokenizer else {
            return Ok(TokenCounter::Estimate);
        };
        let started = Instant::now();
        let tk =
            LoadedTokenizer::from_file(std::path::Path::new(path)).map_err(|e| e.to_string())?;
        let Some(table) = table else {
            return Ok(TokenCounter::Tokenizer(Arc::new(tk)));
        };
        let problems = check(&tk, table).map_err(|e| e.to_string())?;
        if !problems.is_empty() {
            return Err(format!(
                "token table {} does not match tokenizer {path}: {}",
                c.token_table,
                problems.join("; ")
            ));
        }
        tracing::info!(
            model = %c.name,
            load_ms = started.elapsed().as_secs_f64() * 1e3,
            "tokenizer loaded and token table checked"
        );
        Ok(TokenCounter::Tokenizer(Arc::new(tk)))
    }

    /// How the configured dialect serves the model: a native upstream's forwarding, or the
    /// reads of a chat dialect on a [`Fleet`]: of one URL (a fleet of one), or of several
    /// replicas (each with its own circuit and token-table check, by `checks`: the check timeout and the
    /// circuit's settings). The `openai` dialect learns the label texts of `table`, which it
    /// always has, and probes within the check timeout.
    fn serving(
        c: &ModelConfig,
        client: &crate::backend::Pool,
        upstream_model: &str,
        table: Option<&TokenTable>,
        checks: (Duration, CircuitSettings),
    ) -> Result<Serving, String> {
        if c.backend == BackendKind::Systemone {
            if c.backend_url.len() > 1 {
                return Err(
                    "several backend_url replicas need a reading dialect (vllm, \
                            llamacpp, openai); a native upstream balances its own"
                        .into(),
                );
            }
            let native = Self::native_backend(c, client, upstream_model);
            return Ok(Serving::Forwards(Arc::new(native)));
        }
        let read = |url: &str| Self::reads(c, client, url, upstream_model, table, checks.0);
        if let [url] = c.backend_url.as_slice() {
            return Ok(Serving::Reads(Arc::new(Fleet::one(read(url)))));
        }
        let (check_timeout, circuit) = checks;
        let replicas = c
            .backend_url
            .iter()
            .map(|url| {
                let name = format!("{} at {}", c.name, label(url));
                Replica::new(
                    url,
                    read(url),
                    Circuit::replica(name, circuit),
                    Verifier::new(c.token_check_interval(), check_timeout),
                )
            })
            .collect();
        Ok(Serving::Reads(Arc::new(Fleet::new(
            replicas,
            c.replica_load_factor,
        ))))
    }

    /// The backend of a chat dialect at `url`.
    fn reads(
        c: &ModelConfig,
        client: &crate::backend::Pool,
        url: &str,
        upstream_model: &str,
        table: Option<&TokenTable>,
        probe_timeout: Duration,
    ) -> Arc<dyn Backend> {
        let thinking_off = c
            .disable_thinking
            .then(|| serde_json::json!({"enable_thinking": false}));
        match c.backend {
            // (A native upstream never reads: `serving` forwards it before asking here.)
            BackendKind::Vllm | BackendKind::Systemone => Arc::new(
                VllmBackend::new(
                    client.clone(),
                    url,
                    upstream_model.to_string(),
                    c.backend_api_key.clone(),
                    c.max_ids_per_read,
                )
                .with_chat_template_kwargs(thinking_off),
            ),
            BackendKind::Llamacpp => Arc::new(LlamaCppBackend::new(
                client.clone(),
                url,
                upstream_model.to_string(),
                c.backend_api_key.clone(),
                c.cache_prompt,
                thinking_off,
            )),
            BackendKind::Openai => Arc::new(CompatBackend::new(
                client.clone(),
                url,
                upstream_model.to_string(),
                c.backend_api_key.clone(),
                table.map(label_texts).unwrap_or_default(),
                probe_timeout,
            )),
        }
    }

    /// The native upstream of a `systemone` model.
    fn native_backend(
        c: &ModelConfig,
        client: &crate::backend::Pool,
        upstream_model: &str,
    ) -> SystemOneBackend {
        SystemOneBackend::new(
            client.clone(),
            &c.backend_url[0],
            upstream_model.to_string(),
            c.backend_api_key.clone(),
            c.flavor,
            c.keep_alive.clone(),
        )
    }
}

/// The text of each label token of `table`: the single-token labels' numbers, and each
/// token of a multi-token label its character (one per token, as the trie requires).
pub fn label_texts(table: &TokenTable) -> LabelTexts {
    let singles = table
        .labels
        .iter()
        .map(|l| (l.id, l.number.to_string()))
        .collect();
    let multi = table.multi_labels().flat_map(|(_, l)| {
        l.ids
            .iter()
            .zip(l.text.chars())
            .map(|(id, c)| (*id, c.to_string()))
    });
    LabelTexts::new(table.prefix.clone(), singles, multi)
}
