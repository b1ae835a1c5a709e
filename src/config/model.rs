//! [`ModelConfig`]: one model, from the flags or a `[[model]]` of the registry, with its
//! defaults and the checks across its fields.

use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use super::dialect::{BackendKind, Flavor};
use super::error::ConfigError;
use super::prompt::{LabelScheme, Layout};
use crate::secret::Secret;

/// Seconds between live token-table checks, unless configured (flag and registry alike).
pub const DEFAULT_TOKEN_CHECK_INTERVAL_SECS: u64 = 600;

/// Token ids read per upstream request, unless configured (flag and registry alike).
pub const DEFAULT_MAX_IDS_PER_READ: usize = 128;
/// Most rotated option orders a request (or a model's default) may ask for.
pub const MAX_PERMUTATIONS: usize = 8;
/// Share of single-read requests asked once more for the position prior, unless configured.
pub const DEFAULT_PRIOR_SAMPLE_SHARE: f64 = 0.05;
/// The noul `/v2/rerank` asks of each document, unless a model configures its own
/// (`rerank_question`). The query is the state; the document follows it (docs/api/rerank.md).
pub const DEFAULT_RERANK_QUESTION: &str =
    "Is the document after the state relevant to the query in the state, that is, does it help answer the query?";

/// The bounded-load factor of a model's replicas, unless configured (flag and registry).
pub const DEFAULT_REPLICA_LOAD_FACTOR: f64 = 1.25;
/// The headers that carry a request's routing key, unless configured (comma-separated).
pub const DEFAULT_ROUTING_KEY_HEADERS: &str = "x-session-id,x-smg-routing-key";

/// The `token_table` that builds the table from the backend's tokenizer at startup.
pub const AUTO_TABLE: &str = "auto";

/// One model name, or several in order (`fallback = "a"` or `fallback = ["a", "b"]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    /// The names, in order.
    pub fn names(&self) -> Vec<String> {
        match self {
            OneOrMany::One(name) => vec![name.clone()],
            OneOrMany::Many(names) => names.clone(),
        }
    }
}

/// When a model's answer is asked again of its `escalate_to` model, besides a confidence
/// under `escalate_below`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscalateWhen {
    /// The calibration profile that covered the answer did not set `automate` (an answer
    /// no profile covered is not escalated by this rule).
    NotAutomate,
}

/// One model: a `[[model]]` of the TOML registry, or the one model the flags describe when
/// no `--config` file is given (the same struct: each field's flag and TOML key side by
/// side, with the same defaults). A field without a flag (`#[arg(skip)]`) is for the
/// registry only; one without a TOML key (`#[serde(skip)]`) for the flags only. Checks
/// across fields are in [`ModelConfig::check`].
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Public model name callers use.
    #[arg(
        long = "model",
        value_name = "MODEL",
        env = "SYSTEMONE_MODEL",
        default_value = "gemma-3-270m"
    )]
    pub name: String,

    /// Extra public names for the model (`jev-latest` always names the default model).
    #[arg(long = "alias", env = "SYSTEMONE_ALIASES", value_delimiter = ',')]
    #[serde(default)]
    pub aliases: Vec<String>,

    /// Whether this is the default model of the registry (the first model is, when none
    /// says so); the flags' one model always is.
    #[arg(skip = true)]
    #[serde(default)]
    pub default: bool,

    /// Backend dialect. The default is the embedded local backend: llama.cpp's
    /// `llama-server` with Gemma 3 270M, started by `scripts/run-local.sh`.
    #[arg(long, env = "SYSTEMONE_BACKEND", value_enum, default_value_t = BackendKind::Llamacpp)]
    pub backend: BackendKind,

    /// Backend base URL, ending in `/v1`; several (the flag repeated, or comma-separated;
    /// a list in the registry) are replicas of one model: each request's reads go to one of
    /// them, chosen by rendezvous hashing on what the prompts' shared head holds
    /// (docs/fleet.md).
    #[arg(
        long,
        env = "SYSTEMONE_BACKEND_URL",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8081/v1"
    )]
    #[serde(deserialize_with = "one_or_many")]
    pub backend_url: Vec<String>,

    /// With several `--backend-url`s: a request skips to the next replica in its rendezvous
    /// order while the chosen one has more requests in flight than this factor times the
    /// replicas' mean (bounded-load hashing; at least 1). 1.25 keeps the busiest replica within a
    /// quarter over the mean while few keys leave their first choice; the routers' own
    /// bounds sit near it (Envoy's and HAProxy's hash balance factors are set in percent of
    /// the mean; vllm-router's and SGLang's cache-aware policies rebalance at 1.5x).
    #[arg(
        long,
        env = "SYSTEMONE_REPLICA_LOAD_FACTOR",
        default_value_t = DEFAULT_REPLICA_LOAD_FACTOR
    )]
    #[serde(default = "default_replica_load_factor")]
    pub replica_load_factor: f64,

    /// Headers every read of a request carries with its routing key (the hex of a hash of
    /// the prompts' shared head, never caller text), for a router in front of several
    /// replicas: `x-session-id` (vllm-router's hash policies; production-stack with
    /// `--session-key x-session-id`) and `x-smg-routing-key` (SGLang's model gateway).
    /// An empty value sends none.
    #[arg(
        long = "routing-key-header",
        env = "SYSTEMONE_ROUTING_KEY_HEADERS",
        value_delimiter = ',',
        default_value = DEFAULT_ROUTING_KEY_HEADERS
    )]
    #[serde(default = "default_routing_key_headers")]
    pub routing_key_headers: Vec<String>,

    /// The backend's id for the model (defaults to `--model`).
    #[arg(long, env = "SYSTEMONE_UPSTREAM_MODEL")]
    pub upstream_model: Option<String>,

    /// Registry only: other models of the registry that serve this model's requests while
    /// this model's circuit breaker is open, in order (a name, or a list): the first whose
    /// circuit admits, following each one's own fallbacks (the answer's `model` then names
    /// the one that served it). A loop is refused at startup.
    #[arg(skip)]
    #[serde(default)]
    pub fallback: Option<OneOrMany>,

    /// Registry only: the model that answers again the questions this model answered with
    /// low confidence (`escalate_below`, or `escalate_when`), all of them in one request.
    #[arg(skip)]
    #[serde(default)]
    pub escalate_to: Option<String>,

    /// Registry only: escalate an answer whose `confidence` is under this (0 < x ≤ 1).
    #[arg(skip)]
    #[serde(default)]
    pub escalate_below: Option<f64>,

    /// Registry only: escalate an answer by its calibration profile (`not_automate`).
    #[arg(skip)]
    #[serde(default)]
    pub escalate_when: Option<EscalateWhen>,

    /// Registry only: when the escalation model fails, fail the request (else it is
    /// answered with the first answers and `x-systemone-escalation: failed`).
    #[arg(skip)]
    #[serde(default)]
    pub escalate_required: bool,

    /// The native server's flavor (`--backend systemone` only): `typesafe` (the default;
    /// also another `systemone`), `ollama` or `vllm`.
    #[arg(long, env = "SYSTEMONE_FLAVOR", value_enum, default_value_t = Flavor::Typesafe)]
    #[serde(default)]
    pub flavor: Flavor,

    /// Ollama's `keep_alive` (`--backend systemone --flavor ollama` only), sent with every
    /// request; a caller's `keep_alive` is never forwarded.
    #[arg(long, env = "SYSTEMONE_KEEP_ALIVE")]
    #[serde(default)]
    pub keep_alive: Option<String>,

    /// Registry only: the environment variable holding the backend API key (the file
    /// never holds keys).
    #[arg(skip)]
    pub backend_api_key_env: Option<String>,

    /// API key sent to the backend as a bearer token (never logged). In the registry it
    /// is resolved from `backend_api_key_env`, never read from the file.
    #[arg(long, env = "SYSTEMONE_BACKEND_API_KEY", hide_env_values = true)]
    #[serde(skip)]
    pub backend_api_key: Option<Secret>,

    /// Token table: a file path, the name of a table shipped in `token-tables/`, or `auto`:
    /// built at startup from the tokenizer the backend serves (vllm, llamacpp), with the
    /// rules of `systemone tokens build`, and rebuilt when a check finds it changed (the
    /// default; an `openai` host, which serves no tokenizer, needs a table).
    #[arg(long, env = "SYSTEMONE_TOKEN_TABLE", default_value = AUTO_TABLE)]
    #[serde(default = "default_token_table")]
    pub token_table: String,

    /// Calibration file (`a`, `b` of `ln T = a + b·ln n`): a path or a shipped name.
    /// Without one, the reference's GLM-5.3-Flash formula applies.
    #[arg(long, env = "SYSTEMONE_CALIBRATION")]
    pub calibration: Option<String>,

    /// Default prompt layout for the model (a request's `layout` overrides it).
    #[arg(long, env = "SYSTEMONE_LAYOUT", value_enum, default_value_t = Layout::Accuracy)]
    #[serde(default)]
    pub layout: Layout,

    /// Option orders each question is asked in when a request does not say (1 to 8; a
    /// request's own `permutations` overrides it). Each order is one more read; their
    /// average cancels the model's preference for a label position, so a second
    /// `systemone` over the same backend with `--permutations 2` or more is a stronger
    /// native upstream to escalate to.
    #[arg(long, env = "SYSTEMONE_PERMUTATIONS", default_value_t = 1)]
    #[serde(default = "default_permutations")]
    pub permutations: usize,

    /// Learn the model's preference for a label position while serving (from questions
    /// read in two or more orders) and take it out of single-read answers, where it makes
    /// them agree better with every rotation (docs/calibration/prior.md).
    #[arg(long, env = "SYSTEMONE_PRIOR_CORRECTION", default_value_t = false, action = clap::ArgAction::Set)]
    #[serde(default)]
    pub prior_correction: bool,

    /// Share of single-read requests asked once more, each question in the order rotated
    /// by one, for the prior to learn from (0 to 1; 0.05 is 1.05 reads per answer).
    #[arg(long, env = "SYSTEMONE_PRIOR_SAMPLE_SHARE", default_value_t = DEFAULT_PRIOR_SAMPLE_SHARE)]
    #[serde(default = "default_prior_sample_share")]
    pub prior_sample_share: f64,

    /// Labels for questions with more options than the single-token labels.
    #[arg(long, env = "SYSTEMONE_LABEL_SCHEME", value_enum, default_value_t = LabelScheme::Numerals)]
    #[serde(default)]
    pub label_scheme: LabelScheme,

    /// The model's `tokenizer.json`: token limits are then counted exactly, and the token
    /// table is checked against it at startup. Without it, limits use a byte estimate.
    #[arg(long, env = "SYSTEMONE_TOKENIZER")]
    pub tokenizer: Option<String>,

    /// Seconds between live checks of the token table against the serving tokenizer
    /// (0 turns the check off, for backends that cannot tokenize; always off with
    /// `--backend openai`, whose probe checks the label ids it sees instead).
    #[arg(
        long,
        env = "SYSTEMONE_TOKEN_CHECK_INTERVAL_SECS",
        default_value_t = DEFAULT_TOKEN_CHECK_INTERVAL_SECS
    )]
    #[serde(default = "default_check_interval")]
    pub token_check_interval_secs: u64,

    /// Let the backend reuse its prefix cache (llama.cpp `cache_prompt`). A cached prefix
    /// can move llama.cpp's probabilities slightly; turn off for bit-exact comparisons.
    #[arg(long, env = "SYSTEMONE_CACHE_PROMPT", default_value_t = true, action = clap::ArgAction::Set)]
    #[serde(default = "default_true")]
    pub cache_prompt: bool,

    /// Send `chat_template_kwargs: {"enable_thinking": false}` (Qwen 3 style thinking models).
    #[arg(long, env = "SYSTEMONE_DISABLE_THINKING")]
    #[serde(default)]
    pub disable_thinking: bool,

    /// Most token ids read in one upstream request (vLLM deployments cap this at 128; the
    /// `openai` dialect takes its cap from its probe instead).
    #[arg(long, env = "SYSTEMONE_MAX_IDS_PER_READ", default_value_t = DEFAULT_MAX_IDS_PER_READ)]
    #[serde(default = "default_max_ids")]
    pub max_ids_per_read: usize,

    /// The model reads images: requests may carry `images` / `assets`, sent to the backend
    /// as `image_url` parts. Without it any image is a 422 `system_one_images_unsupported`.
    #[arg(long, env = "SYSTEMONE_VISION")]
    #[serde(default)]
    pub vision: bool,

    /// The model's release date (`YYYY-MM-DD`), listed by `/v1/models`; `unknown` without it.
    #[arg(long, env = "SYSTEMONE_RELEASE_DATE")]
    #[serde(default)]
    pub release_date: Option<String>,

    /// The yes/no question `/v2/rerank` asks of each document (the instructions of its
    /// noul); callers cannot change it.
    #[arg(long, env = "SYSTEMONE_RERANK_QUESTION", default_value = DEFAULT_RERANK_QUESTION)]
    #[serde(default = "default_rerank_question")]
    pub rerank_question: String,
}

impl ModelConfig {
    /// The checks across this model's fields (those across models, fallbacks and names,
    /// are the registry's, in `Models::new`).
    pub fn check(&self) -> Result<(), ConfigError> {
        let invalid = |e: String| ConfigError::Invalid(format!("model {}: {e}", self.name));
        if let Some(date) = &self.release_date {
            checked_date(date).map_err(invalid)?;
        }
        self.check_replicas().map_err(invalid)?;
        if !(1..=MAX_PERMUTATIONS).contains(&self.permutations) {
            return Err(invalid(format!(
                "permutations must be from 1 to {MAX_PERMUTATIONS}, got {}",
                self.permutations
            )));
        }
        if !(0.0..=1.0).contains(&self.prior_sample_share) {
            return Err(invalid(format!(
                "prior_sample_share must be from 0 to 1, got {}",
                self.prior_sample_share
            )));
        }
        self.check_escalation().map_err(invalid)
    }

    /// At least one backend URL, none empty or twice; a load factor of at least 1 (below
    /// the mean no replica could take a request); routing-key headers that are header names.
    fn check_replicas(&self) -> Result<(), String> {
        let urls = &self.backend_url;
        if urls.is_empty() || urls.iter().any(|u| u.trim().is_empty()) {
            return Err(format!(
                "backend_url must name at least one URL, none empty; got {urls:?}"
            ));
        }
        if let Some(twice) = urls
            .iter()
            .enumerate()
            .find(|(i, u)| urls[..*i].contains(u))
        {
            return Err(format!("backend_url lists {:?} twice", twice.1));
        }
        let factor = self.replica_load_factor;
        if !(factor.is_finite() && (1.0..=100.0).contains(&factor)) {
            return Err(format!(
                "replica_load_factor must be from 1 to 100, got {factor}"
            ));
        }
        for name in self.routing_key_headers.iter().filter(|h| !h.is_empty()) {
            if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!(
                    "routing_key_headers: {name:?} is not a header name"
                ));
            }
        }
        Ok(())
    }

    /// The headers a request's routing key goes in (empty entries dropped).
    pub fn routing_headers(&self) -> Vec<hyper::header::HeaderName> {
        self.routing_key_headers
            .iter()
            .filter_map(|h| hyper::header::HeaderName::from_bytes(h.as_bytes()).ok())
            .collect()
    }

    /// `escalate_to` with exactly one rule (`escalate_below` in (0, 1], or
    /// `escalate_when`), and neither rule without it.
    fn check_escalation(&self) -> Result<(), String> {
        let rules =
            usize::from(self.escalate_below.is_some()) + usize::from(self.escalate_when.is_some());
        match (&self.escalate_to, rules) {
            (None, 0) if !self.escalate_required => Ok(()),
            (None, _) => {
                Err("escalate_below, escalate_when and escalate_required need escalate_to".into())
            }
            (Some(_), 0) => Err("escalate_to needs escalate_below or escalate_when".into()),
            (Some(_), 2) => Err("escalate_below and escalate_when cannot both be set".into()),
            (Some(_), _) => match self.escalate_below {
                Some(x) if !(x > 0.0 && x <= 1.0) => Err(format!(
                    "escalate_below must be a confidence in (0, 1], got {x}"
                )),
                _ => Ok(()),
            },
        }
    }

    /// Time between live token-table checks: the configured interval, except that plain
    /// OpenAI has no tokenizer endpoint (the `openai` dialect's probe checks the label ids
    /// it sees instead).
    pub fn token_check_interval(&self) -> Duration {
        match self.backend {
            BackendKind::Openai | BackendKind::Systemone => Duration::ZERO,
            BackendKind::Vllm | BackendKind::Llamacpp => {
                Duration::from_secs(self.token_check_interval_secs)
            }
        }
    }
}

/// `date` when it is written `YYYY-MM-DD` with month 01–12 and day 01–31 (what the SDKs
/// expect).
pub(super) fn checked_date(date: &str) -> Result<(), String> {
    let b = date.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let shaped = b.len() == 10 && b[4] == b'-' && b[7] == b'-';
    let ok = shaped && digits(0..4) && digits(5..7) && digits(8..10) && {
        let (month, day) = (&date[5..7], &date[8..10]);
        ("01"..="12").contains(&month) && ("01"..="31").contains(&day)
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "release_date must be a date written YYYY-MM-DD, got {date:?}"
        ))
    }
}

fn default_token_table() -> String {
    AUTO_TABLE.to_string()
}

fn default_rerank_question() -> String {
    DEFAULT_RERANK_QUESTION.to_string()
}

fn default_true() -> bool {
    true
}

fn default_permutations() -> usize {
    1
}

fn default_prior_sample_share() -> f64 {
    DEFAULT_PRIOR_SAMPLE_SHARE
}

fn default_max_ids() -> usize {
    DEFAULT_MAX_IDS_PER_READ
}

fn default_check_interval() -> u64 {
    DEFAULT_TOKEN_CHECK_INTERVAL_SECS
}

fn default_replica_load_factor() -> f64 {
    DEFAULT_REPLICA_LOAD_FACTOR
}

fn default_routing_key_headers() -> Vec<String> {
    DEFAULT_ROUTING_KEY_HEADERS
        .split(',')
        .map(str::to_string)
        .collect()
}

/// One URL or a list of them (`backend_url = "…"` or `backend_url = ["…", "…"]`).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    OneOrMany::deserialize(d).map(|urls| urls.names())
}
