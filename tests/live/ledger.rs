//! The decision ledger on a real PostgreSQL (`SYSTEMONE_POSTGRES_URL_FOR_TESTS`, started by
//! `scripts/start-postgres.sh`): the suite of `tests/support/ledger_suite.rs` run on it,
//! and PostgreSQL stopped and restarted under load. The same scenarios on SQLite are in the
//! hermetic tier (`tests/hermetic/ledger.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::setup::postgres::OwnPostgres;
use crate::support::ledger::{Backend, LedgerDb};
use crate::support::ledger_suite::{
    an_answer_and_a_refusal_are_on_record, calibrate_from_the_ledger_fits_as_its_export,
    canaries_stay_out_of_the_ledger_logs_and_metrics, each_policy_does_what_it_says,
    every_answer_survives_kill_9, keys_read_and_annotate_their_own_records,
    readiness_counts_what_a_store_away_loses, retention_deletes_old_records_in_the_background,
    service, the_prior_correction_is_on_record, three_questions,
};
use crate::support::{post, Service};
use systemone::ledger::store::Store;

#[tokio::test]
async fn postgres_an_answer_and_a_refusal_are_on_record() {
    an_answer_and_a_refusal_are_on_record(Backend::Postgres).await;
}

#[tokio::test]
async fn postgres_canaries_stay_out_of_the_ledger_logs_and_metrics() {
    canaries_stay_out_of_the_ledger_logs_and_metrics(Backend::Postgres).await;
}

#[tokio::test]
async fn postgres_each_policy_does_what_it_says() {
    each_policy_does_what_it_says(Backend::Postgres).await;
}

#[tokio::test]
async fn postgres_readiness_counts_what_a_store_away_loses() {
    readiness_counts_what_a_store_away_loses(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_answer_survives_kill_9() {
    every_answer_survives_kill_9(Backend::Postgres).await;
}

#[tokio::test]
async fn postgres_keys_read_and_annotate_their_own_records() {
    keys_read_and_annotate_their_own_records(Backend::Postgres).await;
}

#[tokio::test]
async fn postgres_retention_deletes_old_records_in_the_background() {
    retention_deletes_old_records_in_the_background(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_calibrate_from_the_ledger_fits_as_its_export() {
    calibrate_from_the_ledger_fits_as_its_export(Backend::Postgres).await;
}

/// What the callers got, in order: (request id, status).
type Got = Arc<Mutex<Vec<(String, u16)>>>;

/// Callers asking in a loop until told to stop.
fn start_callers(
    service: &Service,
    body: &Value,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> (Got, Vec<tokio::task::JoinHandle<()>>) {
    let got: Got = Arc::default();
    let callers = (0..8)
        .map(|_| {
            let (client, url, body) = (
                service.client.clone(),
                service.url("/v1/systemone"),
                body.clone(),
            );
            let (got, stop) = (got.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let reply = post(&client, &url, &body).await;
                    let id = reply.header("x-request-id").unwrap_or_default().to_owned();
                    got.lock().expect("lock").push((id, reply.status));
                }
            })
        })
        .collect();
    (got, callers)
}

/// Polls `/readyz` (bounded) until the ledger's writers have written all they kept.
async fn wait_for_empty_backlog(service: &Service) {
    for _ in 0..600 {
        let ready = crate::support::get(service, "/readyz").await;
        if ready.body["ledger"]["backlog"] == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the ledger's backlog was not written within 30 s");
}

/// Polls (bounded) until `done` holds for what the callers got.
async fn until(
    got: &Mutex<Vec<(String, u16)>>,
    what: &str,
    done: impl Fn(&[(String, u16)]) -> bool,
) {
    for _ in 0..600 {
        if done(&got.lock().expect("lock")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} within 30 s");
}

/// PostgreSQL stopped and restarted under 8 callers: `fail_closed` answers 503 while it is
/// down, `fail_open` 200 throughout; once it is back, every answer and every refusal is on
/// record as its caller got it (what missed its wait lands late), none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_and_restarted_under_load() {
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    for policy in ["fail_closed", "fail_open"] {
        let mut pg = OwnPostgres::start();
        let db = LedgerDb::in_postgres(&pg.url).await;
        let flags = ["--ledger-policy", policy, "--ledger-timeout-ms", "300"];
        let (_fake, service) = service(&db, &flags).await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (got, callers) = start_callers(&service, &body, &stop);
        let ok = |g: &[(String, u16)]| g.iter().filter(|(_, s)| *s == 200).count();
        until(&got, "50 answers before the stop", |g| ok(g) >= 50).await;
        tokio::task::block_in_place(|| pg.stop());
        let at_stop = got.lock().expect("lock").len();
        until(&got, "20 answers while down", |g| g.len() >= at_stop + 20).await;
        tokio::task::block_in_place(|| pg.restart());
        let at_restart = ok(&got.lock().expect("lock"));
        until(&got, "50 answers after the restart", |g| {
            ok(g) >= at_restart + 50
        })
        .await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for caller in callers {
            caller.await.expect("caller");
        }
        let got = std::mem::take(&mut *got.lock().expect("lock"));
        let down = &got[at_stop..at_stop + 20];
        // What the writers kept while the server was down is written once it is back.
        wait_for_empty_backlog(&service).await;
        let store = Store::postgres(&db.target).await.expect("reopens");
        let mut wrong = Vec::new();
        for (id, status) in &got {
            let record = store.decision(id).await.expect("reads");
            if record.as_ref().map(|r| r.status) != Some(*status) {
                wrong.push((id, status, record.map(|r| r.status)));
            }
        }
        // Every answer and every refusal is on record as the caller got it.
        assert!(
            wrong.is_empty(),
            "{policy}: {} of {}: {wrong:?}",
            wrong.len(),
            got.len()
        );
        let metrics = crate::support::metrics(&service).await;
        let counted = |family: &str, label: &str| -> usize {
            let prefix = format!("systemone_{family}{{{label},store=\"postgres\"}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map_or(0, |n| n.parse().expect("a count"))
        };
        assert_eq!(counted("ledger_records_total", "result=\"lost\""), 0);
        let policy_label = format!("policy=\"{policy}\"");
        assert!(counted("ledger_missed_waits_total", &policy_label) > 0);
        assert!(counted("ledger_records_total", "result=\"late\"") > 0);
        match policy {
            "fail_closed" => assert!(
                down.iter().skip(8).all(|(_, s)| *s == 503),
                "503 while down: {down:?}"
            ),
            _ => assert!(
                down.iter().all(|(_, s)| *s == 200),
                "200 while down: {down:?}"
            ),
        }
    }
}

#[tokio::test]
async fn postgres_the_prior_correction_is_on_record() {
    the_prior_correction_is_on_record(Backend::Postgres).await;
}
