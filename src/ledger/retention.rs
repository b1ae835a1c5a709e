//! Retention: the background task that deletes expired records and erases expired full
//! inputs.

use std::time::Duration;

use super::clock::now_ms;
use super::store::Store;
use crate::config::LedgerSettings;

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// Deletes records older than `--ledger-retention-days` (0: never) and erases full inputs
/// older than `--ledger-inputs-retention-days`, now and then every
/// `settings.ledger_retention_every`.
pub(super) fn start_retention(store: Store, settings: &LedgerSettings) {
    let (days, inputs_days) = (
        settings.ledger_retention_days,
        settings.ledger_inputs_retention_days,
    );
    let every = settings
        .ledger_retention_every
        .max(Duration::from_millis(1));
    tokio::spawn(async move {
        let mut every = tokio::time::interval(every);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let now = now_ms();
            let before = match days {
                0 => i64::MIN,
                d => now.saturating_sub((d as i64).saturating_mul(DAY_MS)),
            };
            let inputs_before = now.saturating_sub((inputs_days as i64).saturating_mul(DAY_MS));
            match store.expire(before, inputs_before).await {
                Ok(0) => {}
                Ok(deleted) => tracing::info!(deleted, "expired ledger records deleted"),
                Err(e) => {
                    tracing::warn!(error = %e, "ledger retention failed; it runs again on its interval")
                }
            }
        }
    });
}
