//! `POST /v1/decisions`'s request and answer: OpenAI's Decisions API.

use super::*;

/// `POST /v1/decisions`: OpenAI's `DecisionCreateParams` (`openai` 3.51.0), plus this
/// service's extensions. Unknown top-level fields are ignored.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct DecisionRequest {
    input: DecisionInput,
    model: Option<String>,
    /// 1 to `--max-questions` (OpenAI's contract allows 400).
    #[schema(min_items = 1, max_items = 400)]
    questions: Vec<DecisionQuestion>,
    #[schema(max_length = 64)]
    prompt_cache_key: Option<String>,
    prompt_cache_options: Option<PromptCacheOptions>,
    #[schema(max_length = 64)]
    safety_identifier: Option<String>,
    #[schema(exclusive_minimum = 0.0)]
    temperature: Option<f64>,
    calibration: Option<String>,
    #[schema(minimum = 1, maximum = 8)]
    permutations: Option<u32>,
    layout: Option<Layout>,
    /// As on `/v1/systemone`.
    prior_correction: Option<bool>,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum DecisionInput {
    Text(String),
    Messages(Vec<DecisionMessage>),
}

/// A message (function and tool call items are refused: they cannot be honoured).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct DecisionMessage {
    #[serde(rename = "type")]
    kind: Option<MessageTag>,
    role: Role,
    content: Content,
    /// Assistant messages only.
    phase: Option<Phase>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(in crate::http::openapi) enum MessageTag {
    Message,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(in crate::http::openapi) enum Role {
    User,
    System,
    Developer,
    Assistant,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(in crate::http::openapi) enum Phase {
    Commentary,
    FinalAnswer,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// A content part. Which a role may hold: user text, images, JSON; system and developer
/// text; assistant output text.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum Part {
    InputText(InputTextPart),
    OutputText(OutputTextPart),
    InputImage(ImagePart),
    InputJson(JsonPart),
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct InputTextPart {
    #[serde(rename = "type")]
    kind: InputTextTag,
    text: String,
    prompt_cache_breakpoint: Option<CacheBreakpoint>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct OutputTextPart {
    #[serde(rename = "type")]
    kind: OutputTextTag,
    text: String,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct ImagePart {
    #[serde(rename = "type")]
    kind: InputImageTag,
    /// A `data:image/...;base64,` URL (the service never fetches a URL).
    image_url: String,
    detail: Option<Detail>,
    prompt_cache_breakpoint: Option<CacheBreakpoint>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(in crate::http::openapi) enum Detail {
    Low,
    High,
    Auto,
    Original,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct JsonPart {
    #[serde(rename = "type")]
    kind: InputJsonTag,
    data: JsonData,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum JsonData {
    Object(HashMap<String, Value>),
    Objects(Vec<HashMap<String, Value>>),
}

/// Accepted, not acted on: the backends' prefix caches need no breakpoints.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct CacheBreakpoint {
    mode: ExplicitMode,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(in crate::http::openapi) enum ExplicitMode {
    Explicit,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct PromptCacheOptions {
    mode: Option<CacheMode>,
    ttl: Option<Ttl>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(in crate::http::openapi) enum CacheMode {
    Implicit,
    Explicit,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) enum Ttl {
    #[serde(rename = "30m")]
    ThirtyMinutes,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum Instructions {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum DecisionQuestion {
    Predicate(PredicateQuestion),
    Choice(DecisionChoiceQuestion),
    Score(DecisionScoreQuestion),
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct PredicateQuestion {
    #[serde(rename = "type")]
    kind: PredicateTag,
    instructions: Instructions,
    /// Unique among the call's questions; echoed in the answer.
    name: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct DecisionChoiceQuestion {
    #[serde(rename = "type")]
    kind: ChoiceTag,
    instructions: Instructions,
    name: Option<String>,
    /// 2 to 255 unique choices (a string and a boolean with the same text are distinct).
    #[schema(min_items = 2, max_items = 255)]
    choices: Vec<Choice>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct Choice {
    value: ChoiceValue,
    description: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(in crate::http::openapi) enum ChoiceValue {
    Text(String),
    Flag(bool),
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct DecisionScoreQuestion {
    #[serde(rename = "type")]
    kind: ScoreTag,
    instructions: Instructions,
    name: Option<String>,
    /// Lowest first; 1 to `--max-levels`.
    #[schema(min_items = 1)]
    levels: Vec<Level>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(in crate::http::openapi) struct Level {
    label: String,
    description: Option<String>,
}

/// The 200 answer of `POST /v1/decisions`: OpenAI's `Decision`.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct Decision {
    /// In question order.
    answers: Vec<DecisionAnswer>,
    /// The configured name of the model that served.
    model: String,
    usage: DecisionUsage,
}

#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(in crate::http::openapi) enum DecisionAnswer {
    Predicate(PredicateAnswer),
    Choice(DecisionChoiceAnswer),
    Score(DecisionScoreAnswer),
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct PredicateAnswer {
    name: Option<String>,
    /// P(true).
    probability: f64,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct DecisionChoiceAnswer {
    name: Option<String>,
    choice: ChoiceValue,
    probabilities: Vec<ValueProbability>,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ValueProbability {
    value: ChoiceValue,
    probability: f64,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct DecisionScoreAnswer {
    name: Option<String>,
    score: f64,
    probabilities: Vec<LevelProbability>,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct LevelProbability {
    /// The level's index, lowest 0.
    value: u32,
    label: String,
    probability: f64,
}

/// OpenAI's usage, with this service's `upstream_requests` (and `estimated`).
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct DecisionUsage {
    input_tokens: u64,
    input_tokens_details: InputTokensDetails,
    output_tokens: u64,
    output_tokens_details: OutputTokensDetails,
    total_tokens: u64,
    upstream_requests: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated: Option<bool>,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct InputTokensDetails {
    cached_tokens: u64,
    /// Always 0: no backend here reports cache writes.
    cache_write_tokens: u64,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct OutputTokensDetails {
    /// Always 0.
    reasoning_tokens: u64,
}
