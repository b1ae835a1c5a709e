//! The ledger's database through `sqlx`'s `Any` driver: one code path for the embedded
//! SQLite file and PostgreSQL (the SQL below is the subset both speak, `$N` placeholders
//! included), with each driver's own migrations (`migrations/sqlite`, `migrations/postgres`,
//! embedded in the binary and applied at startup).
//!
//! SQLite runs in WAL mode with `synchronous=FULL` on every connection, the group-commit
//! writer's ([`Store::writer_connection`]) included: a commit is on disk (SQLite fsyncs the
//! WAL through the descriptor it writes) before it returns, so a crash, `kill -9` or power
//! loss after an answer left loses nothing.
//!
//! The pool can be opened again on the same file ([`Store::reopen`]) when the writer finds
//! the files it opened replaced or removed ([`super::files`]): every clone of the store,
//! reads included, then uses the new pool.
//!
//! Only the writer's connection checkpoints the WAL into the database file (the pool's run
//! `wal_autocheckpoint=0`), so the file changes only inside the writer's commits: a change
//! between two of them is another process writing the file in place (a backup copied over
//! it), which SQLite cannot notice and which leaves the WAL applied to pages it was not
//! written for. The writer then takes the file for corrupt ([`super::live`]), as it does
//! when `PRAGMA quick_check` (at start-up and when the files are opened again) or a
//! statement reports corruption ([`is_corruption`]).

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::Migrator;
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};

use super::files::{FileIds, SqliteFile};
use super::record::{Decision, Tokens};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// Connections of the pool: the writer's, and a few for reads and retention.
const POOL_CONNECTIONS: u32 = 4;
/// Every SQLite connection's settings: WAL mode, each commit fsynced by SQLite itself, and
/// 5 s of waiting on a lock held by another connection before failing.
const SQLITE_PRAGMAS: &str =
    "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;";
/// The pool's connections write the WAL but never checkpoint it into the database file.
const POOL_PRAGMAS: &str = "PRAGMA wal_autocheckpoint=0;";

/// Which database (a metrics label, and what the SQL must allow for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Sqlite,
    Postgres,
}

impl Driver {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Sqlite => "sqlite",
            Driver::Postgres => "postgres",
        }
    }
}

/// The ledger's database.
#[derive(Debug, Clone)]
pub struct Store {
    /// The pool, shared by every clone; replaced when the SQLite file is opened again.
    pool: Arc<RwLock<AnyPool>>,
    driver: Driver,
    /// The SQLite file (`None`: PostgreSQL).
    file: Option<Arc<SqliteFile>>,
}

/// A database error, as text without the URL (which may hold a password).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError(e.to_string())
    }
}

impl Store {
    /// Opens (creating it and its folder when missing) the SQLite file at `path`.
    pub async fn sqlite(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let file = SqliteFile::new(path);
        let pool = connect(&file.url, Driver::Sqlite).await?;
        Ok(Store::on(pool, Driver::Sqlite, Some(file)))
    }

    /// Connects to PostgreSQL at `url`.
    pub async fn postgres(url: &str) -> Result<Self, StoreError> {
        let pool = connect(url, Driver::Postgres).await?;
        Ok(Store::on(pool, Driver::Postgres, None))
    }

    fn on(pool: AnyPool, driver: Driver, file: Option<SqliteFile>) -> Self {
        Store {
            pool: Arc::new(RwLock::new(pool)),
            driver,
            file: file.map(Arc::new),
        }
    }

    /// The identities of the SQLite files now at the path (`None`: PostgreSQL); an error
    /// when one is missing.
    pub(super) fn files_now(&self) -> Result<Option<FileIds>, StoreError> {
        self.file
            .as_ref()
            .map(|f| f.ids())
            .transpose()
            .map_err(|e| StoreError(e.to_string()))
    }

    /// Opens the SQLite file again on a new pool, which replaces the old one for every
    /// clone: the files the old one opened were replaced or removed. Needs the file's
    /// directory to be there; a missing file is made anew and migrated, as at a start. The
    /// old pool is closed first, so no connection of it is left writing into files no one
    /// reads. PostgreSQL: nothing to do (its connections are its server's business).
    pub(super) async fn reopen(&self) -> Result<(), StoreError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        file.storage_present()
            .map_err(|e| StoreError(e.to_string()))?;
        self.pool().close().await;
        let fresh = connect(&file.url, self.driver).await?;
        *self.pool.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        tracing::warn!(
            file = %file.path.display(),
            "the ledger's files were replaced or removed: opened again"
        );
        Ok(())
    }

    /// The SQLite database file's modification time and size now (`None`: PostgreSQL, or the
    /// file is missing).
    pub(super) fn stamp_now(&self) -> Option<super::files::FileStamp> {
        self.file.as_ref().and_then(|f| f.stamp().ok())
    }

    /// SQLite's `PRAGMA quick_check` on a connection of its own (nothing cached): `None`
    /// when the file is sound, else the first problem found. PostgreSQL: `None` (its
    /// server checks its own pages).
    pub async fn quick_check(&self) -> Result<Option<String>, StoreError> {
        let Some(file) = &self.file else {
            return Ok(None);
        };
        let mut conn = AnyConnection::connect(&file.url).await?;
        conn.execute("PRAGMA busy_timeout=5000;").await?;
        let found = sqlx::query_scalar::<_, String>("PRAGMA quick_check(1)")
            .fetch_one(&mut conn)
            .await;
        let _ = conn.close().await;
        match found {
            Ok(ok) if ok == "ok" => Ok(None),
            Ok(problem) => Ok(Some(problem.chars().take(200).collect())),
            Err(e) => {
                let e = StoreError::from(e);
                if is_corruption(&e) {
                    Ok(Some(e.0))
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Writes a consistent copy of the SQLite database to `to` (`VACUUM INTO`, a read
    /// transaction: the service keeps writing meanwhile), which must not exist yet.
    pub async fn backup(&self, to: &Path) -> Result<(), StoreError> {
        if self.file.is_none() {
            return Err(StoreError(
                "a PostgreSQL ledger is backed up by its server's tools (pg_dump)".into(),
            ));
        }
        if to.exists() {
            return Err(StoreError(format!("{} exists already", to.display())));
        }
        let target = to
            .to_str()
            .ok_or_else(|| StoreError(format!("{} is not UTF-8", to.display())))?;
        sqlx::query("VACUUM INTO $1")
            .bind(target.to_owned())
            .execute(&self.pool())
            .await?;
        Ok(())
    }

    /// Which database this is.
    pub fn driver(&self) -> Driver {
        self.driver
    }

    /// The pool, for reads (a handle on the one in use now).
    pub fn pool(&self) -> AnyPool {
        self.pool
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A transaction that writes after it reads. SQLite's takes the write lock at once
    /// (`BEGIN IMMEDIATE`, waiting out another writer within the busy timeout): a deferred
    /// one that read before the group-commit writer committed could not write afterwards
    /// (`SQLITE_BUSY_SNAPSHOT`, no waiting), a refusal under load (seen in the retention
    /// test).
    pub(super) async fn begin_write(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        Ok(match self.driver {
            Driver::Sqlite => self.pool().begin_with("BEGIN IMMEDIATE").await?,
            Driver::Postgres => self.pool().begin().await?,
        })
    }

    /// A connection of the group-commit writer's own. SQLite's is opened anew, outside
    /// the pool (whose connections may have opened files since replaced), and reads the
    /// database once, so it has opened the WAL too; it runs `synchronous=FULL`, as the
    /// pool's do. PostgreSQL's is taken out of the pool.
    pub(super) async fn writer_connection(&self) -> Result<AnyConnection, StoreError> {
        let Some(file) = &self.file else {
            return Ok(self.pool().acquire().await?.detach());
        };
        let mut conn = AnyConnection::connect(&file.url).await?;
        conn.execute(SQLITE_PRAGMAS).await?;
        Store::probe_on(&mut conn, Driver::Sqlite).await?;
        Ok(conn)
    }

    /// Whether `conn` can write now, writing nothing: SQLite takes its write lock (waiting
    /// out another writer within the busy timeout) and lets it go; PostgreSQL takes the
    /// lock an INSERT takes, without waiting, and lets it go.
    pub(super) async fn probe_on(
        conn: &mut AnyConnection,
        driver: Driver,
    ) -> Result<(), StoreError> {
        let sql = match driver {
            Driver::Sqlite => "BEGIN IMMEDIATE; SELECT 1 FROM decisions LIMIT 1; ROLLBACK",
            // The lock an INSERT takes, without waiting: a table locked against writers
            // (`LOCK TABLE … ACCESS EXCLUSIVE`, a rewrite) is unavailable, as it is to the
            // writer's INSERT, where a bare `SELECT 1` would say the store is fine.
            Driver::Postgres => {
                "BEGIN; LOCK TABLE decisions IN ROW EXCLUSIVE MODE NOWAIT; ROLLBACK"
            }
        };
        conn.execute(sql).await?;
        Ok(())
    }

    /// Writes `rows` with `sql` (from [`Store::insert_sql`] for as many rows) on `conn` as
    /// one statement (one round trip, and one transaction of its own): all of them are on
    /// record, or none.
    pub(super) async fn insert_on(
        conn: &mut AnyConnection,
        sql: &str,
        rows: &[&StoredRow],
    ) -> Result<(), StoreError> {
        let query = rows
            .iter()
            .fold(sqlx::query(sql), |query, row| row.bind(query));
        query.execute(&mut *conn).await?;
        Ok(())
    }

    /// The INSERT of `rows` records, one multi-row statement. SQLite's placeholders are
    /// anonymous (`?`): the driver looks each named one (`$N`) up by a linear scan of the
    /// statement's names, quadratic in a batch's thousands of values (seen in a profile).
    ///
    /// A record already there (a batch written again after a failure whose commit had
    /// landed after all) is kept, except that a refusal replaces its request's answer: an
    /// answer whose record landed while its request gave up waiting and was refused
    /// ([`super::fate`]). Request ids are the service's own, one record each otherwise.
    pub(super) fn insert_sql(&self, rows: usize) -> String {
        let slot = |n: usize| match self.driver {
            Driver::Sqlite => "?".to_string(),
            Driver::Postgres => format!("${n}"),
        };
        let placeholders: Vec<String> = (0..rows)
            .map(|r| {
                let slots: Vec<String> = (1..=ROW_PARAMETERS)
                    .map(|c| slot(r * ROW_PARAMETERS + c))
                    .collect();
                format!("({})", slots.join(", "))
            })
            .collect();
        format!(
            "INSERT INTO decisions (request_id, at_ms, key_name, route, status, code, model, \
             latency_ms, input_tokens, output_tokens, upstream_requests, cached_tokens, \
             body_hash, hash_key_id, record, inputs) VALUES {} \
             ON CONFLICT (request_id) DO UPDATE SET at_ms = excluded.at_ms, \
             key_name = excluded.key_name, route = excluded.route, status = excluded.status, \
             code = excluded.code, model = excluded.model, latency_ms = excluded.latency_ms, \
             input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens, \
             upstream_requests = excluded.upstream_requests, \
             cached_tokens = excluded.cached_tokens, body_hash = excluded.body_hash, \
             hash_key_id = excluded.hash_key_id, record = excluded.record, \
             inputs = excluded.inputs \
             WHERE decisions.status < 400 AND excluded.status >= 400",
            placeholders.join(", ")
        )
    }

    /// Deletes the records (and their outcomes) older than `before_ms`, and erases the
    /// full inputs of those older than `inputs_before_ms`; returns the records deleted.
    pub async fn expire(&self, before_ms: i64, inputs_before_ms: i64) -> Result<u64, StoreError> {
        let mut tx = self.begin_write().await?;
        let deleted = sqlx::query("DELETE FROM decisions WHERE at_ms < $1")
            .bind(before_ms)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        // Every outcome whose record is gone, after the records: PostgreSQL reads each
        // statement afresh (READ COMMITTED), so outcomes deleted by the records' old list
        // first could miss a record the second statement deletes (the retention test saw
        // one), and an outcome posted while a sweep runs is caught by the next.
        sqlx::query(
            "DELETE FROM outcomes WHERE NOT EXISTS \
             (SELECT 1 FROM decisions d WHERE d.request_id = outcomes.request_id)",
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE decisions SET inputs = NULL WHERE inputs IS NOT NULL AND at_ms < $1")
            .bind(inputs_before_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(deleted)
    }

    /// One record by request id, if any.
    pub async fn decision(&self, request_id: &str) -> Result<Option<Decision>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM decisions WHERE request_id = $1"
        ))
        .bind(request_id)
        .fetch_optional(&self.pool())
        .await?;
        row.map(|r| decode(&r)).transpose()
    }
}

/// Whether `e` is SQLite saying its file is corrupt (`SQLITE_CORRUPT`, "database disk
/// image is malformed") or not a database at all (`SQLITE_NOTADB`).
pub(super) fn is_corruption(e: &StoreError) -> bool {
    e.0.contains("malformed") || e.0.contains("not a database")
}

/// A pool on `url`, its migrations applied.
async fn connect(url: &str, driver: Driver) -> Result<AnyPool, StoreError> {
    sqlx::any::install_default_drivers();
    let pool = AnyPoolOptions::new()
        .max_connections(POOL_CONNECTIONS)
        .acquire_timeout(Duration::from_secs(5))
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if driver == Driver::Sqlite {
                    conn.execute(SQLITE_PRAGMAS).await?;
                    conn.execute(POOL_PRAGMAS).await?;
                }
                Ok(())
            })
        })
        .connect(url)
        .await?;
    let migrations = match driver {
        Driver::Sqlite => &SQLITE_MIGRATIONS,
        Driver::Postgres => &POSTGRES_MIGRATIONS,
    };
    migrations
        .run(&pool)
        .await
        .map_err(|e| StoreError(format!("migrations: {e}")))?;
    Ok(pool)
}

/// The columns of `decisions`, in the order [`decode`] reads them.
pub(super) const COLUMNS: &str = "request_id, at_ms, key_name, route, status, code, model, \
    latency_ms, input_tokens, output_tokens, upstream_requests, cached_tokens, body_hash, \
    hash_key_id, record, inputs";

/// The part of a record kept as one JSON document.
#[derive(serde::Deserialize)]
struct Detail {
    images: Vec<super::record::ImageRecord>,
    questions: Vec<super::record::QuestionRecord>,
    /// The model every question's answer names, kept once ([`DetailOf::model`]).
    #[serde(default)]
    model: Option<String>,
}

/// [`Detail`] as written: borrowed from the record.
#[derive(serde::Serialize)]
struct DetailOf<'a> {
    images: &'a [super::record::ImageRecord],
    questions: &'a [super::record::QuestionRecord],
    /// The model the answers name when they all name one (the usual case): kept here once,
    /// and each question's own left empty (so left out), not repeated per question.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
}

/// Takes the model out of `questions` when they all name the same one.
fn shared_model(questions: &mut [super::record::QuestionRecord]) -> Option<String> {
    let first = questions.first()?.model.clone();
    if first.is_empty() || questions.iter().any(|q| q.model != first) {
        return None;
    }
    for q in questions.iter_mut() {
        q.model.clear();
    }
    Some(first)
}

/// A record serialised for its row (done by the request, not the writer, which only
/// writes).
#[derive(Debug, Clone)]
pub struct StoredRow {
    decision: Decision,
    detail: String,
    inputs: Option<String>,
}

impl StoredRow {
    /// Serialises `decision`'s JSON columns.
    pub fn new(mut decision: Decision) -> Self {
        let model = shared_model(&mut decision.questions);
        let detail = serde_json::to_string(&DetailOf {
            images: &decision.images,
            questions: &decision.questions,
            model,
        })
        .unwrap_or_else(|_| "{}".into());
        let inputs = decision.inputs.as_ref().map(|v| v.to_string());
        StoredRow {
            decision,
            detail,
            inputs,
        }
    }

    /// The record.
    pub(super) fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The request id.
    pub fn request_id(&self) -> &str {
        &self.decision.request_id
    }

    /// Binds this row's [`ROW_PARAMETERS`] values, in the columns' order.
    fn bind<'q>(&'q self, query: AnyQuery<'q>) -> AnyQuery<'q> {
        let d = &self.decision;
        query
            .bind(&d.request_id)
            .bind(d.at_ms)
            .bind(&d.key)
            .bind(&d.route)
            .bind(i64::from(d.status))
            .bind(d.code.as_deref())
            .bind(d.model.as_deref())
            .bind(d.latency_ms)
            .bind(count(d.usage.input_tokens))
            .bind(count(d.usage.output_tokens))
            .bind(count(d.usage.upstream_requests))
            .bind(count(d.usage.cached_tokens))
            .bind(d.body_hash.as_deref())
            .bind(&d.hash_key_id)
            .bind(&self.detail)
            .bind(self.inputs.as_deref())
    }
}

/// A query over the `Any` driver.
type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Values one row binds (SQLite takes at most 32,766 a statement, PostgreSQL 65,535:
/// [`super::writer`]'s batches of 256 rows bind 4,096).
const ROW_PARAMETERS: usize = 16;

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn uncount(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A `decisions` row (selected with [`COLUMNS`]) as a record.
pub(super) fn decode(row: &AnyRow) -> Result<Decision, StoreError> {
    let detail: String = row.try_get("record")?;
    // Through a `Value`: its numbers keep their text (`arbitrary_precision`) and become
    // `f64` by the standard library's exact parse, where a direct parse may be 1 ulp off.
    let detail: Detail = serde_json::from_str::<serde_json::Value>(&detail)
        .and_then(serde_json::from_value)
        .map_err(|e| StoreError(format!("a stored record does not parse: {e}")))?;
    let mut detail = detail;
    if let Some(model) = detail.model.take() {
        for q in detail.questions.iter_mut().filter(|q| q.model.is_empty()) {
            q.model.clone_from(&model);
        }
    }
    let inputs: Option<String> = row.try_get("inputs")?;
    Ok(Decision {
        request_id: row.try_get("request_id")?,
        at_ms: row.try_get("at_ms")?,
        key: row.try_get("key_name")?,
        route: row.try_get("route")?,
        status: u16::try_from(row.try_get::<i64, _>("status")?).unwrap_or(0),
        code: row.try_get("code")?,
        model: row.try_get("model")?,
        latency_ms: row.try_get("latency_ms")?,
        usage: Tokens {
            input_tokens: uncount(row.try_get("input_tokens")?),
            output_tokens: uncount(row.try_get("output_tokens")?),
            upstream_requests: uncount(row.try_get("upstream_requests")?),
            cached_tokens: uncount(row.try_get("cached_tokens")?),
        },
        body_hash: row.try_get("body_hash")?,
        images: detail.images,
        questions: detail.questions,
        hash_key_id: row.try_get("hash_key_id")?,
        inputs: inputs.and_then(|t| serde_json::from_str(&t).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_name_with_url_characters_opens_as_named() {
        let dir = std::env::temp_dir().join(format!("ledger-store-{}", uuid::Uuid::new_v4()));
        let path = dir.join("odd ?#% name.sqlite");
        let store = Store::sqlite(&path).await.expect("opens");
        assert_eq!(store.driver(), Driver::Sqlite);
        assert!(path.exists(), "{} was created", path.display());
        store.pool().close().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The group-commit writer's connection fsyncs the WAL inside each commit
    /// (`synchronous=FULL`, 2): durability comes from the descriptor SQLite writes, never
    /// from a file found at the WAL's path afterwards.
    #[tokio::test]
    async fn the_writer_commits_with_sqlites_own_fsync() {
        let dir = std::env::temp_dir().join(format!("ledger-store-{}", uuid::Uuid::new_v4()));
        let store = Store::sqlite(&dir.join("ledger.sqlite"))
            .await
            .expect("opens");
        let mut conn = store.writer_connection().await.expect("a connection");
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut conn)
            .await
            .expect("reads");
        assert_eq!(
            synchronous, 2,
            "synchronous=FULL on the writer's connection"
        );
        drop(conn);
        store.pool().close().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    fn question(model: &str) -> super::super::record::QuestionRecord {
        super::super::record::QuestionRecord {
            name: "h".into(),
            kind: "noul".into(),
            options: 2,
            labels: vec![],
            answer: 0,
            probabilities: vec![0.75, 0.25],
            confidence: 0.75,
            temperature: 1.0,
            option_mass: None,
            model: model.into(),
            profile: None,
            prior_correction: None,
            layout: None,
            reads: None,
        }
    }

    /// The model the answers name is stored once per record, and read back per question;
    /// answers naming different models (an escalation replaced some) keep their own.
    #[tokio::test]
    async fn the_model_is_stored_once_per_record() {
        let dir = std::env::temp_dir().join(format!("ledger-store-{}", uuid::Uuid::new_v4()));
        let store = Store::sqlite(&dir.join("ledger.sqlite"))
            .await
            .expect("opens");
        let long = "m".repeat(200);
        let cases = [
            ("req_shared", vec![long.as_str(); 16], 1),
            ("req_mixed", vec!["a", "b", "a"], 3),
        ];
        for (id, models, model_keys) in cases {
            let key =
                super::super::key::LedgerKey::new(crate::secret::Secret::new("0123456789abcdef"))
                    .expect("long enough");
            let who = super::super::draft::Identity {
                request_id: id.into(),
                at_ms: 1,
                key: "k".into(),
                route: "/v1/systemone".into(),
                latency_ms: 1.0,
            };
            let mut decision = super::super::draft::refused(&key, who, 200, None, Some("m"));
            decision.questions = models.iter().map(|m| question(m)).collect();
            let row = StoredRow::new(decision.clone());
            assert_eq!(
                row.detail.matches("\"model\":").count(),
                model_keys,
                "{id}: {}",
                row.detail
            );
            let mut conn = store.writer_connection().await.expect("a connection");
            Store::insert_on(&mut conn, &store.insert_sql(1), &[&row])
                .await
                .expect("writes");
            let read = store.decision(id).await.expect("reads").expect("there");
            assert_eq!(read.questions, decision.questions, "{id}");
        }
        store.pool().close().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    /// `quick_check` finds a page overwritten in the middle of the file (a copy over it,
    /// cut short), and passes the sound file and its `VACUUM INTO` backup.
    #[tokio::test]
    async fn quick_check_finds_an_overwritten_page_and_passes_a_backup() {
        let dir = std::env::temp_dir().join(format!("ledger-store-{}", uuid::Uuid::new_v4()));
        let path = dir.join("ledger.sqlite");
        let store = Store::sqlite(&path).await.expect("opens");
        let pool = store.pool();
        sqlx::query("CREATE TABLE filler (t TEXT)")
            .execute(&pool)
            .await
            .expect("creates");
        for _ in 0..200 {
            sqlx::query("INSERT INTO filler VALUES ($1)")
                .bind("x".repeat(500))
                .execute(&pool)
                .await
                .expect("inserts");
        }
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&pool)
            .await
            .expect("checkpoints");
        assert_eq!(store.quick_check().await.expect("checks"), None);
        let copy = dir.join("backup.sqlite");
        store.backup(&copy).await.expect("backs up");
        assert!(store.backup(&copy).await.is_err(), "never over a file");
        assert_eq!(
            Store::sqlite(&copy)
                .await
                .expect("opens")
                .quick_check()
                .await
                .expect("checks"),
            None
        );
        pool.close().await;
        let size = std::fs::metadata(&path).expect("size").len();
        let mut bytes = std::fs::read(&path).expect("reads");
        let middle = (size / 2) as usize;
        bytes[middle..middle + 4096].fill(0x5a);
        std::fs::write(&path, &bytes).expect("overwrites in place");
        let problem = store.quick_check().await.expect("checks");
        assert!(problem.is_some(), "the overwritten page is found");
        let _ = std::fs::remove_dir_all(dir);
    }
}
