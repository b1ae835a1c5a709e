//! `POST /v1/systemone`'s request and answer.

use super::*;

/// A state: a non-blank string, an object or an array.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum State {
    Text(String),
    Object(HashMap<String, Value>),
    List(Vec<Value>),
}

/// `POST /v1/systemone`: TypeSafe's typed-decision request. Unknown top-level fields are
/// ignored (and named in `x-systemone-ignored-fields`); the limits are the service's flags.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct SystemOneRequest {
    /// A configured model or alias; absent is the default model.
    model: Option<String>,
    state: State,
    /// Question id → question; key order is the answer order. 1 to `--max-questions`.
    questions: HashMap<String, Question>,
    /// Overrides every question's calibration temperature; `1` is raw probabilities.
    #[schema(exclusive_minimum = 0.0)]
    temperature: Option<f64>,
    /// A server-side calibration profile's name.
    calibration: Option<String>,
    layout: Option<Layout>,
    /// Rotated option orders to ask and average; absent: the model's default (1 unless
    /// configured with `permutations`).
    #[schema(minimum = 1, maximum = 8)]
    permutations: Option<u32>,
    /// The position prior learned while serving (docs/calibration/prior.md); absent: the
    /// model's setting. `false` keeps this request out of it (not corrected, not sampled);
    /// `true` on a model that does not learn one is refused (`system_one_prior_correction_off`).
    prior_correction: Option<bool>,
    /// A record that grows across calls: one string, or question id → string.
    history: Option<History>,
    /// `data:image/...;base64,` URLs or raw base64 (vision models only).
    images: Option<Vec<String>>,
    /// TypeSafe's image assets, `"<image:HEX>"` → `{type: "image", part}` or inline base64.
    assets: Option<HashMap<String, Value>>,
    /// Accepted and ignored (Ollama clients send it).
    keep_alive: Option<Value>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(in crate::http::openapi) enum Layout {
    Accuracy,
    Cost,
    Compact,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum History {
    Shared(String),
    PerQuestion(HashMap<String, String>),
}

/// A question, by its `type`.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum Question {
    Choice(ChoiceQuestion),
    Noul(NoulQuestion),
    Score(ScoreQuestion),
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct ChoiceQuestion {
    #[serde(rename = "type")]
    kind: ChoiceTag,
    instructions: Option<Value>,
    /// Label → description, in option order; 1 to 255 labels (and the model's capacity).
    criteria: HashMap<String, Value>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct NoulQuestion {
    #[serde(rename = "type")]
    kind: NoulTag,
    instructions: Option<Value>,
    /// Only the keys `"true"` and `"false"`, each a description.
    criteria: Option<NoulCriteria>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct NoulCriteria {
    #[serde(rename = "true")]
    yes: Option<Value>,
    #[serde(rename = "false")]
    no: Option<Value>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct ScoreQuestion {
    #[serde(rename = "type")]
    kind: ScoreTag,
    instructions: Option<Value>,
    /// The levels, lowest first: 1 to `--max-levels`, each a string, object or array.
    #[schema(min_items = 1)]
    criteria: Vec<Value>,
}

/// The 200 answer of `POST /v1/systemone`.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct SystemOneResponse {
    /// The model that served, as the backend reports it.
    model: String,
    /// Question id → answer, in question order.
    answers: HashMap<String, Answer>,
    usage: Usage,
}

#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(in crate::http::openapi) enum Answer {
    Choice(ChoiceAnswer),
    Noul(NoulAnswer),
    Score(ScoreAnswer),
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ChoiceAnswer {
    /// The most probable label (ties to the first).
    choice: String,
    /// Label → probability, in option order.
    probabilities: HashMap<String, f64>,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct NoulAnswer {
    /// P(yes).
    noul: f64,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ScoreAnswer {
    /// Σ level index × probability, in [0, levels − 1].
    score: f64,
    /// Level index (`"0"`, `"1"`, …) → the level as asked.
    legend: HashMap<String, Value>,
    /// Level index → probability.
    probabilities: HashMap<String, f64>,
    #[serde(flatten)]
    extras: AnswerExtras,
}

/// What every answer carries beside its value.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct AnswerExtras {
    /// 1 − H(p)/ln(n): how peaked the distribution is, not whether it is right.
    confidence: f64,
    /// The calibration temperature applied (a native upstream's answer carries its own, or
    /// none when it reported none).
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    /// The model that gave this answer when escalation replaced the first model's (its
    /// public name; `x-systemone-escalated` counts them).
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    /// The share of the model's probability that fell on the options before masking.
    #[serde(skip_serializing_if = "Option::is_none")]
    option_mass: Option<f64>,
    /// Asked, but the backend could not report the pre-mask mass.
    #[serde(skip_serializing_if = "Option::is_none")]
    option_mass_unknown: Option<bool>,
    /// The calibration profile that covered the question.
    #[serde(skip_serializing_if = "Option::is_none")]
    calibration: Option<String>,
    /// The profile's prediction set.
    #[serde(skip_serializing_if = "Option::is_none")]
    prediction_set: Option<Vec<Value>>,
    /// Whether the profile says the answer may be acted on unreviewed.
    #[serde(skip_serializing_if = "Option::is_none")]
    automate: Option<bool>,
}

/// `usage` of `/v1/systemone` (and beside rerank's `meta`).
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct Usage {
    input_tokens: u64,
    output_tokens: u64,
    upstream_requests: u64,
    cached_tokens: u64,
    /// Extension: prompt tokens the backend evaluated rather than served from its prefix
    /// cache, by its own counters (llama-server's `timings.prompt_n`; vLLM's prompt tokens
    /// less `prompt_tokens_details.cached_tokens`).
    evaluated_tokens: u64,
    /// Present (true) when the backend reported no usage and it was estimated.
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated: Option<bool>,
}
