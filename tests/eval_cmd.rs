//! `systemone eval` against the fake vLLM behind a real service on port 0, then
//! `systemone calibrate` on the raw rows it wrote.

mod common;

use clap::Parser;
use common::fake_vllm::FakeVllm;
use serde_json::{json, Value};
use systemone::config::{Cli, Command, EvalArgs};

fn eval_args(extra: &[&str]) -> EvalArgs {
    let mut args = vec!["systemone", "eval"];
    args.extend_from_slice(extra);
    match Cli::try_parse_from(args).expect("valid flags").command {
        Command::Eval(a) => a,
        other => panic!("not eval: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_scores_a_labelled_file_and_feeds_calibrate() {
    let fake = FakeVllm::start().await;
    let service = common::start(common::config(&fake.base_url(), &[])).await;
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
    let outcome = systemone::eval::run(&args).await.expect("eval runs");
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
        let f = &r["families"][family];
        assert_eq!(f["type"], kind);
        assert_eq!(f["n"], 24);
        for key in [
            "accuracy",
            "macro_f1",
            "brier",
            "ece_equal_size_15",
            "ece_equal_width_10",
            "excess_ece",
        ] {
            assert!(
                f[key].as_f64().is_some_and(f64::is_finite),
                "{family} {key}: {f}"
            );
        }
        assert!(f["mean_option_mass"].as_f64().is_some(), "{f}");
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
    let groups = systemone::calibrate_cmd::parse_groups(&raw_text).expect("parses");
    assert_eq!(groups["kind"][0].probs.len(), 3);
    assert_eq!(groups["is_spam"][0].label, 0);
    let cal_out = dir.join("toy.json");
    let summary = systemone::calibrate_cmd::run(&raw, "toy", Some(&cal_out)).expect("calibrates");
    assert!(summary.contains("urgency"), "{summary}");
    systemone::calibrate::Calibration::load(cal_out.to_str().expect("utf-8")).expect("loads");
    std::fs::remove_dir_all(&dir).ok();
}
