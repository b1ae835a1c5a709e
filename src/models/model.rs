//! [`Model`]: one servable model and what it is served with; [`Resolved`]: the model as one
//! request sees it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::circuit::Circuit;
use super::escalation;
use super::serving::Serving;
use super::tokens::served::ServedTable;
use super::tokens::verify::Verifier;
use super::tokens::{TokenCounter, TokenTable};
use crate::calibration::prior::PriorBook;
use crate::calibration::{Calibration, DEFAULT_FORMULA};
use crate::config::{CircuitSettings, Layout};
use crate::question::PREAMBLE;

/// How often a model's token table is checked against the serving tokenizer by default.
pub const DEFAULT_CHECK_INTERVAL: Duration =
    Duration::from_secs(crate::config::DEFAULT_TOKEN_CHECK_INTERVAL_SECS);
/// The bound on one check.
pub const DEFAULT_CHECK_TIMEOUT: Duration =
    Duration::from_secs(crate::config::DEFAULT_TOKEN_CHECK_TIMEOUT_SECS as u64);

/// One servable model.
#[derive(Debug)]
pub struct Model {
    /// Public name.
    pub name: String,
    /// Other public names.
    pub aliases: Vec<String>,
    /// The backend's id for it (also the `model` of answers with no upstream request).
    pub upstream_model: String,
    /// How its requests are answered: read through a chat dialect, or forwarded whole.
    pub serving: Serving,
    /// Its labels and their token ids (fixed, or built from the backend: `auto`).
    pub table: ServedTable,
    /// Counts tokens for the limits (the real tokenizer when configured).
    pub counter: TokenCounter,
    /// Its default-temperature formula (the reference's bytes: `accuracy`, `cost`).
    pub calibration: Calibration,
    /// Its formula for the `compact` layout, fitted on that layout's prompts; `None`: the
    /// default formula ([`Model::formula`]), never `calibration`, which another prompt's
    /// probabilities were fitted on.
    pub compact_calibration: Option<Calibration>,
    /// Its default layout.
    pub layout: Layout,
    /// Option orders a request that does not say is asked in (1: the caller's order).
    pub permutations: usize,
    /// Its position priors, learned while serving, and their settings.
    pub prior: Arc<PriorBook>,
    /// The live check of `table` against the serving tokenizer.
    pub verifier: Arc<Verifier>,
    /// Tokens in the preamble, counted once.
    pub preamble_tokens: OnceLock<usize>,
    /// The breaker in front of `backend`.
    pub circuit: Circuit,
    /// The models (by public name) that serve this one's requests while `circuit` is open,
    /// in order (each with its own fallbacks: [`super::Routes::serving`]).
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
    /// The headers every read carries the request's routing key in (for a router in front
    /// of replicas; empty: none).
    pub routing_headers: Vec<hyper::header::HeaderName>,
    /// Whether its background [`super::upkeep`] task runs (started once, by the router that
    /// serves it, [`super::Models::start_upkeep`]).
    pub upkeep_started: std::sync::atomic::AtomicBool,
}

impl Model {
    /// A model with defaults: upstream id = name, no aliases, the default calibration, the
    /// `accuracy` layout, the default label scheme (numerals: any letters in `table` are
    /// dropped), estimated token counts, a check every 10 minutes, no images, the default
    /// circuit breaker, no fallback, the default rerank question and the default
    /// routing-key headers.
    pub fn new(name: impl Into<String>, serving: impl Into<Serving>, table: TokenTable) -> Self {
        Self::with_table(
            name,
            serving.into(),
            ServedTable::fixed(table.numerals_only()),
        )
    }

    /// [`Model::new`]'s defaults, serving `table` as it is.
    pub fn with_table(name: impl Into<String>, serving: Serving, table: ServedTable) -> Self {
        let name = name.into();
        Model {
            upstream_model: name.clone(),
            circuit: Circuit::new(name.clone(), CircuitSettings::default()),
            name,
            aliases: Vec::new(),
            serving,
            table,
            counter: TokenCounter::Estimate,
            calibration: DEFAULT_FORMULA,
            compact_calibration: None,
            layout: Layout::Accuracy,
            permutations: 1,
            prior: Arc::default(),
            verifier: Arc::new(Verifier::new(DEFAULT_CHECK_INTERVAL, DEFAULT_CHECK_TIMEOUT)),
            preamble_tokens: OnceLock::new(),
            fallback: Vec::new(),
            escalation: None,
            vision: false,
            rerank_question: crate::config::DEFAULT_RERANK_QUESTION.to_string(),
            release_date: None,
            routing_headers: crate::config::DEFAULT_ROUTING_KEY_HEADERS
                .split(',')
                .map(hyper::header::HeaderName::from_static)
                .collect(),
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

    /// The default-temperature formula for a request in `layout`.
    pub fn formula(&self, layout: Layout) -> Calibration {
        match layout {
            Layout::Compact => self.compact_calibration.unwrap_or(DEFAULT_FORMULA),
            Layout::Accuracy | Layout::Cost => self.calibration,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::systemone::SystemOneBackend;

    #[test]
    fn compact_answers_never_borrow_the_formula_fitted_on_another_layout() {
        let backend = Arc::new(SystemOneBackend::unreachable("m"));
        let mut m = Model::new("m", backend, TokenTable::native(4));
        m.calibration = Calibration { a: 0.1, b: 0.2 };
        assert_eq!(m.formula(Layout::Accuracy), m.calibration);
        assert_eq!(m.formula(Layout::Cost), m.calibration);
        assert_eq!(m.formula(Layout::Compact), DEFAULT_FORMULA);
        m.compact_calibration = Some(Calibration { a: 0.3, b: -0.1 });
        assert_eq!(m.formula(Layout::Compact), Calibration { a: 0.3, b: -0.1 });
        assert_eq!(m.formula(Layout::Accuracy), Calibration { a: 0.1, b: 0.2 });
    }
}
