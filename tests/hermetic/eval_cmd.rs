//! `systemone eval` against the fake vLLM behind a real service on port 0, then
//! `systemone calibrate` on the raw rows it wrote.

use crate::support;
use crate::support::fake_vllm::FakeVllm;
use crate::support::{calibrate_args, eval_args};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_scores_a_labelled_file_and_feeds_calibrate() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let dir = std::env::temp_dir().join(format!("systemone-eval-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let mut text = String::new();
    for i in 0..24 {
        let kind = ["spam", "ham", "newsletter"][i % 3];
        let line = json!({
            "state": format!("Message {i}: buy cheap watches now, offer {i}"),
            "questions": {
                "is_spam": {"type": "noul", "instructions": "Is this email spam?"},
                "kind": {"type": "choice", "instructions": "What kind of email is this?",
                         "criteria": {"spam": "unsolicited", "ham": "wanted mail", "newsletter": null}},
                "urgency": {"type": "score", "instructions": "How urgent is it?",
                            "criteria": ["not urgent", "somewhat", "very"]}
            },
            "temperature": 2.5,
            "gold": {"is_spam": i % 3 != 0, "kind": kind, "urgency": i % 3}
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let data = dir.join("labelled.jsonl");
    std::fs::write(&data, &text).expect("write data");
    let (raw, report, svg) = (
        dir.join("raw.jsonl"),
        dir.join("report.json"),
        dir.join("rel.svg"),
    );
    let args = eval_args(&[
        "--data",
        data.to_str().expect("utf-8"),
        "--url",
        &service.url(""),
        "--raw-out",
        raw.to_str().expect("utf-8"),
        "--report",
        report.to_str().expect("utf-8"),
        "--diagram",
        svg.to_str().expect("utf-8"),
        "--concurrency",
        "4",
        "--progress",
        "false",
    ]);
    let outcome = systemone::cli::eval::run(&args).await.expect("eval runs");
    assert!(outcome.table.contains("is_spam"), "{}", outcome.table);
    let r = &outcome.report;
    assert_eq!(r["lines"], 24);
    assert_eq!(r["scored_answers"], 72, "{r}");
    assert_eq!(r["failures"].as_array().map(Vec::len), Some(0));
    for (family, kind) in [
        ("is_spam", "noul"),
        ("kind", "choice"),
        ("urgency", "score"),
    ] {
        support::assert_family(r, family, kind, 24);
    }
    // The line's temperature 2.5 was replaced by 1: `join` refuses tempered answers, and
    // none failed.
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
    assert_eq!(&written, r);
    assert!(std::fs::read_to_string(&svg)
        .expect("svg")
        .starts_with("<svg"));
    // Raw rows: input order, one per scored answer, readable by calibrate.
    let raw_text = std::fs::read_to_string(&raw).expect("raw");
    assert_eq!(raw_text.lines().count(), 72);
    let groups = systemone::cli::calibrate::parse_groups(&raw_text).expect("parses");
    assert_eq!(groups["kind"].rows[0].probs.len(), 3);
    assert_eq!(groups["is_spam"].rows[0].label, 0);
    let shape = groups["kind"]
        .shape
        .as_ref()
        .expect("type and labels written");
    assert_eq!(
        (shape.kind.as_str(), &shape.labels[..]),
        (
            "choice",
            &["spam".to_string(), "ham".into(), "newsletter".into()][..]
        )
    );
    let cal_out = dir.join("toy.json");
    let summary = systemone::cli::calibrate::run(&calibrate_args(&[
        "--data",
        raw.to_str().expect("utf-8"),
        "--model",
        "toy",
        "--out",
        cal_out.to_str().expect("utf-8"),
    ]))
    .expect("calibrates");
    assert!(summary.contains("urgency"), "{summary}");
    systemone::calibration::Calibration::load(cal_out.to_str().expect("utf-8")).expect("loads");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fitted_profile_is_served_and_evaluated_in_process() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let dir = std::env::temp_dir().join(format!("systemone-eval-prof-{}", std::process::id()));
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).expect("tmp dir");
    let mut text = String::new();
    for i in 0..60 {
        let line = json!({
            "state": format!("Message {i}: {}", if i % 4 == 0 { "meeting notes" } else { "cheap offer" }),
            "questions": {"is_spam": {"type": "noul", "instructions": "Is this email spam?"}},
            "gold": {"is_spam": i % 4 != 0}
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let data = dir.join("labelled.jsonl");
    std::fs::write(&data, &text).expect("write data");
    let path = |name: &str| dir.join(name).to_str().expect("utf-8").to_string();
    // Raw rows over HTTP, then a profile fitted on them.
    let raw = path("raw.jsonl");
    let (report, diagram) = (path("report.json"), path("rel.svg"));
    let base = [
        "--data",
        data.to_str().expect("utf-8"),
        "--report",
        &report,
        "--diagram",
        &diagram,
        "--progress",
        "false",
    ];
    let (url, backend) = (service.url(""), fake.base_url());
    let mut flags = base.to_vec();
    flags.extend(["--url", &url, "--raw-out", &raw]);
    systemone::cli::eval::run(&eval_args(&flags))
        .await
        .expect("raw eval runs");
    let profile_path = profiles.join("spam.json");
    let summary = systemone::cli::calibrate::run(&calibrate_args(&[
        "--data",
        &raw,
        "--model",
        "glm-5.3-flash",
        "--profile",
        "spam",
        "--out",
        profile_path.to_str().expect("utf-8"),
    ]))
    .expect("profile fits");
    assert!(summary.contains("T = "), "{summary}");
    let profile = systemone::calibration::profile::Profile::parse(
        &std::fs::read_to_string(&profile_path).expect("profile written"),
    )
    .expect("profile parses");

    // The same data through an in-process service that knows the profile.
    let mut flags = base.to_vec();
    flags.extend([
        "--profile",
        "spam",
        "--backend",
        "vllm",
        "--backend-url",
        &backend,
        "--token-table",
        "golden-fake",
        "--model",
        "glm-5.3-flash",
        "--profiles-dir",
        profiles.to_str().expect("utf-8"),
    ]);
    let before = fake.chat_requests();
    let outcome = systemone::cli::eval::run(&eval_args(&flags))
        .await
        .expect("profile eval runs");
    assert_eq!(
        fake.chat_requests() - before,
        60,
        "every line asked the backend once"
    );
    let r = &outcome.report;
    assert!(
        r["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("in-process")),
        "{r}"
    );
    assert_eq!(r["calibration"], "spam");
    assert_eq!(r["failures"].as_array().map(Vec::len), Some(0), "{r}");
    let stats = &r["families"]["is_spam"]["profile"];
    let coverage = stats["set_coverage"].as_f64().expect("coverage");
    assert!((0.0..=1.0).contains(&coverage), "{stats}");
    assert!(stats["mean_set_size"]
        .as_f64()
        .is_some_and(|s| (0.0..=2.0).contains(&s)));
    // The service's sets and automation agree with the profile applied to the raw rows
    // (the fake answers the same prompt the same way).
    let groups =
        systemone::cli::calibrate::parse_groups(&std::fs::read_to_string(&raw).expect("raw"))
            .expect("raw rows");
    let recalibrated: Vec<(Vec<f64>, usize)> = groups["is_spam"]
        .rows
        .iter()
        .map(|r| {
            (
                systemone::calibration::fit::apply(&r.probs, profile.temperature, &profile.bias),
                r.label,
            )
        })
        .collect();
    let covered = recalibrated
        .iter()
        .filter(|(p, label)| {
            systemone::calibration::fit::prediction_set(p, &profile.cutoffs).contains(label)
        })
        .count();
    assert!((coverage - covered as f64 / 60.0).abs() < 1e-12, "{stats}");
    let automated = recalibrated
        .iter()
        .filter(|(p, _)| profile.threshold.is_some_and(|t| p[0].max(p[1]) >= t))
        .count();
    assert_eq!(stats["automated"], automated, "{stats}");
    assert!(
        outcome.table.contains("prediction sets cover"),
        "{}",
        outcome.table
    );
    std::fs::remove_dir_all(&dir).ok();
}
