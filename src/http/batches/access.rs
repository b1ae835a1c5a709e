//! What every batch route does first: the caller, with the `batches` scope; the store, or
//! 503 `system_one_batches_unavailable`; a query read into its fields.

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;

use crate::batch::progress::Progress;
use crate::batch::store::Store;
use crate::error::{ApiError, Code};
use crate::http::auth::scope::Scope;
use crate::http::auth::Caller;
use crate::http::AppState;

/// Seconds to wait before asking again when the store failed.
const RETRY_SECS: u64 = 5;

/// The caller, if it may use the batch routes.
pub(super) fn caller(caller: Result<Caller, ApiError>) -> Result<Caller, ApiError> {
    let caller = caller?;
    caller.require(Scope::Batches)?;
    Ok(caller)
}

/// The batch store and its writer.
pub(super) async fn store(state: &AppState) -> Result<&(Store, Progress), ApiError> {
    state.batches.open().await.map_err(unavailable)
}

/// A store failure, as the caller sees it (the cause goes to the log).
pub(super) fn unavailable(e: String) -> ApiError {
    tracing::warn!(error = %e, "the batch store failed");
    ApiError::new(
        Code::BatchesUnavailable,
        "the batch store cannot be used right now",
    )
    .retry_after(RETRY_SECS)
}

/// The list routes' query: `after` (an id), `limit` (1 to 100, default 20), `purpose`.
#[derive(Debug, serde::Deserialize)]
pub(in crate::http) struct ListQuery {
    pub(super) after: Option<String>,
    pub(super) limit: Option<i64>,
    pub(super) purpose: Option<String>,
}

/// The query, its `limit` checked.
pub(super) fn list_query(
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<(ListQuery, i64), ApiError> {
    let Query(query) = query.map_err(|_| {
        ApiError::new(
            Code::BadBatchRequest,
            "the query must be after=<id>, limit=<1 to 100>, purpose=<text>",
        )
    })?;
    let limit = query.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::at(
            Code::BadBatchRequest,
            vec!["limit".into()],
            format!("{limit} is not between 1 and 100"),
        ));
    }
    Ok((query, limit))
}

/// OpenAI's list object of `data` (each with an `id`).
pub(super) fn list(data: Vec<serde_json::Value>, more: bool) -> serde_json::Value {
    let id = |v: Option<&serde_json::Value>| v.map(|v| v["id"].clone());
    serde_json::json!({
        "object": "list",
        "first_id": id(data.first()),
        "last_id": id(data.last()),
        "has_more": more,
        "data": data,
    })
}
