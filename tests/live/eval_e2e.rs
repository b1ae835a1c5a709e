//! `systemone eval` and `systemone calibrate profile` end to end against the real local
//! backend: llama-server with Gemma 3 270M at `SYSTEMONE_LLAMA_URL` (scripts/test.sh starts
//! it). A small labelled file is scored in-process with raw probabilities (report, diagram,
//! raw rows), a profile is fitted on the raw rows, and the same file is scored again over
//! HTTP through a service that serves the profile.

use crate::setup::llama::llama_url;
use crate::support;
use crate::support::{calibrate_args, eval_args};
use serde_json::{json, Value};

const MODEL: &str = "gemma-3-270m";

/// Eight short emails, half spam, each asked a noul and a three-way choice.
fn labelled_file() -> String {
    let emails = [
        (
            "CONGRATULATIONS!!! You have WON $1,000,000",
            "Click here now to claim your prize, send your bank details today!",
            true,
            "spam",
        ),
        (
            "Meeting moved to 3pm",
            "Hi Anna, the design review is moved to 3pm in room 4. Bring the slides. Thanks, Tom",
            false,
            "work",
        ),
        (
            "Cheap meds online - 80% off",
            "Buy viagra cialis cheap no prescription needed, fast shipping worldwide, order now",
            true,
            "spam",
        ),
        (
            "Re: dinner on Saturday?",
            "Sounds great, we'll bring dessert. See you at 7. Love, Mum",
            false,
            "personal",
        ),
        (
            "Make money fast from home!!!",
            "Earn $5000 a week working from home, no experience, reply with your details",
            true,
            "spam",
        ),
        (
            "Quarterly report draft",
            "Attached is the Q3 draft. Please send comments on section 2 by Friday.",
            false,
            "work",
        ),
        (
            "Your account is suspended",
            "Dear customer, verify your password at this link immediately or lose access",
            true,
            "spam",
        ),
        (
            "Photos from the trip",
            "Here are the pictures from the lake, the kids loved it. Call me tonight!",
            false,
            "personal",
        ),
    ];
    let mut text = String::new();
    for (subject, body, spam, kind) in emails {
        let line = json!({
            "state": {"subject": subject, "body": body},
            "questions": {
                "is_spam": {"type": "noul", "instructions": "Is this email spam?"},
                "kind": {"type": "choice", "instructions": "What kind of email is this?",
                         "criteria": {"spam": "unsolicited bulk mail", "work": "about a job or project", "personal": "from family or friends"}}
            },
            "gold": {"is_spam": spam, "kind": kind}
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_and_a_profile_against_the_real_backend() {
    let backend = llama_url();
    let dir = std::env::temp_dir().join(format!("systemone-eval-e2e-{}", std::process::id()));
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).expect("tmp dir");
    let data = dir.join("labelled.jsonl");
    std::fs::write(&data, labelled_file()).expect("write data");
    let path = |name: &str| dir.join(name).to_str().expect("utf-8").to_string();
    let (raw, report, diagram) = (path("raw.jsonl"), path("report.json"), path("rel.svg"));
    let data_s = data.to_str().expect("utf-8").to_string();
    // The single-slot backend answers slowly under load: generous read timeouts.
    let serve_flags = [
        "--backend",
        "llamacpp",
        "--backend-url",
        &backend,
        "--model",
        MODEL,
        "--token-table",
        "gemma-3",
        "--read-timeout-secs",
        "120",
        "--request-timeout-secs",
        "600",
    ];

    // 1. Raw probabilities, in-process.
    let mut flags = vec![
        "--data",
        &data_s,
        "--raw-out",
        &raw,
        "--report",
        &report,
        "--diagram",
        &diagram,
        "--concurrency",
        "2",
        "--progress",
        "false",
    ];
    flags.extend_from_slice(&serve_flags);
    let outcome = systemone::cli::eval::run(&eval_args(&flags))
        .await
        .expect("eval runs");
    let r = &outcome.report;
    assert_eq!(r["failures"], json!([]), "{r}");
    assert_eq!(r["scored_answers"], 16, "{r}");
    for (family, kind) in [("is_spam", "noul"), ("kind", "choice")] {
        support::assert_family(r, family, kind, 8);
    }
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    assert_eq!(&written, r);
    let svg = std::fs::read_to_string(&diagram).expect("diagram");
    assert!(
        svg.starts_with("<svg") && svg.contains("is_spam (n=8)"),
        "{svg}"
    );
    assert!(outcome.table.contains("questions/s"), "{}", outcome.table);

    // 2. A profile for the noul, fitted on the raw rows (tiny data: the shrinkage keeps it
    //    near T = 1; what matters here is that the file is produced and served).
    let profile_path = profiles.join("spam.json");
    let cal = calibrate_args(&[
        "--data",
        &raw,
        "--model",
        MODEL,
        "--profile",
        "spam",
        "--group",
        "is_spam",
        "--folds",
        "4",
        "--out",
        profile_path.to_str().expect("utf-8"),
    ]);
    systemone::cli::calibrate::run(&cal).expect("profile fits");

    // 3. The same file over HTTP through a service that serves the profile.
    let mut flags = vec!["systemone", "serve"];
    flags.extend_from_slice(&serve_flags);
    flags.extend(["--profiles-dir", profiles.to_str().expect("utf-8")]);
    let service = support::start(support::serve_config(&flags)).await;
    let url = service.url("");
    let report2 = path("report-profile.json");
    let args = eval_args(&[
        "--data",
        &data_s,
        "--url",
        &url,
        "--profile",
        "spam",
        "--report",
        &report2,
        "--diagram",
        &path("rel-profile.svg"),
        "--concurrency",
        "2",
        "--progress",
        "false",
    ]);
    let outcome = systemone::cli::eval::run(&args)
        .await
        .expect("profile eval runs");
    let r = &outcome.report;
    // The noul is covered; the choice is not, so its answers are refused as failures.
    assert_eq!(r["families"]["is_spam"]["n"], 8, "{r}");
    assert!(r["families"].get("kind").is_none(), "{r}");
    assert_eq!(r["failures"].as_array().map(Vec::len), Some(8), "{r}");
    let stats = &r["families"]["is_spam"]["profile"];
    assert!(
        stats["set_coverage"]
            .as_f64()
            .is_some_and(|c| (0.0..=1.0).contains(&c)),
        "{stats}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
