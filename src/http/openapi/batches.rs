//! Batch jobs' operations and bodies (`/v1/files`, `/v1/batches`), in OpenAI's shapes.

#![allow(dead_code)] // Described, never built or called: utoipa reads the types and functions.

use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoResponses, ToSchema};

use super::schemas::ErrorBody;

/// The refusals of the batch routes.
#[derive(IntoResponses)]
pub(super) enum BatchErrors {
    /// The body could not be read.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// A wrong key (when keys are configured).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A missing key, or a caller without the `batches` (or, to create, `ask`) scope.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such file or batch of this caller's.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The batch has ended (cancel).
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The file is over its size cap or over 50,000 lines.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// Not `multipart/form-data` (upload), or an unsupported `Content-Encoding`.
    #[response(status = 415)]
    UnsupportedMedia(ErrorBody),
    /// A file or batch rule: not JSONL, a line not an object, a missing or repeated
    /// `custom_id`, a `url` not the endpoint, a bad `endpoint` or `completion_window`.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
    /// The batch store cannot be used now; `Retry-After`.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// OpenAI's file object.
#[derive(Serialize, ToSchema)]
pub(super) struct FileObject {
    id: String,
    /// `file`.
    object: String,
    bytes: i64,
    created_at: i64,
    filename: String,
    /// `batch` (an upload) or `batch_output` (a batch's output or error file).
    purpose: String,
    status: String,
}

/// `POST /v1/files` (`multipart/form-data`).
#[derive(Serialize, ToSchema)]
pub(super) struct FileUpload {
    /// `batch`.
    purpose: String,
    /// The JSONL file: one `{"custom_id", "method": "POST", "url", "body"}` a line.
    #[schema(format = Binary)]
    file: String,
}

/// A deleted file.
#[derive(Serialize, ToSchema)]
pub(super) struct FileDeleted {
    id: String,
    object: String,
    deleted: bool,
}

/// `POST /v1/batches`.
#[derive(Serialize, ToSchema)]
pub(super) struct BatchCreate {
    /// An uploaded file of the caller's.
    input_file_id: String,
    /// `/v1/systemone`, `/v1/decisions`, `/v2/rerank` or `/v1/rerank`.
    endpoint: String,
    /// `<hours>h`, 1 to 168 (default `24h`).
    completion_window: Option<String>,
    /// At most 16 string values.
    metadata: Option<Value>,
}

/// Lines by state.
#[derive(Serialize, ToSchema)]
pub(super) struct RequestCounts {
    total: i64,
    completed: i64,
    failed: i64,
}

/// OpenAI's batch object.
#[derive(Serialize, ToSchema)]
pub(super) struct BatchObject {
    id: String,
    /// `batch`.
    object: String,
    endpoint: String,
    input_file_id: String,
    completion_window: String,
    /// `in_progress`, `finalizing`, `completed`, `expired`, `cancelling` or `cancelled`.
    status: String,
    /// Named once the batch has ended.
    output_file_id: Option<String>,
    /// Named once the batch has ended.
    error_file_id: Option<String>,
    created_at: i64,
    in_progress_at: Option<i64>,
    expires_at: i64,
    completed_at: Option<i64>,
    expired_at: Option<i64>,
    cancelling_at: Option<i64>,
    cancelled_at: Option<i64>,
    request_counts: RequestCounts,
    metadata: Option<Value>,
}

/// A page of files.
#[derive(Serialize, ToSchema)]
pub(super) struct FileList {
    object: String,
    data: Vec<FileObject>,
    first_id: Option<String>,
    last_id: Option<String>,
    has_more: bool,
}

/// A page of batches, newest first.
#[derive(Serialize, ToSchema)]
pub(super) struct BatchList {
    object: String,
    data: Vec<BatchObject>,
    first_id: Option<String>,
    last_id: Option<String>,
    has_more: bool,
}

/// Uploads a batch input file; every line's rules are checked before it is kept.
#[utoipa::path(post, path = "/v1/files", tag = "batches",
    request_body(content = FileUpload, content_type = "multipart/form-data"),
    responses((status = 200, description = "The file.", body = FileObject), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn files_upload() {}

/// The caller's files, newest first.
#[utoipa::path(get, path = "/v1/files", tag = "batches",
    params(
        ("purpose" = Option<String>, Query, description = "Only this purpose"),
        ("after" = Option<String>, Query, description = "The last file id of the previous page"),
        ("limit" = Option<i64>, Query, description = "1 to 100 (default 20)")),
    responses((status = 200, description = "The page.", body = FileList), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn files_list() {}

/// One file of the caller's.
#[utoipa::path(get, path = "/v1/files/{file_id}", tag = "batches",
    params(("file_id" = String, Path, description = "The file's id")),
    responses((status = 200, description = "The file.", body = FileObject), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn files_get() {}

/// Deletes an input file.
#[utoipa::path(delete, path = "/v1/files/{file_id}", tag = "batches",
    params(("file_id" = String, Path, description = "The file's id")),
    responses((status = 200, description = "Deleted.", body = FileDeleted), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn files_delete() {}

/// A file's bytes: an upload as sent; an output or error file as JSONL lines
/// `{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`.
#[utoipa::path(get, path = "/v1/files/{file_id}/content", tag = "batches",
    params(("file_id" = String, Path, description = "The file's id")),
    responses((status = 200, description = "JSON Lines.", body = String, content_type = "application/jsonl"), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn files_content() {}

/// Creates a batch of an uploaded file's lines for one door; they run in the background.
#[utoipa::path(post, path = "/v1/batches", tag = "batches",
    request_body(content = BatchCreate, content_type = "application/json"),
    responses((status = 200, description = "The batch.", body = BatchObject), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn batches_create() {}

/// The caller's batches, newest first.
#[utoipa::path(get, path = "/v1/batches", tag = "batches",
    params(
        ("after" = Option<String>, Query, description = "The last batch id of the previous page"),
        ("limit" = Option<i64>, Query, description = "1 to 100 (default 20)")),
    responses((status = 200, description = "The page.", body = BatchList), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn batches_list() {}

/// One batch of the caller's, its `request_counts` current.
#[utoipa::path(get, path = "/v1/batches/{batch_id}", tag = "batches",
    params(("batch_id" = String, Path, description = "The batch's id")),
    responses((status = 200, description = "The batch.", body = BatchObject), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn batches_get() {}

/// Cancels a running batch: its finished lines are kept, the rest go to the error file.
#[utoipa::path(post, path = "/v1/batches/{batch_id}/cancel", tag = "batches",
    params(("batch_id" = String, Path, description = "The batch's id")),
    responses((status = 200, description = "The batch, cancelling or cancelled.", body = BatchObject), BatchErrors),
    security((), ("bearer" = [])))]
pub(super) fn batches_cancel() {}
