//! `/v1/batches`: create a batch of an uploaded file's lines for one door (`endpoint`),
//! read one, list them (newest first, `after` a batch id), cancel one. A batch belongs to
//! its caller: another caller's is a 404, as a missing one is. Creating one checks the
//! file's lines against the endpoint and records them all before it answers; the lines then
//! run in the background ([`super::runner`]).

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde_json::{Map, Value};

use super::access::{self, ListQuery};
use super::runner::{self, now_secs};
use crate::batch::ids::{new_batch_id, new_file_id};
use crate::batch::lines::{self, Line, ENDPOINTS};
use crate::batch::rows::BatchRow;
use crate::error::{ApiError, Code};
use crate::http::auth::scope::Scope;
use crate::http::auth::Caller;
use crate::http::blocking::{self, Weight};
use crate::http::body::read_request;
use crate::http::AppState;

/// Largest create body, in bytes: three ids and a little metadata.
const MAX_CREATE_BYTES: usize = 64 * 1024;
/// Longest `completion_window`, in hours (OpenAI's is 24 h).
const MAX_WINDOW_HOURS: i64 = 7 * 24;
/// Most `metadata` pairs, as OpenAI's.
const MAX_METADATA_PAIRS: usize = 16;

fn bad(field: &str, msg: impl Into<String>) -> ApiError {
    ApiError::at(Code::BadBatchRequest, vec![field.into()], msg)
}

/// `POST /v1/batches`.
pub(in crate::http) async fn create(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let caller = access::caller(caller)?;
    caller.require(Scope::Ask)?;
    let body = read_request(&headers, body, MAX_CREATE_BYTES, &state.body_budget).await?;
    let Value::Object(request) = body.json else {
        return Err(ApiError::new(
            Code::BadBatchRequest,
            "the body must be a JSON object",
        ));
    };
    let endpoint = endpoint(&request)?;
    let hours = window(&request)?;
    let metadata = metadata(&request)?;
    let file_id = request.get("input_file_id").and_then(Value::as_str);
    let file_id = file_id.ok_or_else(|| bad("input_file_id", "must name an uploaded file"))?;
    let parsed = file_lines(&state, &caller, file_id, &endpoint).await?;
    let now = now_secs();
    let batch = BatchRow {
        id: new_batch_id(),
        owner: caller.name().to_string(),
        owner_tier: caller.tier().map(|t| t.name.clone()),
        endpoint,
        input_file_id: file_id.to_string(),
        completion_window: format!("{hours}h"),
        status: "in_progress".into(),
        created_at: now,
        expires_at: now + hours * 3600,
        in_progress_at: Some(now),
        output_file_id: new_file_id(),
        error_file_id: new_file_id(),
        total: parsed.len() as i64,
        metadata,
        ..BatchRow::default()
    };
    let (store, _) = access::store(&state).await?;
    store
        .create_batch(&batch, &parsed)
        .await
        .map_err(access::unavailable)?;
    state.metrics.count_batch("in_progress");
    runner::launch(&state, caller, batch.clone());
    Ok(Json(batch.to_openai()))
}

/// The lines of the caller's input file `file_id`, checked against `endpoint`.
async fn file_lines(
    state: &AppState,
    caller: &Caller,
    file_id: &str,
    endpoint: &str,
) -> Result<Vec<Line>, ApiError> {
    let (store, _) = access::store(state).await?;
    let owned = store
        .file(caller.name(), file_id)
        .await
        .map_err(access::unavailable)?;
    let content = match owned.filter(|f| f.kind == "input") {
        Some(file) => store
            .input_content(&file.id)
            .await
            .map_err(access::unavailable)?,
        None => None,
    };
    let content = content.ok_or_else(|| ApiError::new(Code::FileNotFound, "no such input file"))?;
    let door = endpoint.to_string();
    blocking::run(content.len(), Weight::Heavy, move || {
        lines::parse(&content, Some(&door))
    })
    .await?
}

/// `endpoint`: one of the doors.
fn endpoint(request: &Map<String, Value>) -> Result<String, ApiError> {
    let given = request
        .get("endpoint")
        .and_then(Value::as_str)
        .unwrap_or("");
    ENDPOINTS
        .iter()
        .find(|e| **e == given)
        .map(|e| (*e).to_string())
        .ok_or_else(|| {
            bad(
                "endpoint",
                format!("must be one of {}", ENDPOINTS.join(", ")),
            )
        })
}

/// `completion_window`: `<hours>h`, 1 to a week (default and OpenAI's: `24h`).
fn window(request: &Map<String, Value>) -> Result<i64, ApiError> {
    let Some(given) = request.get("completion_window") else {
        return Ok(24);
    };
    given
        .as_str()
        .and_then(|w| w.strip_suffix('h'))
        .and_then(|h| h.parse::<i64>().ok())
        .filter(|h| (1..=MAX_WINDOW_HOURS).contains(h))
        .ok_or_else(|| {
            bad(
                "completion_window",
                format!(
                    "must be \"<hours>h\", 1 to {MAX_WINDOW_HOURS} hours (OpenAI's is \"24h\")"
                ),
            )
        })
}

/// `metadata`: at most 16 pairs of strings, kept as JSON text.
fn metadata(request: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match request.get("metadata") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m))
            if m.len() <= MAX_METADATA_PAIRS && m.values().all(Value::is_string) =>
        {
            Ok(Some(Value::Object(m.clone()).to_string()))
        }
        Some(_) => Err(bad(
            "metadata",
            format!("must be an object of at most {MAX_METADATA_PAIRS} string values"),
        )),
    }
}

/// The caller's batch `id`, or 404.
async fn own_batch(state: &AppState, caller: &Caller, id: &str) -> Result<BatchRow, ApiError> {
    let (store, _) = access::store(state).await?;
    store
        .batch(caller.name(), id)
        .await
        .map_err(access::unavailable)?
        .ok_or_else(|| ApiError::new(Code::BatchNotFound, "no such batch"))
}

/// `GET /v1/batches/{id}`.
pub(in crate::http) async fn get(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let caller = access::caller(caller)?;
    Ok(Json(own_batch(&state, &caller, &id).await?.to_openai()))
}

/// `GET /v1/batches`.
pub(in crate::http) async fn list(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let caller = access::caller(caller)?;
    let (query, limit) = access::list_query(query)?;
    let (store, _) = access::store(&state).await?;
    let (batches, more) = store
        .batches(caller.name(), query.after.as_deref(), limit)
        .await
        .map_err(access::unavailable)?;
    let data = batches.iter().map(BatchRow::to_openai).collect();
    Ok(Json(access::list(data, more)))
}

/// `POST /v1/batches/{id}/cancel`: `cancelling` until its lines in flight have stopped,
/// then `cancelled`; a batch that has ended is a 409.
pub(in crate::http) async fn cancel(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let caller = access::caller(caller)?;
    let batch = own_batch(&state, &caller, &id).await?;
    if batch.ended() {
        return Err(ApiError::new(
            Code::BatchNotCancellable,
            format!(
                "the batch has ended ({}); only a running batch can be cancelled",
                batch.status
            ),
        ));
    }
    let (store, _) = access::store(&state).await?;
    store
        .set_status(&id, "cancelling", now_secs())
        .await
        .map_err(access::unavailable)?;
    state.metrics.count_batch("cancelling");
    if !state.batches.cancel(&id) {
        // Not running here (its caller is gone): it ends now.
        runner::launch(
            &state,
            caller.clone(),
            BatchRow {
                status: "cancelling".into(),
                ..batch
            },
        );
    }
    Ok(Json(own_batch(&state, &caller, &id).await?.to_openai()))
}
