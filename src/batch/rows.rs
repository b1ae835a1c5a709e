//! The rows of the batch store, and each as OpenAI's object (`file`, `batch`).

use serde_json::{json, Value};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use crate::error::{ApiError, Code};

/// A file: an upload (`kind` input) or a batch's output or error file.
#[derive(Debug, Clone)]
pub struct FileRow {
    pub id: String,
    pub owner: String,
    pub filename: String,
    pub purpose: String,
    pub bytes: i64,
    pub created_at: i64,
    /// `input`, `output` or `error`.
    pub kind: String,
    /// The batch an output or error file is of.
    pub batch_id: Option<String>,
}

impl FileRow {
    pub(super) fn from_row(r: &SqliteRow) -> Self {
        FileRow {
            id: r.get("id"),
            owner: r.get("owner"),
            filename: r.get("filename"),
            purpose: r.get("purpose"),
            bytes: r.get("bytes"),
            created_at: r.get("created_at"),
            kind: r.get("kind"),
            batch_id: r.get("batch_id"),
        }
    }

    /// OpenAI's file object.
    pub fn to_openai(&self) -> Value {
        json!({
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": null,
            "status_details": null,
        })
    }
}

/// A batch.
#[derive(Debug, Clone, Default)]
pub struct BatchRow {
    pub id: String,
    /// The caller's name (its key's, or its token's).
    pub owner: String,
    /// A token caller's tier, to run its lines as it after a restart.
    pub owner_tier: Option<String>,
    pub endpoint: String,
    pub input_file_id: String,
    pub completion_window: String,
    pub status: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub in_progress_at: Option<i64>,
    pub finalizing_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub output_file_id: String,
    pub error_file_id: String,
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
    /// The caller's `metadata`, as JSON text.
    pub metadata: Option<String>,
}

impl BatchRow {
    pub(super) fn from_row(r: &SqliteRow) -> Self {
        BatchRow {
            id: r.get("id"),
            owner: r.get("owner"),
            owner_tier: r.get("owner_tier"),
            endpoint: r.get("endpoint"),
            input_file_id: r.get("input_file_id"),
            completion_window: r.get("completion_window"),
            status: r.get("status"),
            created_at: r.get("created_at"),
            expires_at: r.get("expires_at"),
            in_progress_at: r.get("in_progress_at"),
            finalizing_at: r.get("finalizing_at"),
            completed_at: r.get("completed_at"),
            expired_at: r.get("expired_at"),
            cancelling_at: r.get("cancelling_at"),
            cancelled_at: r.get("cancelled_at"),
            output_file_id: r.get("output_file_id"),
            error_file_id: r.get("error_file_id"),
            total: r.get("total"),
            completed: r.get("completed"),
            failed: r.get("failed"),
            metadata: r.get("metadata"),
        }
    }

    /// Whether the batch has ended.
    pub fn ended(&self) -> bool {
        FINAL.contains(&self.status.as_str())
    }

    /// OpenAI's batch object; the output and error files are named once the batch ended.
    pub fn to_openai(&self) -> Value {
        let ended = self.ended();
        let metadata = self
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str::<Value>(m).ok())
            .unwrap_or(Value::Null);
        json!({
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": null,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": ended.then_some(&self.output_file_id),
            "error_file_id": ended.then_some(&self.error_file_id),
            "created_at": self.created_at,
            "in_progress_at": self.in_progress_at,
            "expires_at": self.expires_at,
            "finalizing_at": self.finalizing_at,
            "completed_at": self.completed_at,
            "failed_at": null,
            "expired_at": self.expired_at,
            "cancelling_at": self.cancelling_at,
            "cancelled_at": self.cancelled_at,
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": metadata,
        })
    }
}

/// A line still to run.
#[derive(Debug, Clone)]
pub struct PendingLine {
    pub idx: i64,
    pub custom_id: String,
    /// The door's body, as JSON text.
    pub body: String,
    /// The door's refusal known when the file was read ([`refusal_text`]).
    pub refusal: Option<String>,
}

impl PendingLine {
    /// The refusal known already, if any.
    pub fn refusal(&self) -> Option<ApiError> {
        let v: Value = serde_json::from_str(self.refusal.as_deref()?).ok()?;
        let code = Code::ALL
            .iter()
            .find(|c| Some(c.as_str()) == v["code"].as_str())?;
        let loc = v["loc"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        Some(ApiError::at(*code, loc, v["msg"].as_str().unwrap_or("")))
    }
}

/// A finished line: its output line and which file it goes to.
#[derive(Debug, Clone)]
pub struct LineDone {
    pub batch_id: String,
    pub idx: i64,
    pub is_error: bool,
    /// The output line, JSON text.
    pub output: String,
    /// Its usage, charged with its output ([`super::progress`]); `None` when it used nothing.
    pub charge: Option<LineCharge>,
}

/// What a finished line used, for its caller's usage: charged once, by its request id.
#[derive(Debug, Clone)]
pub struct LineCharge {
    /// The line's request id (the same every time it runs, [`super::ids`]).
    pub id: String,
    /// Its caller's name.
    pub name: String,
    /// Its usage counters, in the limit stores' order (requests, questions, input tokens,
    /// cached tokens, upstream requests).
    pub counts: [u64; 5],
}

/// Where a group's usage is charged before its outputs are committed: the limit store,
/// which this layer does not know (the service gives it, `http/batches/charge.rs`). A
/// charger that keeps the ids it charged charges a line run again after a crash nothing.
pub trait Charger: Send + Sync + std::fmt::Debug {
    /// Charges `lines`, all or none.
    fn charge<'a>(
        &'a self,
        lines: &'a [LineCharge],
    ) -> futures::future::BoxFuture<'a, Result<(), String>>;
}

/// The statuses a batch ends in.
pub const FINAL: [&str; 4] = ["completed", "failed", "expired", "cancelled"];

/// A refusal as kept in the store.
pub(super) fn refusal_text(e: &ApiError) -> String {
    json!({"code": e.code.as_str(), "loc": e.loc, "msg": e.msg}).to_string()
}
