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
    std::env::var("SYSTEMONE_POSTGRES_URL_FOR_TESTS").expect(
        "SYSTEMONE_POSTGRES_URL_FOR_TESTS: the tests need a PostgreSQL (scripts/start-postgres.sh)",
    )
}

/// Runs the binary with `args`; returns its stdout, failing with its stderr.
pub fn run_binary(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_systemone"))
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
    state.ledger = Ledger::open(&config.ledger, None, state.metrics.clone())
        .await
        .expect("the ledger opens");
    let addr = spawn_app(systemone::app(state.clone())).await;
    Service {
        addr,
        state,
        client: reqwest::Client::new(),
    }
}

/// A PostgreSQL of a test's own (`scripts/start-postgres.sh`), to stop and restart; killed
/// and its cluster removed when dropped.
pub struct OwnPostgres {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub url: String,
    pid: u32,
    dir: String,
    port: String,
}

impl OwnPostgres {
    /// A new cluster on a free port.
    pub fn start() -> Self {
        let vars = start_script(&[]);
        let url = vars["POSTGRES_URL"].clone();
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next())
            .expect("a port")
            .to_owned();
        OwnPostgres {
            pid: vars["POSTGRES_PID"].parse().expect("a pid"),
            dir: vars["POSTGRES_DIR"].clone(),
            url,
            port,
        }
    }

    /// Stops the server (fast shutdown) and waits until it has exited.
    pub fn stop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.pid.to_string()])
            .status();
        for _ in 0..200 {
            if !std::path::Path::new(&format!("/proc/{}", self.pid)).exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("postgres {} did not stop within 10 s", self.pid);
    }

    /// Starts the same cluster again on the same port.
    pub fn restart(&mut self) {
        let vars = start_script(&[&self.dir, &self.port]);
        self.pid = vars["POSTGRES_PID"].parse().expect("a pid");
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `scripts/start-postgres.sh args`; returns the variables it printed.
fn start_script(args: &[&str]) -> std::collections::HashMap<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/start-postgres.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .expect("the script runs");
    assert!(
        out.status.success(),
        "start-postgres: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
