//! The ledger's routes: its pages and records, and an outcome posted to one.

use super::*;

/// `GET /v1/ledger/decisions`: a page of records, newest first.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct LedgerPage {
    object: String,
    decisions: Vec<LedgerDecision>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// One request's record: numbers and keyed hashes of the caller's text.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct LedgerDecision {
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
pub(in crate::http::openapi) struct LedgerTokens {
    input_tokens: u64,
    output_tokens: u64,
    upstream_requests: u64,
    cached_tokens: u64,
}

/// An image: its SHA-256 and decoded size.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct LedgerImage {
    sha256: String,
    bytes: u64,
}

/// One answered question.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct LedgerQuestion {
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
pub(in crate::http::openapi) struct LedgerOutcome {
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
pub(in crate::http::openapi) struct OutcomeRequest {
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
pub(in crate::http::openapi) struct OutcomeRecorded {
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
