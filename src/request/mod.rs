//! The caller's request, from JSON to prompt bytes, pure (no I/O, no clock):
//!
//! * [`validate`](mod@validate): a body becomes a [`ValidRequest`] (every schema and size rule), the
//!   only thing the engine runs;
//! * [`images`]: image bytes from data URLs, base64 and multipart parts, sniffed;
//! * [`prompt`]: a valid request becomes the exact user-message bytes of each read
//!   ([`compact`]: the `compact` layout's own bytes);
//! * [`trie`]: which masked reads answer a question (one, or one per node of its labels'
//!   trie) and how their log-probabilities join into one per option.

mod ask;
mod call_history;
pub mod compact;
mod head_key;
mod ignored;
pub mod images;
pub mod prompt;
mod reference_error;
mod rendered_question;
mod rotation;
mod subset;
pub mod trie;
pub mod validate;

use std::sync::Arc;

use serde_json::Value;

use crate::calibration::profile::Profile;
use crate::config::Layout;
use crate::json::to_python;
use crate::models::Model;
use crate::question::LoweredQuestion;

pub use call_history::History;
pub use head_key::HeadKey;
pub use ignored::Ignored;
pub use reference_error::ReferenceError;
pub use rendered_question::RenderedQuestion;
pub use validate::{validate, validate_with_parts, MAX_LABEL_CHARS, MAX_PERMUTATIONS};

/// A request that passed every rule. Fields are private: [`validate()`] (and, for
/// reproducing the reference library, [`ValidRequest::reference`]) are the only ways in.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    model: Arc<Model>,
    state_json: String,
    questions: Vec<LoweredQuestion>,
    rendered: Vec<RenderedQuestion>,
    temperature: Option<f64>,
    calibration: Option<Arc<Profile>>,
    layout: Layout,
    permutations: usize,
    /// The request's `prior_correction` switch (`None`: the model's setting).
    prior_correction: Option<bool>,
    history: History,
    images: Vec<Arc<str>>,
    ignored: Ignored,
    /// Set when the byte estimate put the request over a token limit: the engine counts it
    /// exactly before refusing.
    recount: Option<validate::Recount>,
    /// The digest of what every prompt shares (state, images, a shared history), for the
    /// request's [`HeadKey`].
    content: [u8; 32],
}

impl ValidRequest {
    /// The model that answers.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }
    /// The state as the prompt embeds it (Python-compatible JSON).
    pub fn state_json(&self) -> &str {
        &self.state_json
    }
    /// The lowered questions, in request order.
    pub fn questions(&self) -> &[LoweredQuestion] {
        &self.questions
    }
    /// Each question's option orders and their question objects, rendered once: what
    /// validation counted is what the prompt sends.
    pub fn rendered(&self) -> &[RenderedQuestion] {
        &self.rendered
    }
    /// The caller's temperature override.
    pub fn temperature(&self) -> Option<f64> {
        self.temperature
    }
    /// The calibration profile the caller named, if any.
    pub fn calibration(&self) -> Option<&Arc<Profile>> {
        self.calibration.as_ref()
    }
    /// The prompt layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// How many rotated orders each question is asked in (before capping at its option count).
    pub fn permutations(&self) -> usize {
        self.permutations
    }
    /// The request's own `prior_correction` switch (`None`: the model's setting applies).
    pub fn prior_switch(&self) -> Option<bool> {
        self.prior_correction
    }
    /// The orders of question `q` the caller asked for (the rest are the service's own
    /// samples, [`ValidRequest::with_rotation`], not billed).
    pub fn asked_orders(&self, q: usize) -> usize {
        let n = self.questions.get(q).map_or(1, |q| q.options.len());
        self.permutations.min(n).max(1)
    }
    /// The history, if any.
    pub fn history(&self) -> &History {
        &self.history
    }
    /// Image URLs (data URLs), sent once per upstream request ahead of the text. Shared, so
    /// every planned request holds the same allocation.
    pub fn images(&self) -> &[Arc<str>] {
        &self.images
    }
    /// The top-level fields the body held that this service does not read.
    pub fn ignored(&self) -> &Ignored {
        &self.ignored
    }
    /// The token limits the byte estimate put this request over, to be checked again on an
    /// exact count before any read (`None`: within every limit, or counted exactly).
    pub fn recount(&self) -> Option<validate::Recount> {
        self.recount
    }
    /// The key the request's reads are routed by: a hash of its prompts' shared head
    /// (model, layout, state, images, a shared history), never caller text.
    pub fn head_key(&self) -> HeadKey {
        HeadKey::new(&self.model.upstream_model, self.layout, &self.content)
    }
    /// Whether the first question goes alone to seat the shared prefix (the book's
    /// [request page](../../docs/request.md), step 6, and [layouts](../../docs/layouts.md)).
    pub fn staged(&self) -> bool {
        !self.images.is_empty()
            || matches!(self.layout, Layout::Cost | Layout::Compact)
            || matches!(self.history, History::Shared(_))
    }

    /// Builds a request the way the reference library accepts it, without the HTTP
    /// contract's extra rules (any JSON state, image URLs passed through as given). Used to
    /// reproduce the reference's golden vectors at the library level; the HTTP path always
    /// goes through [`validate()`].
    #[allow(clippy::too_many_arguments)]
    pub fn reference(
        model: Arc<Model>,
        state: &Value,
        questions: Vec<LoweredQuestion>,
        temperature: Option<f64>,
        layout: Layout,
        permutations: usize,
        images: Vec<String>,
        history: History,
    ) -> Result<Self, ReferenceError> {
        let table = model.table.get().ok_or_else(|| ReferenceError::NoTable {
            model: model.name.clone(),
        })?;
        let capacity = table.option_capacity();
        if let Some(q) = questions
            .iter()
            .find(|q| table.labels_for(q.options.len()).is_none())
        {
            return Err(ReferenceError::TooManyOptions {
                model: model.name.clone(),
                capacity,
                options: q.options.len(),
            });
        }
        let permutations = permutations.max(1);
        let rendered = questions
            .iter()
            .map(|q| {
                let first = prompt::render_question(q, 0, &table, layout)?;
                prompt::render_orders(q, first, permutations, &table, layout)
            })
            .collect::<Result<_, _>>()?;
        let state_json = to_python(state)?;
        let images: Vec<Arc<str>> = images.into_iter().map(Arc::from).collect();
        Ok(ValidRequest {
            content: head_key::content_digest(&state_json, &images, &history),
            state_json,
            model,
            questions,
            rendered,
            temperature,
            calibration: None,
            layout,
            permutations,
            prior_correction: None,
            history,
            images,
            ignored: Ignored::default(),
            recount: None,
        })
    }
}
