//! `/v1/files`: upload a batch input file (`multipart/form-data`, `purpose=batch`), read
//! one, its content, the list, delete. A file belongs to its caller: another caller's is a
//! 404, as a missing one is. An upload is read and checked whole (every line's rules,
//! [`crate::batch::lines`]) before it is kept, so a malformed file is refused at once with
//! the rule it breaks.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::json;

use super::access::{self, ListQuery};
use super::runner::now_secs;
use crate::batch::ids::new_file_id;
use crate::batch::lines;
use crate::batch::rows::FileRow;
use crate::error::{ApiError, Code};
use crate::http::auth::Caller;
use crate::http::blocking::{self, Weight};
use crate::http::body::read_upload;
use crate::http::AppState;

/// Longest file name kept, in characters.
const MAX_FILENAME_CHARS: usize = 255;

/// `POST /v1/files`.
pub(in crate::http) async fn upload(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let caller = access::caller(caller)?;
    let max = state.batches.settings.max_file_bytes();
    let (bytes, boundary, _share) = read_upload(&headers, body, max, &state.body_budget)
        .await
        .map_err(|e| over_cap(e, max))?;
    let (filename, content) = form(bytes, boundary).await?;
    let checked = content.clone();
    blocking::run(checked.len(), Weight::Heavy, move || {
        lines::parse(&checked, None).map(|_| ())
    })
    .await??;
    let file = FileRow {
        id: new_file_id(),
        owner: caller.name().to_string(),
        filename,
        purpose: "batch".into(),
        bytes: content.len() as i64,
        created_at: now_secs(),
        kind: "input".into(),
        batch_id: None,
    };
    let (store, _) = access::store(&state).await?;
    store
        .insert_file(&file, &content)
        .await
        .map_err(access::unavailable)?;
    Ok(Json(file.to_openai()))
}

/// The body limit, said as the batch file's.
fn over_cap(e: ApiError, max: usize) -> ApiError {
    if e.code == Code::BodyTooLarge {
        ApiError::new(
            Code::BatchFileTooLarge,
            format!("the file is larger than the limit of {max} bytes (--batch-max-file-mb)"),
        )
    } else {
        e
    }
}

/// The form's `file` part (its name and bytes); its `purpose` must be `batch`.
async fn form(bytes: Bytes, boundary: String) -> Result<(String, Bytes), ApiError> {
    let invalid = |msg: &str| ApiError::new(Code::InvalidMultipart, msg.to_string());
    let stream = futures::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(bytes) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let (mut purpose, mut file) = (None, None);
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|_| invalid("the multipart body could not be read"))?
    {
        let name = field.name().map(str::to_string);
        let filename = field
            .file_name()
            .map(|f| f.chars().take(MAX_FILENAME_CHARS).collect::<String>());
        let data = field
            .bytes()
            .await
            .map_err(|_| invalid("the multipart body could not be read"))?;
        match name.as_deref() {
            Some("purpose") => purpose = Some(data),
            Some("file") => file = Some((filename.unwrap_or_else(|| "upload.jsonl".into()), data)),
            _ => {}
        }
    }
    if purpose.as_deref() != Some(b"batch".as_slice()) {
        return Err(ApiError::at(
            Code::BadBatchRequest,
            vec!["purpose".into()],
            "must be \"batch\" (the only files this service keeps are batch input files)",
        ));
    }
    file.ok_or_else(|| invalid("the multipart body has no part named \"file\""))
}

/// `owner`'s file `id`, or 404.
async fn own_file(state: &AppState, caller: &Caller, id: &str) -> Result<FileRow, ApiError> {
    let (store, _) = access::store(state).await?;
    store
        .file(caller.name(), id)
        .await
        .map_err(access::unavailable)?
        .ok_or_else(|| ApiError::new(Code::FileNotFound, "no such file"))
}

/// `GET /v1/files/{id}`.
pub(in crate::http) async fn get(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let caller = access::caller(caller)?;
    Ok(Json(own_file(&state, &caller, &id).await?.to_openai()))
}

/// `GET /v1/files/{id}/content`: an input file as uploaded; an output or error file as
/// its finished lines, in the input's order.
pub(in crate::http) async fn content(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = access::caller(caller)?;
    let file = own_file(&state, &caller, &id).await?;
    let (store, _) = access::store(&state).await?;
    let bytes = match (&file.batch_id, file.kind.as_str()) {
        (Some(batch), kind) if kind != "input" => {
            store.output_content(batch, kind == "error").await
        }
        _ => store
            .input_content(&file.id)
            .await
            .map(Option::unwrap_or_default),
    }
    .map_err(access::unavailable)?;
    Ok(([(header::CONTENT_TYPE, "application/jsonl")], bytes).into_response())
}

/// `DELETE /v1/files/{id}`: an input file (a batch made of it keeps its lines).
pub(in crate::http) async fn delete(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let caller = access::caller(caller)?;
    let (store, _) = access::store(&state).await?;
    let deleted = store
        .delete_file(caller.name(), &id)
        .await
        .map_err(access::unavailable)?;
    if !deleted {
        return Err(ApiError::new(Code::FileNotFound, "no such input file"));
    }
    Ok(Json(json!({"id": id, "object": "file", "deleted": true})))
}

/// `GET /v1/files`: the caller's files, newest first.
pub(in crate::http) async fn list(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let caller = access::caller(caller)?;
    let (query, limit) = access::list_query(query)?;
    let (store, _) = access::store(&state).await?;
    let (files, more) = store
        .files(
            caller.name(),
            query.purpose.as_deref(),
            query.after.as_deref(),
            limit,
        )
        .await
        .map_err(access::unavailable)?;
    let data = files.iter().map(FileRow::to_openai).collect();
    Ok(Json(access::list(data, more)))
}
