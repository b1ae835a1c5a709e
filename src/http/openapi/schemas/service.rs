//! The service's own routes: `GET /v1/models`, `/v1/usage`, `/healthz`, `/readyz`.

use super::*;

/// `GET /v1/models`: TypeSafe's list and OpenAI's in one body.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ModelsResponse {
    /// Every name a request may use (models, aliases, `jev-latest`).
    models: Vec<ListedModel>,
    object: String,
    /// The models themselves.
    data: Vec<OpenAiModel>,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ListedModel {
    name: String,
    description: String,
    /// `YYYY-MM-DD`, or `"unknown"`.
    release_date: String,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct OpenAiModel {
    id: String,
    object: String,
    owned_by: String,
}

/// `GET /v1/usage`: answered requests and what they used, per key and UTC day.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct UsageReport {
    object: String,
    /// `YYYY-MM-DD`, inclusive.
    from: String,
    to: String,
    /// The keys read.
    keys: Vec<String>,
    /// One row per key and day with usage.
    usage: Vec<UsageRow>,
    total: UsageTotal,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct UsageRow {
    key: String,
    date: String,
    #[serde(flatten)]
    counts: UsageCounts,
    /// The part of these counts that came from batch lines (`/v1/batches`); the rest is
    /// online requests'. A day recorded before batches has zeros here.
    batch: UsageCounts,
}

/// Every row's counts summed, and their batch lines' part.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct UsageTotal {
    #[serde(flatten)]
    counts: UsageCounts,
    batch: UsageCounts,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct UsageCounts {
    requests: u64,
    questions: u64,
    input_tokens: u64,
    cached_tokens: u64,
    upstream_requests: u64,
}

/// `GET /healthz`.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct Health {
    status: String,
}

/// `GET /readyz`.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct Readiness {
    ready: bool,
    models: Vec<ModelReadiness>,
    /// The per-key limit store.
    limits: LimitsReadiness,
    /// The decision ledger (null when it is off).
    ledger: Option<LedgerReadiness>,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct LedgerReadiness {
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
pub(in crate::http::openapi) struct LimitsReadiness {
    /// `memory`, `embedded` or `redis`.
    store: String,
    /// `fail_open` or `fail_closed`.
    policy: String,
    connected: bool,
    ready: bool,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ModelReadiness {
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
pub(in crate::http::openapi) struct HostReadiness {
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
