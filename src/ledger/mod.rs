//! The decision ledger: a record of every answered or refused request, committed before
//! the answer leaves (docs/operations/ledger.md).
//!
//! * [`record`]: what a record holds: numbers, bounded names and keyed hashes of the
//!   caller's text ([`key`]: HMAC-SHA256 with the ledger key), never the text itself unless
//!   the operator asks (`--ledger-inputs full`).
//! * [`draft`]: a record made from a validated request and its answers.
//! * [`store`]: the database (`sqlx`: an embedded SQLite file, or PostgreSQL for replicas),
//!   migrations versioned in `migrations/`.
//! * [`files`], [`live`]: the SQLite files by identity, and the writer's connection held
//!   only while the files it opened are those at the path (else the ledger is opened
//!   again); [`health`]: what the writer last found, for `/readyz`.
//! * [`writer`]: group commit: whatever records are waiting are written as one
//!   transaction on a connection of the writer's own, durable when its commit returns
//!   (SQLite: `synchronous=FULL`; PostgreSQL: two writer connections overlap batches);
//!   [`backlog`]: what it keeps after a failed commit, to write again once the store is
//!   back; [`fate`]: how a request that gave up waiting and was refused has its refusal
//!   recorded in place of its answer.
//!
//! * [`watch`]: feeds the calibration watch (`calibration/watch/`) every committed record
//!   and recorded outcome, and the store's records once at start-up.
//!
//! [`Ledger`] wraps them with what a request needs: a bounded wait for its commit
//! (`--ledger-timeout-ms`) and the failure policy (`fail_closed`: the request is refused
//! 503 `system_one_ledger_unavailable`, and that refusal is what is recorded; `fail_open`:
//! it is answered, and the answer recorded late), and a background task that deletes
//! expired records.
//!
//! Beside `engine/` and `quota/` in the layers, below `http/`, which calls it from the
//! front-door flow; it uses `request/` (validated requests) and the leaves.

mod backlog;
mod clock;
pub mod draft;
mod fate;
mod files;
pub mod health;
pub mod key;
mod live;
mod open;
mod pending;
pub mod quality;
pub mod query;
pub mod reads;
pub mod record;
mod retention;
pub mod rows;
pub mod store;
mod unrecorded;
pub mod watch;
mod writer;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::calibration::watch::{self as calibration_watch, Watch};
use crate::config::{FailurePolicy, LedgerInputs, LedgerSettings, LedgerTarget};
use crate::metrics::Metrics;
use health::{Health, LedgerStatus};
use key::LedgerKey;
use open::Open;
use record::Decision;
use retention::start_retention;
use store::{Store, StoreError, StoredRow};

pub use clock::now_ms;
pub use unrecorded::Unrecorded;

/// How often the outcome figures (`quality`) are recomputed.
const QUALITY_EVERY: Duration = Duration::from_secs(60);

/// The ledger as requests see it: off, or open with its writer.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    open: Option<Arc<Open>>,
}

impl Ledger {
    /// No ledger.
    pub fn off() -> Self {
        Ledger::default()
    }

    /// Opens the ledger `settings` name (`state_dir`: where the default file goes), runs its
    /// migrations and starts its writer and retention tasks. Needs a runtime.
    /// `thresholds`: the models' `escalate_below`, for the calibration watch's share of
    /// answers under them; given here, before the watch's start-up read of the ledger
    /// begins, so the answers it reads count against them too.
    pub async fn open(
        settings: &LedgerSettings,
        state_dir: Option<&Path>,
        metrics: Arc<Metrics>,
        thresholds: HashMap<String, f64>,
    ) -> Result<Self, String> {
        if settings.commit_delay() >= settings.timeout() {
            return Err(format!(
                "--ledger-commit-delay-us {} is not below --ledger-timeout-ms {}: every \
                 batched record would miss its commit",
                settings.ledger_commit_delay_us, settings.ledger_timeout_ms
            ));
        }
        let (store, key) = match settings.target(state_dir).map_err(|e| e.to_string())? {
            // `target` resolves the default to a file.
            LedgerTarget::Off | LedgerTarget::Default => return Ok(Ledger::off()),
            LedgerTarget::Sqlite(path) => {
                let store = Store::sqlite(&path)
                    .await
                    .map_err(|e| format!("--ledger sqlite:{}: {e}", path.display()))?;
                let key = match &settings.ledger_key {
                    Some(secret) => LedgerKey::new(secret.clone())?,
                    None => LedgerKey::load_or_make(path.parent().unwrap_or(Path::new(".")))?,
                };
                (store, key)
            }
            LedgerTarget::Postgres(url) => {
                let secret = settings.ledger_key.clone().ok_or(
                    "--ledger postgres://…: set SYSTEMONE_LEDGER_KEY (every replica must hash with the same key; none is made for a shared database)",
                )?;
                let key = LedgerKey::new(secret)?;
                let store = Store::postgres(url.expose())
                    .await
                    .map_err(|e| format!("--ledger postgres://[redacted]: {e}"))?;
                (store, key)
            }
        };
        metrics.start_ledger_series(store.driver().as_str(), settings.ledger_policy.as_str());
        let health = Arc::new(Health::default());
        live::check_at_start(&store, &health).await?;
        let watch = (!settings.no_calibration_watch).then(|| {
            Arc::new(Watch::new(calibration_watch::Settings {
                reference: settings.calibration_reference,
                thresholds,
                ..calibration_watch::Settings::default()
            }))
        });
        let opened_ms = now_ms();
        let open = Open {
            writer: writer::start(
                store.clone(),
                settings.commit_delay(),
                metrics.clone(),
                health.clone(),
                watch.clone(),
            ),
            watch,
            health,
            store,
            key,
            timeout: settings.timeout(),
            policy: settings.ledger_policy,
            inputs: settings.ledger_inputs,
            metrics,
            last_warning_ms: std::sync::atomic::AtomicI64::new(i64::MIN),
        };
        start_retention(open.store.clone(), settings);
        let ledger = Ledger {
            open: Some(Arc::new(open)),
        };
        ledger.start_watch(opened_ms);
        ledger.start_quality();
        Ok(ledger)
    }

    /// The calibration watch, when on (the ledger on, `--no-calibration-watch` not given).
    pub fn watch(&self) -> Option<&Arc<Watch>> {
        self.open.as_ref().and_then(|o| o.watch.as_ref())
    }

    /// Feeds the watch the records written before `opened_ms`, in the background; until
    /// it is done its figures hold only part of the past.
    fn start_watch(&self, opened_ms: i64) {
        let ledger = self.clone();
        tokio::spawn(async move {
            let Some((open, watch)) = ledger.open.as_ref().zip(ledger.watch()) else {
                return;
            };
            match watch::rebuild(&open.store, watch, opened_ms).await {
                Ok(records) => tracing::info!(records, "the calibration watch read the ledger"),
                Err(e) => {
                    tracing::warn!(error = %e, "the calibration watch could not read the ledger");
                    ledger.read_failed(&e);
                }
            }
        });
    }

    /// Whether records are kept.
    pub fn is_on(&self) -> bool {
        self.open.is_some()
    }

    /// The database kind (`sqlite`, `postgres`), when on.
    pub fn store_kind(&self) -> Option<&'static str> {
        self.open.as_ref().map(|o| o.store.driver().as_str())
    }

    /// The hashes' key, when on.
    pub fn key(&self) -> Option<&LedgerKey> {
        self.open.as_ref().map(|o| &o.key)
    }

    /// Whether records keep the validated request (`--ledger-inputs full`).
    pub fn keeps_inputs(&self) -> bool {
        self.open
            .as_ref()
            .is_some_and(|o| o.inputs == LedgerInputs::Full)
    }

    /// The ledger's line of `/readyz`, from memory (`None`: off).
    pub fn status(&self) -> Option<LedgerStatus> {
        let open = self.open.as_ref()?;
        let corrupt = open.health.corrupt();
        let available = open.health.available() && !corrupt;
        Some(LedgerStatus {
            store: open.store.driver().as_str(),
            policy: open.policy.as_str(),
            available,
            ready: available || open.policy == FailurePolicy::FailOpen,
            integrity: if corrupt { "corrupt" } else { "ok" },
            backlog: open.health.backlog(),
            queued: open
                .writer
                .max_capacity()
                .saturating_sub(open.writer.capacity()),
            lost: open.health.lost(),
        })
    }

    /// The database, when on (for reads). A read that fails is told to
    /// [`Ledger::read_failed`], so a corrupt file a read finds is flagged as one a write
    /// finds is.
    pub fn store(&self) -> Option<&Store> {
        self.open.as_ref().map(|o| &o.store)
    }

    /// A read of the store failed with `e`: when SQLite says the file is corrupt, the
    /// ledger takes it for corrupt (`/readyz` says so, `fail_closed` refuses, nothing is
    /// acknowledged into it) until its files are replaced by sound ones, as when a write
    /// finds it.
    pub fn read_failed(&self, e: &StoreError) {
        let Some(open) = &self.open else {
            return;
        };
        if store::is_corruption(e) && !open.health.corrupt() {
            tracing::error!(error = %e, "a read found the ledger's file corrupt: nothing is acknowledged into it until it is replaced by a sound file; restore a backup made with `systemone ledger backup`");
            open.health.set_corrupt(true);
        }
    }

    /// Recomputes the outcome figures per model and the calibration watch's gauges into
    /// `/metrics` (the background task's step; tests call it to read them at once).
    pub async fn refresh_quality(&self) {
        let Some(open) = &self.open else {
            return;
        };
        match quality::by_model(&open.store).await {
            Ok(figures) => {
                for (model, q) in figures {
                    open.metrics
                        .set_ledger_quality(&model, q.count, q.accuracy, q.brier);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the ledger's outcome figures could not be read");
                self.read_failed(&e);
            }
        }
        let Some(watch) = &open.watch else {
            return;
        };
        let rows = watch::gauges(watch, now_ms());
        let rows: Vec<([&str; 6], Vec<Option<f64>>)> = rows
            .iter()
            .map(|(labels, values)| (labels.each_ref().map(String::as_str), values.clone()))
            .collect();
        open.metrics.set_calibration(&rows);
    }

    /// Recomputes the outcome figures every [`QUALITY_EVERY`], in the background.
    fn start_quality(&self) {
        let ledger = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(QUALITY_EVERY);
            loop {
                every.tick().await;
                ledger.refresh_quality().await;
            }
        });
    }

    /// Commits `decision` (waiting for its batch), within the timeout; a record that stands
    /// whatever the request does (a refusal, which goes out as it is). A miss (timeout, a
    /// database error) is counted; under `fail_closed` it is also [`Unrecorded`]. Off: Ok.
    pub async fn commit(&self, decision: Decision) -> Result<(), Unrecorded> {
        self.commit_or(decision, None::<fn() -> Decision>).await
    }

    /// Commits the record of an answer, as [`Ledger::commit`]; if the wait misses under
    /// `fail_closed`, the request is refused, and `withheld()` (that refusal, made only
    /// then) is what the store keeps, written once the store takes writes again ([`fate`]).
    pub async fn commit_answer(
        &self,
        decision: Decision,
        withheld: impl FnOnce() -> Decision,
    ) -> Result<(), Unrecorded> {
        self.commit_or(decision, Some(withheld)).await
    }

    async fn commit_or(
        &self,
        decision: Decision,
        withheld: Option<impl FnOnce() -> Decision>,
    ) -> Result<(), Unrecorded> {
        let Some(open) = &self.open else {
            return Ok(());
        };
        let fate = Arc::new(fate::Fate::default());
        let sent = open.send(StoredRow::new(decision), fate.clone());
        let miss = match tokio::time::timeout(open.timeout, sent).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e,
            Err(_) => {
                // The writer sets it again once a batch (or its probe) commits.
                open.health.set(false);
                "timed out".to_string()
            }
        };
        if let (FailurePolicy::FailClosed, Some(withheld)) = (open.policy, withheld) {
            if !fate.withdraw(StoredRow::new(withheld())) {
                // The answer landed as the wait ended: it is on record, and goes out.
                return Ok(());
            }
        }
        let kind = open.store.driver().as_str();
        open.metrics
            .count_ledger_missed_wait(kind, open.policy.as_str());
        open.warn_of_miss(&miss);
        match open.policy {
            FailurePolicy::FailOpen => Ok(()),
            FailurePolicy::FailClosed => Err(Unrecorded {
                timeout_ms: open.timeout.as_millis() as u64,
            }),
        }
    }
}
