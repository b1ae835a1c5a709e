//! `systemone calibrate prior`: the position prior fitted again offline from the per-order
//! reads a ledger keeps. It finds the bias the fake plants, declines where none is
//! planted, and the state directory it seeds starts a service that corrects its first
//! answer at one read.

use serde_json::json;

use crate::support::fake_vllm::{FakeVllm, Planted};
use crate::support::ledger::{start_with_ledger, Backend, LedgerDb};
use crate::support::prior::{loaded, plant_two, planted};
use crate::support::{self, calibrate_args};

/// Questions asked in two orders per ledger.
const ASKED: usize = 40;

/// A service without the correction, recording in a fresh SQLite ledger: `ASKED` planted
/// questions in both orders and one in one order. Returns the ledger's `--ledger` value.
async fn record_reads(fake: &FakeVllm) -> String {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let flags = db.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let service = start_with_ledger(support::config(&fake.base_url(), &flags)).await;
    for i in 0..=ASKED {
        let permutations = if i < ASKED { 2 } else { 1 };
        let body = planted(i, json!({ "permutations": permutations }));
        let reply = support::ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    db.target
}

/// `calibrate` with `flags`, off the test's runtime (the command starts its own).
async fn calibrate(flags: Vec<String>) -> Result<String, String> {
    tokio::task::spawn_blocking(move || {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        systemone::cli::calibrate::run(&calibrate_args(&flags))
    })
    .await
    .expect("calibrate ran")
}

fn prior_flags(ledger: &str, out: Option<&str>) -> Vec<String> {
    let mut flags = vec!["prior", "--from-ledger", ledger, "--model", "glm-5.3-flash"];
    if let Some(dir) = out {
        flags.extend(["--out", dir]);
    }
    flags.into_iter().map(str::to_owned).collect()
}

/// The fit's line for the planted shape, once the summary says it read every question
/// asked in two orders.
fn shape_line(summary: &str) -> &str {
    eprint!("{summary}");
    let read = format!("{ASKED} question(s) read in two or more orders");
    assert!(summary.contains(&read), "{summary}");
    summary
        .lines()
        .find(|l| l.starts_with("choice/2/accuracy"))
        .unwrap_or_else(|| panic!("no shape line: {summary}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_fits_the_prior_from_the_ledger_and_seeds_a_state_dir() {
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    let ledger = record_reads(&fake).await;
    let dir = support::temp_file("unused", "").with_file_name("state");
    let dir_flag = dir.to_str().expect("utf-8").to_owned();
    let summary = calibrate(prior_flags(&ledger, Some(&dir_flag)))
        .await
        .expect("fits");
    // The one-order answer has no reads to learn from.
    let line = shape_line(&summary);
    assert!(!line.contains("declines"), "{line}");
    assert!(!summary.contains("Which one"), "no caller text: {summary}");

    // The seeded directory: a correcting service starts with the fit, and its first
    // answer is corrected at one read (no warm-up sample), toward the planted sign.
    let config = support::config(
        &fake.base_url(),
        &["--prior-correction", "true", "--state-dir", &dir_flag],
    );
    let service = support::start(config).await;
    loaded(&service, ASKED as u64).await;
    let report = service.state.models.default_model().prior.report();
    let prior = &report[0].prior;
    assert!(
        prior[0] > 1.0 && prior[1] < -1.0,
        "planted +1.5/-1.5: {prior:?}"
    );
    let reads = fake.chat_requests();
    let reply = support::ask(&service, &planted(ASKED + 1, json!({}))).await;
    assert!(
        reply.body["answers"]["q"].get("prior_correction").is_some(),
        "{}",
        reply.text
    );
    assert_eq!(fake.chat_requests() - reads, 1, "no warm-up sample");

    // A directory that already holds priors is not added to.
    let again = calibrate(prior_flags(&ledger, Some(&dir_flag))).await;
    let refused = again.expect_err("a used state dir is refused");
    assert!(refused.contains("prior.redb exists"), "{refused}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The reads recorded by `systemone eval`'s in-process service (`--ledger`), this time with
/// no bias planted: the fit declines. A ledger without multi-order reads seeds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_bias_in_the_reads_the_offline_fit_declines() {
    let fake = FakeVllm::start().await;
    fake.set_planted(Some(Planted {
        bias: vec![0.0, 0.0],
        clarity: 1.5,
        read_noise: 0.3,
    }));
    let mut text = String::new();
    for i in 0..ASKED {
        let mut line = planted(i, json!({"permutations": 2}));
        let truth = ["alpha", "beta"][i % 2];
        line["gold"] = json!({ "q": truth });
        text.push_str(&format!("{line}\n"));
    }
    let data = support::temp_file("planted.jsonl", &text);
    let db = LedgerDb::new(Backend::Sqlite).await;
    let backend = fake.base_url();
    let mut flags = vec![
        "--data",
        data.to_str().expect("utf-8"),
        "--backend",
        "vllm",
        "--backend-url",
        &backend,
        "--token-table",
        "golden-fake",
        "--model",
        "glm-5.3-flash",
        "--progress",
        "false",
    ];
    let ledger_flags = db.flags();
    flags.extend(ledger_flags.iter().map(String::as_str));
    let evaluated = systemone::cli::eval::run(&support::eval_args(&flags)).await;
    evaluated.expect("eval runs");
    let summary = calibrate(prior_flags(&db.target, None))
        .await
        .expect("fits");
    let line = shape_line(&summary);
    assert!(line.ends_with("(declines: no_gain)"), "{line}");

    let empty = LedgerDb::new(Backend::Sqlite).await.target;
    let dir = support::temp_file("unused", "").with_file_name("state");
    let dir_flag = dir.to_str().expect("utf-8");
    let summary = calibrate(prior_flags(&empty, Some(dir_flag)))
        .await
        .expect("reads");
    assert!(summary.contains("nothing to fit"), "{summary}");
    assert!(!dir.join("prior.redb").exists(), "{summary}");
}

/// `--tenant NAME`: a service with keys keeps one prior per tenant, so the fit takes that
/// key's records alone and seeds them as its prior: its first single read is corrected at
/// one read; another key's shape is not seeded (it warms up on its own), and the seed holds
/// the tenant's id, never its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_seeds_one_tenants_prior() {
    const ACME: &str = "sk-prior-acme-1c2d";
    const OTHER: &str = "sk-prior-other-3e4f";
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    let keys = support::keys_file(&format!(
        "{}{}",
        support::key_entry("acme", ACME, ""),
        support::key_entry("other", OTHER, "")
    ));
    let keys_flag = keys.to_str().expect("utf-8").to_owned();
    let db = LedgerDb::new(Backend::Sqlite).await;
    let mut flags = db.flags();
    flags.extend(["--keys-file".to_string(), keys_flag.clone()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let recording = start_with_ledger(support::config(&fake.base_url(), &flags)).await;
    for i in 0..ASKED {
        let body = planted(i, json!({"permutations": 2}));
        let reply = support::ask_as(&recording, Some(ACME), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    for i in 0..ASKED / 4 {
        let body = planted(100 + i, json!({"permutations": 2}));
        let reply = support::ask_as(&recording, Some(OTHER), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }

    let dir = support::temp_file("unused", "").with_file_name("state");
    let dir_flag = dir.to_str().expect("utf-8").to_owned();
    let mut tenant = prior_flags(&db.target, Some(&dir_flag));
    tenant.extend(["--tenant".to_string(), "acme".to_string()]);
    let summary = calibrate(tenant).await.expect("fits");
    let line = shape_line(&summary);
    assert!(!line.contains("declines"), "{line}");
    assert!(summary.starts_with("tenant \"acme\""), "{summary}");
    let seed = std::fs::read(dir.join("prior.redb")).expect("seeded");
    let named = seed.windows(4).any(|w| w == b"acme");
    assert!(!named, "the seed holds the tenant's id, not its name");

    let config = support::config(
        &fake.base_url(),
        &[
            "--prior-correction",
            "true",
            "--state-dir",
            &dir_flag,
            "--keys-file",
            &keys_flag,
        ],
    );
    let service = support::start(config).await;
    loaded(&service, ASKED as u64).await;
    let reads = fake.chat_requests();
    let reply = support::ask_as(&service, Some(ACME), &planted(500, json!({}))).await;
    assert!(
        reply.body["answers"]["q"].get("prior_correction").is_some(),
        "{}",
        reply.text
    );
    assert_eq!(fake.chat_requests() - reads, 1, "no warm-up sample");
    let reads = fake.chat_requests();
    let reply = support::ask_as(&service, Some(OTHER), &planted(501, json!({}))).await;
    assert!(
        reply.body["answers"]["q"].get("prior_correction").is_none(),
        "{}",
        reply.text
    );
    assert_eq!(fake.chat_requests() - reads, 2, "another tenant warms up");
    let _ = std::fs::remove_dir_all(&dir);
}
