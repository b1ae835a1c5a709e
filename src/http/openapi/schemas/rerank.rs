//! `POST /v2/rerank` and `/v1/rerank`'s request and answer: Cohere's rerank.

use super::*;

/// `POST /v2/rerank` and `POST /v1/rerank`: Cohere's v2 body. Unknown fields are ignored.
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct RerankRequest {
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
pub(in crate::http::openapi) struct RerankResponse {
    /// The request id.
    id: String,
    /// Score descending.
    results: Vec<RerankResult>,
    meta: RerankMeta,
    model: String,
    usage: Usage,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct RerankResult {
    index: u64,
    relevance_score: f64,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct RerankMeta {
    api_version: ApiVersion,
    billed_units: BilledUnits,
    tokens: RerankTokens,
    cached_tokens: u64,
    /// Which documents were cut to `max_tokens_per_doc` (indexes, never text).
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<Vec<String>>,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ApiVersion {
    version: String,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct BilledUnits {
    /// One per started 100 documents.
    search_units: u64,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct RerankTokens {
    input_tokens: u64,
    output_tokens: u64,
}
