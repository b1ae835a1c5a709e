//! The decision ledger on a real SQLite file: the suite of `tests/support/ledger_suite.rs`
//! (what each scenario checks is said there), run on the embedded store. The same scenarios
//! on PostgreSQL are in the live tier (`tests/live/ledger.rs`).

use crate::support::ledger::Backend;
use crate::support::ledger_suite::{
    an_answer_and_a_refusal_are_on_record, calibrate_from_the_ledger_fits_as_its_export,
    canaries_stay_out_of_the_ledger_logs_and_metrics, each_policy_does_what_it_says,
    every_answer_survives_kill_9, keys_read_and_annotate_their_own_records,
    readiness_counts_what_a_store_away_loses, retention_deletes_old_records_in_the_background,
    the_prior_correction_is_on_record,
};

#[tokio::test]
async fn sqlite_an_answer_and_a_refusal_are_on_record() {
    an_answer_and_a_refusal_are_on_record(Backend::Sqlite).await;
}

#[tokio::test]
async fn sqlite_canaries_stay_out_of_the_ledger_logs_and_metrics() {
    canaries_stay_out_of_the_ledger_logs_and_metrics(Backend::Sqlite).await;
}

#[tokio::test]
async fn sqlite_each_policy_does_what_it_says() {
    each_policy_does_what_it_says(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_answer_survives_kill_9() {
    every_answer_survives_kill_9(Backend::Sqlite).await;
}

#[tokio::test]
async fn sqlite_keys_read_and_annotate_their_own_records() {
    keys_read_and_annotate_their_own_records(Backend::Sqlite).await;
}

#[tokio::test]
async fn sqlite_retention_deletes_old_records_in_the_background() {
    retention_deletes_old_records_in_the_background(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_calibrate_from_the_ledger_fits_as_its_export() {
    calibrate_from_the_ledger_fits_as_its_export(Backend::Sqlite).await;
}

#[tokio::test]
async fn sqlite_the_prior_correction_is_on_record() {
    the_prior_correction_is_on_record(Backend::Sqlite).await;
}

#[tokio::test]
async fn sqlite_readiness_counts_what_a_store_away_loses() {
    readiness_counts_what_a_store_away_loses(Backend::Sqlite).await;
}
