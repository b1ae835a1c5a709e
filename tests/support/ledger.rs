//! The decision ledger's two backends for the tests: an SQLite file in a fresh temp dir,
//! and a fresh database in the real PostgreSQL that `scripts/test.sh` starts
//! (`SYSTEMONE_POSTGRES_URL_FOR_TESTS`; a test fails without it, never skips).

use std::path::PathBuf;

use sqlx::{Connection, Executor};
use systemone::config::ServeConfig;
use systemone::ledger::Ledger;

use super::{spawn_app, Service};

/// The ledger key every test service hashes with.
pub const TEST_LEDGER_KEY: &str = "test-ledger-key-0123456789abcdef";

/// Which database holds the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A ledger database of one test's own.
#[derive(Debug, Clone)]
pub struct LedgerDb {
    pub backend: Backend,
    /// The `--ledger` value.
    pub target: String,
    /// The SQLite file (SQLite only).
    pub file: Option<PathBuf>,
}

impl LedgerDb {
    /// A fresh, empty ledger database.
    pub async fn new(backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let file = super::temp_file("ledger.sqlite", "");
                LedgerDb {
                    backend,
                    target: format!("sqlite:{}", file.display()),
                    file: Some(file),
                }
            }
            Backend::Postgres => LedgerDb::in_postgres(&postgres_url()).await,
        }
    }

    /// A fresh database in the PostgreSQL at `admin` (a URL naming its `postgres` database).
    pub async fn in_postgres(admin: &str) -> Self {
        let name = format!("ledger_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(admin)
            .await
            .expect("the test PostgreSQL accepts connections");
        conn.execute(&*format!("CREATE DATABASE {name}"))
            .await
            .expect("create database");
        let base = admin.rsplit_once('/').expect("a URL with a database").0;
        LedgerDb {
            backend: Backend::Postgres,
            target: format!("{base}/{name}"),
            file: None,
        }
    }

    /// The `serve` flags for this ledger (with [`TEST_LEDGER_KEY`]).
    pub fn flags(&self) -> Vec<String> {
        ["--ledger", &self.target, "--ledger-key", TEST_LEDGER_KEY]
            .map(str::to_owned)
            .to_vec()
    }

    /// A connection of the test's own (to inspect or to lock the tables).
    pub async fn connect(&self) -> sqlx::AnyConnection {
        sqlx::any::install_default_drivers();
        let url = match &self.file {
            Some(file) => format!("sqlite://{}", file.display()),
            None => self.target.clone(),
        };
        sqlx::AnyConnection::connect(&url).await.expect("connect")
    }

    /// Everything the database holds as text: the SQLite file and its WAL as bytes, or
    /// every PostgreSQL table of the ledger's rows cast to text.
    pub async fn dump(&self) -> String {
        if let Some(file) = &self.file {
            let mut bytes = std::fs::read(file).unwrap_or_default();
            let mut wal = file.clone().into_os_string();
            wal.push("-wal");
            bytes.extend(std::fs::read(PathBuf::from(wal)).unwrap_or_default());
            return String::from_utf8_lossy(&bytes).into_owned();
        }
        let mut conn = sqlx::PgConnection::connect(&self.target)
            .await
            .expect("connect");
        let mut text = String::new();
        for table in ["decisions", "outcomes", "_sqlx_migrations"] {
            let rows: Vec<(String,)> =
                sqlx::query_as(&format!("SELECT CAST(t.* AS TEXT) FROM {table} t"))
                    .fetch_all(&mut conn)
                    .await
                    .expect("dump");
            for (row,) in rows {
                text.push_str(&row);
                text.push('\n');
            }
        }
        text
    }
}

/// The test PostgreSQL's URL.
pub fn postgres_url() -> String {
    super::require(
        "SYSTEMONE_POSTGRES_URL_FOR_TESTS",
        "scripts/start-postgres.sh",
    )
}

/// Runs the binary with `args`; returns its stdout, failing with its stderr.
pub fn run_binary(args: &[&str]) -> String {
    let out = super::binary()
        .args(args)
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Starts the service with `config` and its configured ledger open.
pub async fn start_with_ledger(config: ServeConfig) -> Service {
    let mut state = systemone::build_state(&config).expect("state builds");
    let thresholds = state.models.escalation_thresholds();
    state.ledger = Ledger::open(&config.ledger, None, state.metrics.clone(), thresholds)
        .await
        .expect("the ledger opens");
    let addr = spawn_app(systemone::app(state.clone())).await;
    Service {
        addr,
        state,
        client: reqwest::Client::new(),
    }
}

/// One figure as two sides compute it: the outcomes under it and the equal-width ECE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EceSide {
    pub outcomes: u64,
    pub ece: f64,
}

/// The calibration watch's `ece_equal_width_15` over the one shape `query` selects (the
/// day window holding now, as `GET /v1/calibration?window=day&…` shows it), and the
/// `ECE_w15` column of `systemone calibrate check FORMULA --from-ledger TARGET --model
/// MODEL` on the same ledger (its one group's row under `formula`, the formula the service
/// answered with): `(watch, check)`.
pub async fn watch_and_check_ece(
    service: &Service,
    query: &str,
    target: &str,
    model: &str,
    formula: &str,
) -> (EceSide, EceSide) {
    let reply = super::get(service, &format!("/v1/calibration?window=day&{query}")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let shapes = reply.body["shapes"].as_array().expect("shapes");
    assert_eq!(shapes.len(), 1, "one shape for {query}: {}", reply.text);
    let now = shapes[0]["windows"]
        .as_array()
        .and_then(|w| w.last())
        .expect("the window holding now");
    let watch = EceSide {
        outcomes: now["outcomes"].as_u64().expect("outcomes"),
        ece: now["ece_equal_width_15"].as_f64().expect("an ECE"),
    };
    let args = [
        "calibrate",
        "check",
        formula,
        "--from-ledger",
        target,
        "--model",
        model,
    ]
    .map(str::to_owned);
    let table =
        tokio::task::spawn_blocking(move || run_binary(&args.each_ref().map(String::as_str)))
            .await
            .expect("calibrate check's thread joins");
    (watch, check_row(&table, formula))
}

/// The `ECE_w15` of `formula`'s one group row in `calibrate check`'s table.
fn check_row(table: &str, formula: &str) -> EceSide {
    let header: Vec<&str> = table
        .lines()
        .next()
        .expect("a header")
        .split('\t')
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column in:\n{table}"))
    };
    let (rows, formulas, ece) = (column("rows"), column("formula"), column("ECE_w15"));
    let found: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|c| c[0] != "all" && c[formulas] == formula)
        .collect();
    assert_eq!(found.len(), 1, "one group under {formula}:\n{table}");
    EceSide {
        outcomes: found[0][rows].parse().expect("a row count"),
        ece: found[0][ece].parse().expect("an ECE"),
    }
}
