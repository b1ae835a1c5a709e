//! The calibration watch on a real run: SpamAssassin emails (`SYSTEMONE_SPAM_DEV`, the
//! development rows `scripts/spam-data.py` writes) answered through the service by a real
//! llama.cpp `llama-server` serving Gemma 3 270M, with an SQLite ledger, each email asked
//! twice (the data set's instructions and a shorter wording of the same question) and its
//! true label posted as the outcome. The watch's equal-width ECE (`GET /v1/calibration`)
//! is `systemone calibrate check`'s `ECE_w15` on the same ledger, to 1e-9, over the same
//! count of outcomes.
//!
//! Needs `SYSTEMONE_LLAMA_URL` and `SYSTEMONE_SPAM_DEV`, as exported by `scripts/test.sh`;
//! without them it fails with a message that says so.

use std::time::Instant;

use serde_json::json;

use crate::setup::llama::{backend_turn, llama_config, spam_rows, MODEL};
use crate::support::ledger::{start_with_ledger, watch_and_check_ece, Backend, LedgerDb};
use crate::support::{ask, post};

/// The second wording each email is asked in (the same question name: one group, one shape).
const SHORT: &str = "Is this email spam?";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchs_ece_is_calibrate_checks_on_a_real_run() {
    let rows = spam_rows();
    let (url, _turn) = backend_turn().await;
    let db = LedgerDb::new(Backend::Sqlite).await;
    let flags: Vec<String> = db.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let service = start_with_ledger(llama_config(&url, &flags)).await;
    let started = Instant::now();
    let mut asked = 0u64;
    for row in &rows {
        let spam = row["gold"]["spam"].as_bool().expect("a gold label");
        let mut short = row["questions"].clone();
        short["spam"]["instructions"] = json!(SHORT);
        for questions in [row["questions"].clone(), short] {
            let reply = ask(
                &service,
                &json!({"state": row["state"], "questions": questions}),
            )
            .await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            let id = reply.header("x-request-id").expect("a request id");
            let path = format!("/v1/ledger/decisions/{id}/outcomes");
            let outcome = json!({"question": "spam", "outcome": spam});
            let reply = post(&service.client, &service.url(&path), &outcome).await;
            assert_eq!(reply.status, 201, "{}", reply.text);
            asked += 1;
        }
    }
    eprintln!(
        "{asked} answers with outcomes in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let query = "type=noul&options=2&class=raw";
    let (watch, check) = watch_and_check_ece(&service, query, &db.target, MODEL, MODEL).await;
    eprintln!("watch {watch:?}, calibrate check {check:?}");
    assert!(asked >= 24, "a few dozen answers: {asked}");
    assert_eq!((watch.outcomes, check.outcomes), (asked, asked));
    assert!(
        (watch.ece - check.ece).abs() < 1e-9 && watch.ece > 0.0,
        "watch {watch:?}, check {check:?}"
    );
}
