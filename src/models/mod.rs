//! The model registry at run time: each public name (and alias) resolves to one model with
//! its backend, token table, calibration and default layout. Built once at startup.
//! Also what keeps a model servable while it runs: the [`circuit`] breaker in front of its
//! backend, failover to a configured fallback, and the [`tokens`] table with its live check.

pub mod circuit;
pub mod escalation;
pub mod tokens;
pub mod upkeep;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::backend::llamacpp::LlamaCppBackend;
use crate::backend::openai::{CompatBackend, LabelTexts};
use crate::backend::systemone::SystemOneBackend;
use crate::backend::vllm::VllmBackend;
use crate::backend::Backend;
use crate::calibration::profile::Profiles;
use crate::calibration::{Calibration, FormulaSource, DEFAULT_FORMULA};
use crate::config::CircuitSettings;
use crate::config::{BackendKind, ConfigError, Layout, ModelConfig, AUTO_TABLE};
use crate::question::PREAMBLE;
use circuit::Circuit;
use tokens::build::{check, LoadedTokenizer};
use tokens::served::ServedTable;
use tokens::verify::Verifier;
use tokens::{TokenCounter, TokenTable};

/// How often a model's token table is checked against the serving tokenizer by default.
pub const DEFAULT_CHECK_INTERVAL: Duration =
    Duration::from_secs(crate::config::DEFAULT_TOKEN_CHECK_INTERVAL_SECS);
/// The bound on one check.
pub const DEFAULT_CHECK_TIMEOUT: Duration =
    Duration::from_secs(crate::config::DEFAULT_TOKEN_CHECK_TIMEOUT_SECS as u64);

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
    /// Its labels and their token ids (fixed, or built from the backend: `auto`).
    pub table: ServedTable,
    /// Counts tokens for the limits (the real tokenizer when configured).
    pub counter: TokenCounter,
    /// Its default-temperature formula.
    pub calibration: Calibration,
    /// Its default layout.
    pub layout: Layout,
    /// Option orders a request that does not say is asked in (1: the caller's order).
    pub permutations: usize,
    /// The live check of `table` against the serving tokenizer.
    pub verifier: Arc<Verifier>,
    /// Tokens in the preamble, counted once.
    pub preamble_tokens: OnceLock<usize>,
    /// The breaker in front of `backend`.
    pub circuit: Circuit,
    /// The models (by public name) that serve this one's requests while `circuit` is open,
    /// in order (each with its own fallbacks: [`Routes::serving`]).
    pub fallback: Vec<String>,
    /// Which of its answers another model answers again, if any ([`escalation`]).
    pub escalation: Option<escalation::Escalation>,
    /// Whether requests may send it images (configured; the backend is not asked).
    pub vision: bool,
    /// The instructions of the noul `/v2/rerank` asks of each document: the operator's
    /// wording for this model, never the caller's.
    pub rerank_question: String,
    /// Its release date, `YYYY-MM-DD`, when configured (listed by `/v1/models`).
    pub release_date: Option<String>,
    /// Whether its background [`upkeep`] task runs (started once, by the first router or
    /// request in a runtime).
    pub upkeep_started: std::sync::atomic::AtomicBool,
}

impl Model {
    /// A model with defaults: upstream id = name, no aliases, the default calibration, the
    /// `accuracy` layout, the default label scheme (numerals: any letters in `table` are
    /// dropped), estimated token counts, a check every 10 minutes, no images, the default
    /// circuit breaker, no fallback and the default rerank question.
    pub fn new(name: impl Into<String>, backend: Arc<dyn Backend>, table: TokenTable) -> Self {
        Self::serving(name, backend, ServedTable::fixed(table.numerals_only()))
    }

    /// [`Model::new`]'s defaults, serving `table` as it is.
    pub fn serving(name: impl Into<String>, backend: Arc<dyn Backend>, table: ServedTable) -> Self {
        let name = name.into();
        Model {
            upstream_model: name.clone(),
            circuit: Circuit::new(name.clone(), CircuitSettings::default()),
            name,
            aliases: Vec::new(),
            backend,
            table,
            counter: TokenCounter::Estimate,
            calibration: DEFAULT_FORMULA,
            layout: Layout::Accuracy,
            permutations: 1,
            verifier: Arc::new(Verifier::new(DEFAULT_CHECK_INTERVAL, DEFAULT_CHECK_TIMEOUT)),
            preamble_tokens: OnceLock::new(),
            fallback: Vec::new(),
            escalation: None,
            vision: false,
            rerank_question: crate::config::DEFAULT_RERANK_QUESTION.to_string(),
            release_date: None,
            upkeep_started: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The model as a request sees it, with the table it serves now; `None` while an
    /// automatic table is not built yet.
    pub fn resolve(self: &Arc<Self>) -> Option<Resolved> {
        Some(Resolved {
            table: self.table.get()?,
            model: self.clone(),
        })
    }

    /// Tokens the fixed preamble costs in every upstream request.
    pub fn preamble_tokens(&self) -> usize {
        *self
            .preamble_tokens
            .get_or_init(|| self.counter.count(PREAMBLE))
    }
}

/// A model as one request sees it: the model, and the token table it served when the
/// request was validated (an automatic table may be rebuilt meanwhile; the request keeps
/// its own). Derefs to the model; `table` is that table.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The model.
    pub model: Arc<Model>,
    /// Its table at validation.
    pub table: Arc<TokenTable>,
}

impl std::ops::Deref for Resolved {
    type Target = Model;

    fn deref(&self) -> &Model {
        &self.model
    }
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
    /// Calibration profiles requests may name.
    profiles: Profiles,
}

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
            let mut model = Self::build_model(c, client, check_timeout)?;
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
    ) -> Result<Model, ConfigError> {
        c.check()?;
        let invalid = |e: String| ConfigError::Invalid(format!("model {}: {e}", c.name));
        let upstream_model = c.upstream_model.clone().unwrap_or_else(|| c.name.clone());
        let table = Self::table(c, &upstream_model).map_err(invalid)?;
        let counter = Self::token_counter(c, table.get().as_deref()).map_err(invalid)?;
        let calibration = Self::calibration(c).map_err(invalid)?;
        let backend = Self::backend(
            c,
            client,
            &upstream_model,
            table.get().as_deref(),
            check_timeout,
        );
        let check_interval = c.token_check_interval();
        Ok(Model {
            aliases: c.aliases.clone(),
            upstream_model,
            counter,
            calibration,
            layout: c.layout,
            permutations: c.permutations,
            vision: c.vision,
            release_date: c.release_date.clone(),
            rerank_question: c.rerank_question.clone(),
            verifier: Arc::new(Verifier::new(check_interval, check_timeout)),
            ..Model::serving(c.name.clone(), backend, table)
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

    /// The backend of the configured dialect (the `openai` one learns the label texts of
    /// `table`, which it always has, and probes within `probe_timeout`).
    fn backend(
        c: &ModelConfig,
        client: &crate::backend::Pool,
        upstream_model: &str,
        table: Option<&TokenTable>,
        probe_timeout: Duration,
    ) -> Arc<dyn Backend> {
        let thinking_off = c
            .disable_thinking
            .then(|| serde_json::json!({"enable_thinking": false}));
        match c.backend {
            BackendKind::Vllm => Arc::new(
                VllmBackend::new(
                    client.clone(),
                    &c.backend_url,
                    upstream_model.to_string(),
                    c.backend_api_key.clone(),
                    c.max_ids_per_read,
                )
                .with_chat_template_kwargs(thinking_off),
            ),
            BackendKind::Llamacpp => Arc::new(LlamaCppBackend::new(
                client.clone(),
                &c.backend_url,
                upstream_model.to_string(),
                c.backend_api_key.clone(),
                c.cache_prompt,
                thinking_off,
            )),
            BackendKind::Systemone => Arc::new(Self::native_backend(c, client, upstream_model)),
            BackendKind::Openai => Arc::new(CompatBackend::new(
                client.clone(),
                &c.backend_url,
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
            &c.backend_url,
            upstream_model.to_string(),
            c.backend_api_key.clone(),
            c.flavor,
            c.keep_alive.clone(),
        )
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
        })
    }

    /// The registry with these calibration profiles.
    pub fn with_profiles(self, profiles: Profiles) -> Self {
        Models { profiles, ..self }
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
    pub fn start_upkeep(&self, in_flight: &crate::limits::InFlight) {
        for model in &self.list {
            upkeep::start(model, in_flight);
        }
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

impl Models {
    /// Waits for the first build of every automatic table not built yet (each bounded by
    /// its model's check timeout; at once when every table exists), so that a request
    /// arriving while the service starts is answered rather than refused with 503
    /// `system_one_token_table_pending`. Front doors call it before validation.
    pub async fn tables_built(&self) {
        for m in self.list.iter().filter(|m| m.table.get().is_none()) {
            m.verifier.first_finished().await;
        }
    }

    /// Which models' circuits refuse requests now: read once per request, by the front
    /// door, before validation, so that validation (pure) resolves the serving model from
    /// this snapshot and reads no clock. Only models with a fallback are looked at (no
    /// allocation without one); each refusing model whose fallback serves is logged.
    pub fn routes(&self) -> Routes<'_> {
        let refusing: Vec<bool> = if self.list.iter().any(|m| !m.fallback.is_empty()) {
            self.list
                .iter()
                .map(|m| m.circuit.check().is_err())
                .collect()
        } else {
            Vec::new()
        };
        let routes = Routes {
            models: self,
            refusing,
        };
        for m in self.list.iter().filter(|m| routes.refuses(m)) {
            let serving = routes.serving(m);
            if serving.name != m.name {
                tracing::info!(model = %m.name, fallback = %serving.name, "a model's circuit is open: its fallback serves its requests");
            }
        }
        routes
    }
}

/// The registry as one request sees it: every model, and which circuits refused requests
/// when the request arrived ([`Models::routes`]). Derefs to [`Models`].
#[derive(Debug)]
pub struct Routes<'m> {
    models: &'m Models,
    /// Per model, in configuration order; empty when no model has a fallback.
    refusing: Vec<bool>,
}

impl Routes<'_> {
    fn refuses(&self, model: &Model) -> bool {
        let index = self.models.by_name.get(&model.name);
        index.is_some_and(|i| self.refusing.get(*i).copied().unwrap_or(false))
    }

    /// The model that serves a request for `requested`: `requested` itself unless its
    /// circuit refuses requests; then the first of its fallbacks, in order, that serves
    /// (each one itself, or one of its own fallbacks, the same way), else `requested`
    /// (whose circuit then refuses the request). Resolved before the request is validated,
    /// so it is validated (option counts, token limits, images) against the model that will
    /// answer it. The registry refused loops at startup; `seen` guards the walk anyway.
    pub fn serving<'a>(&'a self, requested: &'a Arc<Model>) -> &'a Arc<Model> {
        let mut seen = Vec::new();
        self.first_serving(requested, &mut seen)
            .unwrap_or(requested)
    }

    /// `model` when its circuit admits, else the first of its fallbacks that serves.
    fn first_serving<'a>(
        &'a self,
        model: &'a Arc<Model>,
        seen: &mut Vec<&'a str>,
    ) -> Option<&'a Arc<Model>> {
        if seen.contains(&model.name.as_str()) {
            return None;
        }
        seen.push(&model.name);
        if !self.refuses(model) {
            return Some(model);
        }
        self.models
            .fallbacks_of(model)
            .find_map(|f| self.first_serving(f, seen))
    }
}

/// Every fallback names a configured model other than its own, and no chain of fallbacks
/// comes back to a model it left: a loop is refused with its path (`a -> b -> a`).
fn check_fallbacks(
    list: &[Arc<Model>],
    by_name: &HashMap<String, usize>,
) -> Result<(), ConfigError> {
    for m in list {
        for fallback in &m.fallback {
            check_other_model(list, by_name, m, "fallback", fallback)?;
        }
    }
    for start in 0..list.len() {
        let mut path = vec![start];
        if let Some(cycle) = find_loop(list, by_name, &mut path) {
            let names: Vec<&str> = cycle.iter().map(|i| list[*i].name.as_str()).collect();
            return Err(ConfigError::Invalid(format!(
                "fallback loop: {} (a chain of fallbacks must end)",
                names.join(" -> ")
            )));
        }
    }
    Ok(())
}

/// Every `escalate_to` names a configured model other than its own (one hop: the
/// escalation model's own escalation is not followed, so no loop can form).
fn check_escalations(
    list: &[Arc<Model>],
    by_name: &HashMap<String, usize>,
) -> Result<(), ConfigError> {
    for m in list {
        if let Some(escalation) = &m.escalation {
            check_other_model(list, by_name, m, "escalate_to", &escalation.to)?;
        }
    }
    Ok(())
}

/// `target`, which `model`'s `key` names, is a configured model other than `model`.
fn check_other_model(
    list: &[Arc<Model>],
    by_name: &HashMap<String, usize>,
    model: &Model,
    key: &str,
    target: &str,
) -> Result<(), ConfigError> {
    match by_name.get(target) {
        Some(i) if list[*i].name != model.name => Ok(()),
        Some(_) => Err(ConfigError::Invalid(format!(
            "model {}: {key} {target:?} is the model itself",
            model.name
        ))),
        None => Err(ConfigError::Invalid(format!(
            "model {}: {key} {target:?} is not a configured model",
            model.name
        ))),
    }
}

/// A loop reachable by fallbacks from the end of `path`, as the path that closes it.
fn find_loop(
    list: &[Arc<Model>],
    by_name: &HashMap<String, usize>,
    path: &mut Vec<usize>,
) -> Option<Vec<usize>> {
    let at = *path.last()?;
    for next in list[at].fallback.iter().filter_map(|n| by_name.get(n)) {
        if let Some(from) = path.iter().position(|p| p == next) {
            let mut cycle = path[from..].to_vec();
            cycle.push(*next);
            return Some(cycle);
        }
        path.push(*next);
        if let Some(cycle) = find_loop(list, by_name, path) {
            return Some(cycle);
        }
        path.pop();
    }
    None
}

impl std::ops::Deref for Routes<'_> {
    type Target = Models;

    fn deref(&self) -> &Models {
        self.models
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::systemone::SystemOneBackend;
    use crate::models::circuit::Health;

    /// A model named `name` falling back to `fallback`, whose circuit opens on one failure.
    fn model(name: &str, fallback: &[&str]) -> Arc<Model> {
        let backend = SystemOneBackend::unreachable(name);
        let mut m = Model::new(name, Arc::new(backend), TokenTable::native(4));
        m.fallback = fallback.iter().map(|f| f.to_string()).collect();
        let settings = CircuitSettings {
            failure_rate: 50,
            min_calls: 1,
            ..CircuitSettings::default()
        };
        m.circuit = Circuit::new(name, settings);
        Arc::new(m)
    }

    fn open(m: &Model) {
        m.circuit.admit().expect("closed").record(Health::Failure);
        assert!(m.circuit.check().is_err(), "{} opened", m.name);
    }

    #[test]
    fn a_fallback_loop_is_refused_at_startup_with_its_path() {
        let cases: Vec<(Vec<Arc<Model>>, &str)> = vec![
            (
                vec![model("a", &["b"]), model("b", &["a"])],
                "fallback loop: a -> b -> a",
            ),
            (
                vec![
                    model("a", &["b", "c"]),
                    model("b", &[]),
                    model("c", &["d"]),
                    model("d", &["c"]),
                ],
                "fallback loop: c -> d -> c",
            ),
            (
                vec![model("a", &["a"])],
                "model a: fallback \"a\" is the model itself",
            ),
            (
                vec![model("a", &["zz"])],
                "model a: fallback \"zz\" is not a configured model",
            ),
        ];
        for (list, want) in cases {
            let err = Models::new(list, 0).expect_err(want).to_string();
            assert!(err.starts_with(want), "{want}: {err}");
        }
        let chain = vec![model("a", &["b", "c"]), model("b", &["c"]), model("c", &[])];
        assert!(Models::new(chain, 0).is_ok(), "a diamond is not a loop");
        let pinned = vec![model("jev", &[]), model("jev-1.13.0", &[DEFAULT_ALIAS])];
        let models = Models::new(pinned, 0).expect("a pinned model may fall back to the latest");
        let pinned = models.resolve("jev-1.13.0").expect("configured");
        let fallbacks: Vec<&str> = models
            .fallbacks_of(pinned)
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(fallbacks, ["jev"]);
        let latest_itself = vec![model("jev", &[DEFAULT_ALIAS])];
        let err = Models::new(latest_itself, 0)
            .expect_err("itself")
            .to_string();
        assert_eq!(
            err,
            "model jev: fallback \"jev-latest\" is the model itself"
        );
    }

    #[tokio::test]
    async fn the_chain_is_walked_in_order_depth_first_while_circuits_refuse() {
        let list = vec![
            model("a", &["b", "c"]),
            model("b", &["d"]),
            model("c", &[]),
            model("d", &[]),
        ];
        let models = Models::new(list, 0).expect("valid");
        let by = |n: &str| models.resolve(n).expect("configured").clone();
        let serving = |models: &Models| models.routes().serving(&by("a")).name.clone();
        assert_eq!(serving(&models), "a");
        open(&by("a"));
        assert_eq!(serving(&models), "b");
        open(&by("b"));
        assert_eq!(serving(&models), "d", "b's own fallback before a's next");
        open(&by("d"));
        assert_eq!(serving(&models), "c");
        open(&by("c"));
        assert_eq!(
            serving(&models),
            "a",
            "none serves: the requested model refuses"
        );
    }
}
