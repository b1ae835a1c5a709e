//! `batches.sqlite`: files, batches and every line's progress and output, in one SQLite
//! file under `--state-dir` (in memory without it). Uploaded files are kept in it as
//! blobs, and a batch's output and error files are its finished lines, read in order: a
//! line's progress and its output are one row, committed together, so no state can hold
//! one without the other.
//!
//! WAL mode with `synchronous=FULL`: a commit is on disk when it returns. Lines are
//! committed in groups ([`super::progress`]) so one fsync covers many lines.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use super::lines::Line;
use super::rows::{BatchRow, FileRow, LineDone, PendingLine};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS files (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL,
  filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL, kind TEXT NOT NULL, batch_id TEXT, content BLOB);
CREATE TABLE IF NOT EXISTS batches (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL,
  owner_tier TEXT, endpoint TEXT NOT NULL, input_file_id TEXT NOT NULL,
  completion_window TEXT NOT NULL, status TEXT NOT NULL, created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL, in_progress_at INTEGER, finalizing_at INTEGER,
  completed_at INTEGER, expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER,
  output_file_id TEXT NOT NULL, error_file_id TEXT NOT NULL, total INTEGER NOT NULL,
  completed INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0, metadata TEXT);
CREATE TABLE IF NOT EXISTS lines (
  batch_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL,
  state_key TEXT NOT NULL, body TEXT NOT NULL, refusal TEXT, done INTEGER NOT NULL DEFAULT 0,
  is_error INTEGER NOT NULL DEFAULT 0, output TEXT, PRIMARY KEY (batch_id, idx));
CREATE INDEX IF NOT EXISTS lines_pending ON lines (batch_id, done, state_key, idx);
";

/// The batch store.
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
}

/// A store error, as text.
pub type StoreResult<T> = Result<T, String>;

fn err(e: sqlx::Error) -> String {
    e.to_string()
}

impl Store {
    /// Opens (creating it) `batches.sqlite` in `dir`, or a store in memory without one.
    pub async fn open(dir: Option<&Path>) -> StoreResult<Self> {
        let options = match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                SqliteConnectOptions::new()
                    .filename(dir.join("batches.sqlite"))
                    .create_if_missing(true)
            }
            None => SqliteConnectOptions::from_str("sqlite::memory:").map_err(err)?,
        };
        let options = options
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        // In memory, every connection would be its own database: one connection, kept.
        let connections = if dir.is_some() { 4 } else { 1 };
        // A wait for a connection is bounded by SQLite's own busy timeout, not a pool timer:
        // a timer would fire spuriously where the runtime's clock jumps (paused in tests).
        let pool = SqlitePoolOptions::new()
            .acquire_timeout(Duration::from_secs(24 * 3600))
            .max_connections(connections)
            .min_connections(connections)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await
            .map_err(err)?;
        sqlx::raw_sql(SCHEMA).execute(&pool).await.map_err(err)?;
        Ok(Store { pool })
    }

    /// Keeps an uploaded input file.
    pub async fn insert_file(&self, file: &FileRow, content: &[u8]) -> StoreResult<()> {
        sqlx::query("INSERT INTO files (id, owner, filename, purpose, bytes, created_at, kind, content) VALUES (?, ?, ?, ?, ?, ?, 'input', ?)")
            .bind(&file.id)
            .bind(&file.owner)
            .bind(&file.filename)
            .bind(&file.purpose)
            .bind(file.bytes)
            .bind(file.created_at)
            .bind(content)
            .execute(&self.pool)
            .await
            .map_err(err)?;
        Ok(())
    }

    /// `owner`'s file `id`: an input file, or a batch's output or error file once the batch
    /// has ended (its size then counted from its lines).
    pub async fn file(&self, owner: &str, id: &str) -> StoreResult<Option<FileRow>> {
        let row = sqlx::query(&format!(
            "{FILE_SELECT} WHERE f.owner = ? AND f.id = ? AND {VISIBLE}"
        ))
        .bind(owner)
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(err)?;
        Ok(row.map(|r| FileRow::from_row(&r)))
    }

    /// `owner`'s files, newest first, after the file `after`; and whether there are more.
    pub async fn files(
        &self,
        owner: &str,
        purpose: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> StoreResult<(Vec<FileRow>, bool)> {
        let rows = sqlx::query(&format!(
            "{FILE_SELECT} WHERE f.owner = ? AND {VISIBLE} AND (? IS NULL OR f.purpose = ?) \
             AND (? IS NULL OR f.seq < (SELECT seq FROM files WHERE id = ?)) ORDER BY f.seq DESC LIMIT ?"
        ))
        .bind(owner)
        .bind(purpose)
        .bind(purpose)
        .bind(after)
        .bind(after)
        .bind(limit + 1)
        .fetch_all(&self.pool)
        .await
        .map_err(err)?;
        let more = rows.len() as i64 > limit;
        Ok((
            rows.iter()
                .take(limit as usize)
                .map(FileRow::from_row)
                .collect(),
            more,
        ))
    }

    /// Deletes `owner`'s input file `id`; whether there was one.
    pub async fn delete_file(&self, owner: &str, id: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM files WHERE owner = ? AND id = ? AND kind = 'input'")
            .bind(owner)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(err)?;
        Ok(done.rows_affected() > 0)
    }

    /// An input file's bytes.
    pub async fn input_content(&self, id: &str) -> StoreResult<Option<Vec<u8>>> {
        sqlx::query_scalar("SELECT content FROM files WHERE id = ? AND kind = 'input'")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(err)
    }

    /// A batch's output (`errors`: error) file: its finished lines, one a line, in the
    /// input's order.
    pub async fn output_content(&self, batch: &str, errors: bool) -> StoreResult<Vec<u8>> {
        let lines: Vec<String> = sqlx::query_scalar(
            "SELECT output FROM lines WHERE batch_id = ? AND done = 1 AND is_error = ? ORDER BY idx",
        )
        .bind(batch)
        .bind(errors)
        .fetch_all(&self.pool)
        .await
        .map_err(err)?;
        let mut out = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for line in lines {
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        Ok(out)
    }

    /// Records a new batch, its output and error files and its lines, in one transaction.
    pub async fn create_batch(&self, batch: &BatchRow, lines: &[Line]) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(err)?;
        sqlx::query("INSERT INTO batches (id, owner, owner_tier, endpoint, input_file_id, completion_window, status, created_at, expires_at, in_progress_at, output_file_id, error_file_id, total, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
            .bind(&batch.id).bind(&batch.owner).bind(&batch.owner_tier).bind(&batch.endpoint)
            .bind(&batch.input_file_id).bind(&batch.completion_window).bind(&batch.status)
            .bind(batch.created_at).bind(batch.expires_at).bind(batch.in_progress_at)
            .bind(&batch.output_file_id).bind(&batch.error_file_id).bind(batch.total)
            .bind(&batch.metadata)
            .execute(&mut *tx).await.map_err(err)?;
        for (id, kind) in [
            (&batch.output_file_id, "output"),
            (&batch.error_file_id, "error"),
        ] {
            sqlx::query("INSERT INTO files (id, owner, filename, purpose, bytes, created_at, kind, batch_id) VALUES (?, ?, ?, 'batch_output', 0, ?, ?, ?)")
                .bind(id).bind(&batch.owner).bind(format!("{}_{kind}.jsonl", batch.id))
                .bind(batch.created_at).bind(kind).bind(&batch.id)
                .execute(&mut *tx).await.map_err(err)?;
        }
        for (idx, line) in lines.iter().enumerate() {
            let refusal = line.refusal.as_ref().map(super::rows::refusal_text);
            sqlx::query("INSERT INTO lines (batch_id, idx, custom_id, state_key, body, refusal) VALUES (?, ?, ?, ?, ?, ?)")
                .bind(&batch.id).bind(idx as i64).bind(&line.custom_id).bind(&line.state_key)
                .bind(&line.body).bind(refusal)
                .execute(&mut *tx).await.map_err(err)?;
        }
        tx.commit().await.map_err(err)
    }

    /// `owner`'s batch `id`.
    pub async fn batch(&self, owner: &str, id: &str) -> StoreResult<Option<BatchRow>> {
        let row = sqlx::query(&format!("{BATCH_SELECT} WHERE owner = ? AND id = ?"))
            .bind(owner)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(err)?;
        Ok(row.map(|r| BatchRow::from_row(&r)))
    }

    /// `owner`'s batches, newest first, after the batch `after`; and whether there are more.
    pub async fn batches(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: i64,
    ) -> StoreResult<(Vec<BatchRow>, bool)> {
        let rows = sqlx::query(&format!(
            "{BATCH_SELECT} WHERE owner = ? AND (? IS NULL OR seq < (SELECT seq FROM batches WHERE id = ?)) ORDER BY seq DESC LIMIT ?"
        ))
        .bind(owner)
        .bind(after)
        .bind(after)
        .bind(limit + 1)
        .fetch_all(&self.pool)
        .await
        .map_err(err)?;
        let more = rows.len() as i64 > limit;
        Ok((
            rows.iter()
                .take(limit as usize)
                .map(BatchRow::from_row)
                .collect(),
            more,
        ))
    }

    /// Every batch not yet ended, oldest first: what a restarted service runs on.
    pub async fn unfinished(&self) -> StoreResult<Vec<BatchRow>> {
        let rows = sqlx::query(&format!(
            "{BATCH_SELECT} WHERE status NOT IN ('completed', 'failed', 'expired', 'cancelled') ORDER BY seq"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(err)?;
        Ok(rows.iter().map(BatchRow::from_row).collect())
    }

    /// Sets a batch's `status`, and its `<status>_at` time to `now` (unless already set).
    pub async fn set_status(&self, id: &str, status: &str, now: i64) -> StoreResult<()> {
        let column = format!("{status}_at");
        if !STATUS_TIMES.contains(&column.as_str()) {
            return Err(format!("no time column for status {status}"));
        }
        sqlx::query(&format!(
            "UPDATE batches SET status = ?, {column} = COALESCE({column}, ?) WHERE id = ?"
        ))
        .bind(status)
        .bind(now)
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(err)?;
        Ok(())
    }

    /// The lines of `batch` not yet finished, those of one state together.
    pub async fn pending_lines(&self, batch: &str) -> StoreResult<Vec<PendingLine>> {
        let rows = sqlx::query(
            "SELECT idx, custom_id, body, refusal FROM lines WHERE batch_id = ? AND done = 0 ORDER BY state_key, idx",
        )
        .bind(batch)
        .fetch_all(&self.pool)
        .await
        .map_err(err)?;
        Ok(rows
            .iter()
            .map(|r| PendingLine {
                idx: r.get("idx"),
                custom_id: r.get("custom_id"),
                body: r.get("body"),
                refusal: r.get("refusal"),
            })
            .collect())
    }

    /// Finished lines, in one transaction: each line's output, and its batch's counts. A line
    /// already finished is left as it is (and not counted twice).
    pub async fn commit_done(&self, group: &[LineDone]) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(err)?;
        for line in group {
            let done = sqlx::query(
                "UPDATE lines SET done = 1, is_error = ?, output = ? WHERE batch_id = ? AND idx = ? AND done = 0",
            )
            .bind(line.is_error)
            .bind(&line.output)
            .bind(&line.batch_id)
            .bind(line.idx)
            .execute(&mut *tx)
            .await
            .map_err(err)?;
            if done.rows_affected() == 1 {
                let column = if line.is_error { "failed" } else { "completed" };
                sqlx::query(&format!(
                    "UPDATE batches SET {column} = {column} + 1 WHERE id = ?"
                ))
                .bind(&line.batch_id)
                .execute(&mut *tx)
                .await
                .map_err(err)?;
            }
        }
        tx.commit().await.map_err(err)
    }

    /// Every line of `batch` not finished goes to the error file with the error `code`
    /// (`batch_expired`, `batch_cancelled`); how many.
    pub async fn close_remaining(
        &self,
        batch: &str,
        code: &str,
        message: &str,
    ) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await.map_err(err)?;
        let done = sqlx::query(
            "UPDATE lines SET done = 1, is_error = 1, output = json_object('id', 'batch_req_' || lower(hex(randomblob(16))), \
             'custom_id', custom_id, 'response', json('null'), 'error', json_object('code', ?, 'message', ?)) \
             WHERE batch_id = ? AND done = 0",
        )
        .bind(code)
        .bind(message)
        .bind(batch)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        let n = done.rows_affected();
        sqlx::query("UPDATE batches SET failed = failed + ? WHERE id = ?")
            .bind(n as i64)
            .bind(batch)
            .execute(&mut *tx)
            .await
            .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(n)
    }

    /// How many batches are in each status (for `/metrics`).
    pub async fn status_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM batches GROUP BY status")
            .fetch_all(&self.pool)
            .await
            .map_err(err)?;
        Ok(rows.iter().map(|r| (r.get("status"), r.get("n"))).collect())
    }
}

const STATUS_TIMES: [&str; 6] = [
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
];

const FILE_SELECT: &str = "SELECT f.id, f.owner, f.filename, f.purpose, f.created_at, f.kind, f.batch_id, \
  CASE WHEN f.kind = 'input' THEN f.bytes ELSE (SELECT COALESCE(SUM(LENGTH(CAST(l.output AS BLOB)) + 1), 0) \
  FROM lines l WHERE l.batch_id = f.batch_id AND l.done = 1 AND l.is_error = (f.kind = 'error')) END AS bytes FROM files f";

/// An output or error file is there once its batch has ended.
const VISIBLE: &str = "(f.kind = 'input' OR (SELECT status FROM batches b WHERE b.id = f.batch_id) IN ('completed', 'failed', 'expired', 'cancelled'))";

const BATCH_SELECT: &str = "SELECT id, owner, owner_tier, endpoint, input_file_id, completion_window, status, created_at, expires_at, in_progress_at, finalizing_at, completed_at, expired_at, cancelling_at, cancelled_at, output_file_id, error_file_id, total, completed, failed, metadata FROM batches";
