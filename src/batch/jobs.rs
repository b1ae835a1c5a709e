//! [`Batches`]: the batch store (opened on first use, so building the service's state needs
//! no runtime), its group-commit writer, the settings, and the batches running in this
//! process with the lever that cancels each.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OnceCell, Semaphore};

use super::online::Online;
use super::progress::Progress;
use super::rows::Charger;
use super::store::Store;
use crate::config::BatchSettings;

/// The batch jobs of one process.
#[derive(Debug)]
pub struct Batches {
    /// The flags.
    pub settings: BatchSettings,
    /// Where `batches.sqlite` is (`None`: in memory).
    dir: Option<PathBuf>,
    /// Where lines' usage is charged.
    charger: Arc<dyn Charger>,
    opened: OnceCell<(Store, Progress)>,
    /// The batches running here, by id, each with its cancel lever.
    running: Mutex<HashMap<String, Arc<Notify>>>,
    /// Lines of every batch running at once (`--batch-max-concurrency`).
    pub lines: Arc<Semaphore>,
    /// Upstream reads in flight (online and batch) below which a batch line may start:
    /// `--batch-share` of the in-flight cap, at least one.
    pub room: usize,
    /// The online requests in progress and the last one's answer, which a line waits behind
    /// (`--batch-online-gap-ms`).
    pub online: Arc<Online>,
}

impl Batches {
    /// The batch jobs of a service with these settings, under `dir`, charging usage to
    /// `charger`; `in_flight_cap` is the upstream in-flight cap, of which batch lines take only
    /// their share.
    pub fn new(
        settings: BatchSettings,
        dir: Option<PathBuf>,
        charger: Arc<dyn Charger>,
        in_flight_cap: usize,
    ) -> Self {
        let room = ((settings.batch_share * in_flight_cap as f64).floor() as usize).max(1);
        let lines = settings.batch_max_concurrency as usize;
        Batches {
            room,
            online: Online::new(Duration::from_millis(settings.batch_online_gap_ms)),
            settings,
            dir,
            charger,
            opened: OnceCell::new(),
            running: Mutex::default(),
            lines: Arc::new(Semaphore::new(lines)),
        }
    }

    /// The store and its writer, opened on first use.
    pub async fn open(&self) -> Result<&(Store, Progress), String> {
        self.opened
            .get_or_try_init(|| async {
                let store = Store::open(self.dir.as_deref()).await?;
                let wait = Duration::from_millis(self.settings.batch_commit_ms);
                let progress = Progress::start(
                    store.clone(),
                    Arc::downgrade(&self.charger),
                    self.settings.batch_commit_lines as usize,
                    wait,
                );
                Ok::<_, String>((store, progress))
            })
            .await
    }

    /// Whether the store outlives the process (a state directory).
    pub fn durable(&self) -> bool {
        self.dir.is_some()
    }

    /// Marks `id` running here; its cancel lever, or `None` when it already runs.
    pub fn start_running(&self, id: &str) -> Option<Arc<Notify>> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running.contains_key(id) {
            return None;
        }
        let lever = Arc::new(Notify::new());
        running.insert(id.to_string(), lever.clone());
        Some(lever)
    }

    /// `id` no longer runs here.
    pub fn stop_running(&self, id: &str) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.remove(id);
    }

    /// Pulls `id`'s cancel lever; whether it runs here.
    pub fn cancel(&self, id: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.get(id).map(|lever| lever.notify_one()).is_some()
    }
}
