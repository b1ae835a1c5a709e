//! The bodies of every route, as OpenAPI schemas. The handlers read bodies as JSON values
//! and write them with hand-made serializers (key order, full `f64` precision), so these
//! types exist only to be described; what keeps them true is the tests, which check real
//! answers of every route against this description (`tests/live/openapi.rs`) and run
//! Schemathesis from it in CI.
//!
//! The rules a schema cannot say (labels, sizes, the model's capacity, every configurable
//! limit) are the contract's and validation's; a schema here is never stricter than the
//! service, so a body it refuses the service refuses too.

#![allow(dead_code)] // Described, never built.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// A tag: the one string a `type` field may hold (a tagged enum would put `type` beside
/// a struct that allows no other field, which no body could satisfy).
macro_rules! tag {
    ($name:ident, $variant:ident) => {
        #[derive(Serialize, ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub(super) enum $name {
            $variant,
        }
    };
}

tag!(ChoiceTag, Choice);
tag!(NoulTag, Noul);
tag!(ScoreTag, Score);
tag!(PredicateTag, Predicate);
tag!(InputTextTag, InputText);
tag!(OutputTextTag, OutputText);
tag!(InputImageTag, InputImage);
tag!(InputJsonTag, InputJson);

/// A state: a non-blank string, an object or an array.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum State {
    Text(String),
    Object(HashMap<String, Value>),
    List(Vec<Value>),
}

/// `POST /v1/systemone`: TypeSafe's typed-decision request. Unknown top-level fields are
/// ignored (and named in `x-systemone-ignored-fields`); the limits are the service's flags.
#[derive(Serialize, ToSchema)]
pub(super) struct SystemOneRequest {
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
pub(super) enum Layout {
    Accuracy,
    Cost,
    Compact,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum History {
    Shared(String),
    PerQuestion(HashMap<String, String>),
}

/// A question, by its `type`.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum Question {
    Choice(ChoiceQuestion),
    Noul(NoulQuestion),
    Score(ScoreQuestion),
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ChoiceQuestion {
    #[serde(rename = "type")]
    kind: ChoiceTag,
    instructions: Option<Value>,
    /// Label → description, in option order; 1 to 255 labels (and the model's capacity).
    criteria: HashMap<String, Value>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NoulQuestion {
    #[serde(rename = "type")]
    kind: NoulTag,
    instructions: Option<Value>,
    /// Only the keys `"true"` and `"false"`, each a description.
    criteria: Option<NoulCriteria>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NoulCriteria {
    #[serde(rename = "true")]
    yes: Option<Value>,
    #[serde(rename = "false")]
    no: Option<Value>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ScoreQuestion {
    #[serde(rename = "type")]
    kind: ScoreTag,
    instructions: Option<Value>,
    /// The levels, lowest first: 1 to `--max-levels`, each a string, object or array.
    #[schema(min_items = 1)]
    criteria: Vec<Value>,
}

/// The 200 answer of `POST /v1/systemone`.
#[derive(Serialize, ToSchema)]
pub(super) struct SystemOneResponse {
    /// The model that served, as the backend reports it.
    model: String,
    /// Question id → answer, in question order.
    answers: HashMap<String, Answer>,
    usage: Usage,
}

#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(super) enum Answer {
    Choice(ChoiceAnswer),
    Noul(NoulAnswer),
    Score(ScoreAnswer),
}

#[derive(Serialize, ToSchema)]
pub(super) struct ChoiceAnswer {
    /// The most probable label (ties to the first).
    choice: String,
    /// Label → probability, in option order.
    probabilities: HashMap<String, f64>,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(super) struct NoulAnswer {
    /// P(yes).
    noul: f64,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ScoreAnswer {
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
pub(super) struct AnswerExtras {
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
pub(super) struct Usage {
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

/// Every error body: the contract's, and on `/v1/decisions` OpenAI's (with `param`).
#[derive(Serialize, ToSchema)]
pub(super) struct ErrorBody {
    error: ErrorObject,
    /// FastAPI's list, on a 422.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<Vec<ErrorDetail>>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ErrorObject {
    /// Names the field, the limit and the value.
    message: String,
    /// The stable `system_one_*` code, also in `x-systemone-error-code`.
    code: String,
    /// The error class (`invalid_request_error` on `/v1/decisions` for a broken rule).
    #[serde(rename = "type")]
    kind: String,
    /// `/v1/decisions` only: where in the body, in OpenAI's notation (`questions[0].choices`).
    #[serde(skip_serializing_if = "Option::is_none")]
    param: Option<Option<String>>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ErrorDetail {
    loc: Vec<String>,
    msg: String,
    #[serde(rename = "type")]
    kind: String,
}

/// `POST /v1/decisions`: OpenAI's `DecisionCreateParams` (`openai` 3.51.0), plus this
/// service's extensions. Unknown top-level fields are ignored.
#[derive(Serialize, ToSchema)]
pub(super) struct DecisionRequest {
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
pub(super) enum DecisionInput {
    Text(String),
    Messages(Vec<DecisionMessage>),
}

/// A message (function and tool call items are refused: they cannot be honoured).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DecisionMessage {
    #[serde(rename = "type")]
    kind: Option<MessageTag>,
    role: Role,
    content: Content,
    /// Assistant messages only.
    phase: Option<Phase>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum MessageTag {
    Message,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum Role {
    User,
    System,
    Developer,
    Assistant,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum Phase {
    Commentary,
    FinalAnswer,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// A content part. Which a role may hold: user text, images, JSON; system and developer
/// text; assistant output text.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum Part {
    InputText(InputTextPart),
    OutputText(OutputTextPart),
    InputImage(ImagePart),
    InputJson(JsonPart),
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct InputTextPart {
    #[serde(rename = "type")]
    kind: InputTextTag,
    text: String,
    prompt_cache_breakpoint: Option<CacheBreakpoint>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct OutputTextPart {
    #[serde(rename = "type")]
    kind: OutputTextTag,
    text: String,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ImagePart {
    #[serde(rename = "type")]
    kind: InputImageTag,
    /// A `data:image/...;base64,` URL (the service never fetches a URL).
    image_url: String,
    detail: Option<Detail>,
    prompt_cache_breakpoint: Option<CacheBreakpoint>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum Detail {
    Low,
    High,
    Auto,
    Original,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct JsonPart {
    #[serde(rename = "type")]
    kind: InputJsonTag,
    data: JsonData,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum JsonData {
    Object(HashMap<String, Value>),
    Objects(Vec<HashMap<String, Value>>),
}

/// Accepted, not acted on: the backends' prefix caches need no breakpoints.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CacheBreakpoint {
    mode: ExplicitMode,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum ExplicitMode {
    Explicit,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PromptCacheOptions {
    mode: Option<CacheMode>,
    ttl: Option<Ttl>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum CacheMode {
    Implicit,
    Explicit,
}

#[derive(Serialize, ToSchema)]
pub(super) enum Ttl {
    #[serde(rename = "30m")]
    ThirtyMinutes,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum Instructions {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum DecisionQuestion {
    Predicate(PredicateQuestion),
    Choice(DecisionChoiceQuestion),
    Score(DecisionScoreQuestion),
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PredicateQuestion {
    #[serde(rename = "type")]
    kind: PredicateTag,
    instructions: Instructions,
    /// Unique among the call's questions; echoed in the answer.
    name: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DecisionChoiceQuestion {
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
pub(super) struct Choice {
    value: ChoiceValue,
    description: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum ChoiceValue {
    Text(String),
    Flag(bool),
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DecisionScoreQuestion {
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
pub(super) struct Level {
    label: String,
    description: Option<String>,
}

/// The 200 answer of `POST /v1/decisions`: OpenAI's `Decision`.
#[derive(Serialize, ToSchema)]
pub(super) struct Decision {
    /// In question order.
    answers: Vec<DecisionAnswer>,
    /// The configured name of the model that served.
    model: String,
    usage: DecisionUsage,
}

#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(super) enum DecisionAnswer {
    Predicate(PredicateAnswer),
    Choice(DecisionChoiceAnswer),
    Score(DecisionScoreAnswer),
}

#[derive(Serialize, ToSchema)]
pub(super) struct PredicateAnswer {
    name: Option<String>,
    /// P(true).
    probability: f64,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(super) struct DecisionChoiceAnswer {
    name: Option<String>,
    choice: ChoiceValue,
    probabilities: Vec<ValueProbability>,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ValueProbability {
    value: ChoiceValue,
    probability: f64,
}

#[derive(Serialize, ToSchema)]
pub(super) struct DecisionScoreAnswer {
    name: Option<String>,
    score: f64,
    probabilities: Vec<LevelProbability>,
    #[serde(flatten)]
    extras: AnswerExtras,
}

#[derive(Serialize, ToSchema)]
pub(super) struct LevelProbability {
    /// The level's index, lowest 0.
    value: u32,
    label: String,
    probability: f64,
}

/// OpenAI's usage, with this service's `upstream_requests` (and `estimated`).
#[derive(Serialize, ToSchema)]
pub(super) struct DecisionUsage {
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
pub(super) struct InputTokensDetails {
    cached_tokens: u64,
    /// Always 0: no backend here reports cache writes.
    cache_write_tokens: u64,
}

#[derive(Serialize, ToSchema)]
pub(super) struct OutputTokensDetails {
    /// Always 0.
    reasoning_tokens: u64,
}

/// `POST /v2/rerank` and `POST /v1/rerank`: Cohere's v2 body. Unknown fields are ignored.
#[derive(Serialize, ToSchema)]
pub(super) struct RerankRequest {
    model: Option<String>,
    /// A non-blank string.
    #[schema(min_length = 1)]
    query: String,
    /// 1 to `--max-rerank-documents`.
    #[schema(min_items = 1)]
    documents: Vec<String>,
    #[schema(minimum = 1)]
    top_n: Option<u64>,
    /// Default 4,096; at most `--max-state-tokens`.
    #[schema(minimum = 1)]
    max_tokens_per_doc: Option<u64>,
}

/// Cohere's `V2RerankResponse`, plus this service's `model` and `usage`.
#[derive(Serialize, ToSchema)]
pub(super) struct RerankResponse {
    /// The request id.
    id: String,
    /// Score descending.
    results: Vec<RerankResult>,
    meta: RerankMeta,
    model: String,
    usage: Usage,
}

#[derive(Serialize, ToSchema)]
pub(super) struct RerankResult {
    index: u64,
    relevance_score: f64,
}

#[derive(Serialize, ToSchema)]
pub(super) struct RerankMeta {
    api_version: ApiVersion,
    billed_units: BilledUnits,
    tokens: RerankTokens,
    cached_tokens: u64,
    /// Which documents were cut to `max_tokens_per_doc` (indexes, never text).
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<Vec<String>>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ApiVersion {
    version: String,
}

#[derive(Serialize, ToSchema)]
pub(super) struct BilledUnits {
    /// One per started 100 documents.
    search_units: u64,
}

#[derive(Serialize, ToSchema)]
pub(super) struct RerankTokens {
    input_tokens: u64,
    output_tokens: u64,
}

/// `GET /v1/models`: TypeSafe's list and OpenAI's in one body.
#[derive(Serialize, ToSchema)]
pub(super) struct ModelsResponse {
    /// Every name a request may use (models, aliases, `jev-latest`).
    models: Vec<ListedModel>,
    object: String,
    /// The models themselves.
    data: Vec<OpenAiModel>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ListedModel {
    name: String,
    description: String,
    /// `YYYY-MM-DD`, or `"unknown"`.
    release_date: String,
}

#[derive(Serialize, ToSchema)]
pub(super) struct OpenAiModel {
    id: String,
    object: String,
    owned_by: String,
}

/// `GET /v1/usage`: answered requests and what they used, per key and UTC day.
#[derive(Serialize, ToSchema)]
pub(super) struct UsageReport {
    object: String,
    /// `YYYY-MM-DD`, inclusive.
    from: String,
    to: String,
    /// The keys read.
    keys: Vec<String>,
    /// One row per key and day with usage.
    usage: Vec<UsageRow>,
    total: UsageCounts,
}

#[derive(Serialize, ToSchema)]
pub(super) struct UsageRow {
    key: String,
    date: String,
    #[serde(flatten)]
    counts: UsageCounts,
}

#[derive(Serialize, ToSchema)]
pub(super) struct UsageCounts {
    requests: u64,
    questions: u64,
    input_tokens: u64,
    cached_tokens: u64,
    upstream_requests: u64,
}

/// `GET /healthz`.
#[derive(Serialize, ToSchema)]
pub(super) struct Health {
    status: String,
}

/// `GET /readyz`.
#[derive(Serialize, ToSchema)]
pub(super) struct Readiness {
    ready: bool,
    models: Vec<ModelReadiness>,
    /// The per-key limit store.
    limits: LimitsReadiness,
    /// The decision ledger (null when it is off).
    ledger: Option<LedgerReadiness>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct LedgerReadiness {
    /// `sqlite` or `postgres`.
    store: String,
    /// `fail_open` or `fail_closed`.
    policy: String,
    /// Whether the store took the last write or probe (for SQLite: on the files at its path).
    available: bool,
    /// Available and sound, or `fail_open`.
    ready: bool,
    /// `ok`, or `corrupt` (the SQLite file failed `quick_check`, a statement found it
    /// malformed, or another process wrote it in place).
    integrity: String,
    /// Records whose commit failed, waiting to be written again once the store is back.
    backlog: u64,
    /// Records in the writer's queue.
    queued: u64,
    /// Records given up since the ledger opened, never on record.
    lost: u64,
}

#[derive(Serialize, ToSchema)]
pub(super) struct LimitsReadiness {
    /// `memory`, `embedded` or `redis`.
    store: String,
    /// `fail_open` or `fail_closed`.
    policy: String,
    connected: bool,
    ready: bool,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ModelReadiness {
    name: String,
    ready: bool,
    /// `verified`, `unchecked`, `mismatch` or `disabled`.
    token_table: String,
    /// Whether the backend answered its last health probe (null before the first).
    backend_answered: Option<bool>,
    /// `closed`, `open` or `half_open`.
    circuit: String,
    last_check_unix: Option<u64>,
    /// The backend dialect: `vllm`, `llamacpp` or `openai`.
    dialect: String,
    /// What the `openai` dialect's probe found of its host (null for the other dialects).
    host: Option<HostReadiness>,
}

/// The `openai` dialect's probe of its host (docs/backends.md, "The `openai` dialect").
#[derive(Serialize, ToSchema)]
pub(super) struct HostReadiness {
    /// `unprobed`, `ready` or `refused`.
    probe: String,
    /// `post_bias` or `raw_top_k`, once ready.
    strategy: Option<String>,
    /// What the host lacks, when refused.
    refused: Option<String>,
    /// The most `top_logprobs` entries the host returns.
    top_logprobs: Option<u64>,
    /// `id`, `token_id:N` or `text` (options found by their label text).
    token_ids: Option<String>,
    /// `after_logprobs`, `before_logprobs` or `ignored`.
    logit_bias: Option<String>,
    /// `trailing_message` or `continue_final_message`.
    prefill: Option<String>,
}

/// `GET /v1/ledger/decisions`: a page of records, newest first.
#[derive(Serialize, ToSchema)]
pub(super) struct LedgerPage {
    object: String,
    decisions: Vec<LedgerDecision>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// One request's record: numbers and keyed hashes of the caller's text.
#[derive(Serialize, ToSchema)]
pub(super) struct LedgerDecision {
    /// The response's `x-request-id`.
    request_id: String,
    /// Arrival, Unix milliseconds.
    at_ms: i64,
    /// The API key's configured name (`anonymous` on an open service).
    key: String,
    route: String,
    /// The HTTP status answered.
    status: u16,
    /// A refusal's error code.
    code: Option<String>,
    /// The configured model that served.
    model: Option<String>,
    latency_ms: f64,
    usage: LedgerTokens,
    /// Keyed hash (HMAC-SHA256, 128 bits, hex) of the request as read.
    body_hash: Option<String>,
    /// Which ledger key made the hashes.
    hash_key_id: String,
    images: Vec<LedgerImage>,
    /// One per question answered (none for a refusal).
    questions: Vec<LedgerQuestion>,
    /// The validated request, only under `--ledger-inputs full` and within its retention.
    inputs: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct LedgerTokens {
    input_tokens: u64,
    output_tokens: u64,
    upstream_requests: u64,
    cached_tokens: u64,
}

/// An image: its SHA-256 and decoded size.
#[derive(Serialize, ToSchema)]
pub(super) struct LedgerImage {
    sha256: String,
    bytes: u64,
}

/// One answered question.
#[derive(Serialize, ToSchema)]
pub(super) struct LedgerQuestion {
    /// The question id, when the query named it (`question=`); else null.
    name: Option<String>,
    /// Keyed hash of the question id.
    name_hash: String,
    #[serde(rename = "type")]
    kind: String,
    options: usize,
    /// The option answered (the most probable), by index.
    answer: usize,
    /// A choice's answered label, when the query named it (`label=`).
    answer_label: Option<String>,
    /// A choice's labels in option order, each where the query named it, else null.
    labels: Option<Vec<Option<String>>>,
    /// Keyed hashes of a choice's labels.
    label_hashes: Option<Vec<String>>,
    /// In option order, full precision.
    probabilities: Vec<f64>,
    confidence: f64,
    temperature: f64,
    option_mass: Option<f64>,
    /// The model as the backend reported it.
    model: String,
    /// The current outcome's option index, if any.
    outcome: Option<usize>,
    /// Every outcome recorded, oldest first (replaced ones carry `replaced_at_ms`).
    outcomes: Vec<LedgerOutcome>,
}

/// An outcome as recorded.
#[derive(Serialize, ToSchema)]
pub(super) struct LedgerOutcome {
    request_id: String,
    /// Keyed hash of the question id.
    question: String,
    /// The option that was true, by index (noul: 1 yes, 0 no).
    outcome: usize,
    note: Option<String>,
    /// The key that recorded it.
    key: String,
    at_ms: i64,
    replaced_at_ms: Option<i64>,
}

/// `POST /v1/ledger/decisions/{request_id}/outcomes`.
#[derive(Serialize, ToSchema)]
pub(super) struct OutcomeRequest {
    /// The question's id, as sent.
    question: String,
    /// A choice's label, a noul's `true` / `false`, or a score's level index.
    outcome: Value,
    /// At most 2,000 characters.
    note: Option<String>,
    /// Replace the question's current outcome (kept as history); else a second is a 409.
    replace: Option<bool>,
}

/// The outcome recorded.
#[derive(Serialize, ToSchema)]
pub(super) struct OutcomeRecorded {
    request_id: String,
    question: String,
    outcome: Value,
    /// The option index the outcome names.
    index: usize,
    note: Option<String>,
    key: String,
    at_ms: i64,
    replace: bool,
}

/// The calibration watch's filters (`GET /v1/calibration` and its charts).
#[derive(Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct CalibrationQuery {
    /// Only this configured model
    model: Option<String>,
    /// Only this question type: choice, noul or score
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Only this option count
    options: Option<usize>,
    /// Only this layout: accuracy, cost or compact
    layout: Option<String>,
    /// Only raw, prior (corrected by the position prior) or profile answers
    class: Option<String>,
    /// hour, day (default) or week
    window: Option<String>,
}

/// A shape of question, as the calibration watch keeps its figures.
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationShapeName {
    /// The configured model.
    model: String,
    #[serde(rename = "type")]
    kind: String,
    options: usize,
    /// `accuracy`, `cost`, `compact` (`unknown` for records older than the field).
    layout: String,
    /// `raw`, `prior` (corrected by the position prior) or `profile` (a profile covered it).
    class: String,
}

/// `GET /v1/calibration`: the calibration watch's figures per shape over one span's
/// windows (the caller's own answers, or every key's for the admin).
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationPage {
    /// `calibration`.
    object: String,
    /// `hour`, `day` or `week`.
    window: String,
    /// The reference window the drift figures compare against; null before any answer.
    reference: Option<CalibrationReference>,
    shapes: Vec<CalibrationShape>,
}

/// `GET /v1/calibration/charts`: per shape, its figures drawn as SVG.
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationCharts {
    /// `calibration.charts`.
    object: String,
    /// `hour`, `day` or `week`.
    window: String,
    shapes: Vec<CalibrationShapeCharts>,
}

/// One shape's charts over the windows shown.
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationShapeCharts {
    #[serde(flatten)]
    shape: CalibrationShapeName,
    /// Answers over the windows shown.
    answers: u64,
    /// Answers with a current outcome over them.
    outcomes: u64,
    /// SVG: the reliability diagram (15 equal-width bins) of the outcomes.
    reliability: String,
    /// SVG: the histogram (15 bins) of the answers' top probabilities.
    histogram: String,
    /// SVG per drift figure (`psi`, `em_prior_shift`, `expected_accuracy`, `accuracy`,
    /// `ece_equal_width_15`, `mean_option_mass`) over the windows.
    drift: HashMap<String, String>,
}

/// The reference window.
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationReference {
    from_ms: i64,
    until_ms: i64,
    /// Named by the operator (`--calibration-reference`), else the first full week.
    named: bool,
    /// Over: the drift figures compare against it (null until then).
    complete: bool,
}

/// One shape's figures.
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationShape {
    #[serde(flatten)]
    shape: CalibrationShapeName,
    /// Oldest first; the last holds now. A window without answers has null figures.
    windows: Vec<CalibrationWindow>,
    /// The reference window's own figures.
    reference: CalibrationFigures,
}

/// One window's figures.
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationWindow {
    from_ms: i64,
    until_ms: i64,
    #[serde(flatten)]
    figures: CalibrationFigures,
}

/// A window's figures; null where nothing is under one (never 0 for an empty window).
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationFigures {
    answers: u64,
    /// Mean `confidence` (1 − H/ln n).
    mean_confidence: Option<f64>,
    mean_top_probability: Option<f64>,
    mean_option_mass: Option<f64>,
    /// Answers per equal-width bin (15) of the top probability.
    confidence_histogram: Vec<u64>,
    /// PSI of the histogram against the reference window's.
    psi: Option<f64>,
    /// CBPE's expected accuracy.
    expected_accuracy: Option<f64>,
    /// Mean probability per option (up to 8 options).
    mean_posterior: Option<Vec<f64>>,
    /// The label prior re-estimated by EM against the reference's mean posterior.
    em_prior: Option<Vec<f64>>,
    /// Total variation between `em_prior` and the reference's mean posterior.
    em_prior_shift: Option<f64>,
    below_threshold_share: Option<f64>,
    /// Answers with a current outcome.
    outcomes: u64,
    accuracy: Option<f64>,
    ece_equal_width_15: Option<f64>,
    ece_equal_mass_15: Option<f64>,
    brier: Option<f64>,
    nll: Option<f64>,
    reliability: Vec<CalibrationBin>,
    per_option: Option<Vec<CalibrationOption>>,
}

/// One reliability bin (answers with an outcome).
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationBin {
    lo: f64,
    hi: f64,
    count: u64,
    confidence: Option<f64>,
    accuracy: Option<f64>,
}

/// One option over answers with an outcome.
#[derive(Serialize, ToSchema)]
pub(super) struct CalibrationOption {
    predicted: Option<f64>,
    observed: Option<f64>,
}
