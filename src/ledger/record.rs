//! What one ledger record holds: numbers, bounded names (route, model, codes, the key's
//! configured name) and keyed hashes of the caller's text; never the text itself unless the
//! operator asked for `--ledger-inputs full`.

use serde::{Deserialize, Serialize};

/// One request's record: an answer or a refusal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `req_<hex>`, as the response's `x-request-id` said.
    pub request_id: String,
    /// Milliseconds since the Unix epoch when the request arrived.
    pub at_ms: i64,
    /// The API key's configured name (never the key).
    pub key: String,
    /// The route (`/v1/systemone`, `/v1/decisions`, `/v2/rerank`, `/v1/rerank`).
    pub route: String,
    /// The HTTP status answered.
    pub status: u16,
    /// The error code of a refusal.
    pub code: Option<String>,
    /// The configured model that served (or was asked, for a refusal that knew it).
    pub model: Option<String>,
    /// Milliseconds from arrival to the answer (before the record's own commit).
    pub latency_ms: f64,
    /// Token accounting (zero for a refusal before any read).
    pub usage: Tokens,
    /// The keyed hash of the request as read (made in `ledger/draft.rs`).
    pub body_hash: Option<String>,
    /// The images sent, as their SHA-256 and size.
    pub images: Vec<ImageRecord>,
    /// One per question answered, in request order (empty for a refusal).
    pub questions: Vec<QuestionRecord>,
    /// Which ledger key made the hashes.
    pub hash_key_id: String,
    /// The validated request (state, questions) under `--ledger-inputs full`, else `None`.
    pub inputs: Option<serde_json::Value>,
}

/// Token accounting of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub upstream_requests: u64,
    pub cached_tokens: u64,
}

/// An image as the ledger keeps it: what identifies it, not what it shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// SHA-256 of the decoded bytes, hex (unkeyed, as a content address).
    pub sha256: String,
    /// Decoded size.
    pub bytes: u64,
}

/// One answered question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionRecord {
    /// Keyed hash of the caller's question id.
    pub name: String,
    /// `choice`, `noul` or `score`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Option (or level) count.
    pub options: usize,
    /// Keyed hashes of a choice's labels, in option order (empty for noul and score).
    pub labels: Vec<String>,
    /// The option answered: the most probable (ties to the first).
    pub answer: usize,
    /// Calibrated probabilities in option order, full precision.
    pub probabilities: Vec<f64>,
    pub confidence: f64,
    pub temperature: f64,
    pub option_mass: Option<f64>,
    /// The model as the backend reported it for this answer; for an answer escalation
    /// replaced, the escalation model's public name (as the answer's `model` says). Stored
    /// once per record when every question names the same (`ledger/store.rs`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// The calibration profile that covered the answer (operator-configured name), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The weight of the model's position prior taken out of the answer's reads, when one
    /// was (`calibration::prior`; the answer's `prior_correction` key). `None`: uncorrected
    /// (no prior learned, declined, opted out, several orders asked, or a profile covered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_correction: Option<f64>,
    /// The request's prompt layout (`accuracy`, `cost`, `compact`): part of the shape the
    /// calibration watch keeps figures by. `None` in records written before records named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// The reads of a question read in two or more orders (a request's `permutations`, or
    /// the position prior's own sample), by position and before any correction: what the
    /// prior learns from, so `systemone calibrate prior` can fit it again offline.
    /// `None` for a question read once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<OrderedReads>,
}

/// A question's reads in several option orders: numbers and the layout's name only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderedReads {
    /// The request's prompt layout (`accuracy`, `cost`, `compact`): part of the prior's shape.
    pub layout: String,
    /// One per order, in the order read.
    pub orders: Vec<OrderReads>,
}

/// One order's read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderReads {
    /// Position `p` held the caller's option `(p + shift) mod n`.
    pub shift: usize,
    /// The log-probability of each position's label.
    pub logprobs: Vec<f64>,
}
