//! Escalation when unsure, against fake native servers (`tests/hermetic/setup/fake_native.rs`): a
//! `cheap` model whose `unsure…` questions come back uniform (confidence 0) escalates to a
//! `strong` one.
//!
//! * exactly the unsure questions are asked again, together, in one request; their answers
//!   are the strong model's and carry `model`, the rest are the cheap model's; the header
//!   counts them; usage sums both; the metrics count the pair and outcome;
//! * nothing unsure: nothing is sent, the header says 0;
//! * the strong model failing (an error, a hang past the deadline): the first answers
//!   stand with `x-systemone-escalation: failed`, or the request fails under
//!   `escalate_required`; either way the escalation's request counts in the usage (and,
//!   when the request fails, in `/v1/usage` and on the ledger's record of the refusal);
//! * a `not_automate` rule without a covering profile escalates nothing.

use crate::setup::fake_native::{FakeNative, Fault, Flavor};
use crate::support;
use crate::support::ledger::{start_with_ledger, Backend, LedgerDb};
use crate::support::native_model;
use crate::support::{ask, assert_error, get_as, Service};
use serde_json::{json, Value};
use systemone::config::ServeConfig;

/// A registry where `cheap` (on `cheap`) escalates to `strong` (on `strong`) by `rule`.
async fn front(cheap: &FakeNative, strong: &FakeNative, rule: &str) -> Service {
    support::start(config(cheap, strong, rule, &[])).await
}

/// [`front`]'s configuration, with `extra` flags.
fn config(cheap: &FakeNative, strong: &FakeNative, rule: &str, extra: &[String]) -> ServeConfig {
    let cheap_rule =
        format!("upstream_model = \"cheap-upstream\"\nescalate_to = \"strong\"\n{rule}");
    let registry = [
        native_model("cheap", &cheap.base_url(), &cheap_rule),
        native_model(
            "strong",
            &strong.base_url(),
            "upstream_model = \"strong-upstream\"",
        ),
    ]
    .concat();
    let mut flags = vec!["--request-timeout-secs", "20"];
    flags.extend(extra.iter().map(String::as_str));
    support::registry_config(&registry, &flags)
}

async fn fakes() -> (FakeNative, FakeNative) {
    let (cheap, strong) = (
        FakeNative::start(Flavor::TypeSafe).await,
        FakeNative::start(Flavor::TypeSafe).await,
    );
    strong.set_always_sure();
    (cheap, strong)
}

fn body() -> Value {
    json!({
        "state": "Invoice 1042 was charged twice.",
        "questions": {
            "unsure_team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": null, "bug": null, "other": null}},
            "refund": {"type": "noul", "instructions": "Refund?"},
            "unsure_urgent": {"type": "noul", "instructions": "Urgent?"},
            "one": {"type": "choice", "instructions": "Only", "criteria": {"sole": null}}
        }
    })
}

#[tokio::test]
async fn exactly_the_unsure_questions_are_asked_again_in_one_request() {
    let (cheap, strong) = fakes().await;
    let service = front(&cheap, &strong, "escalate_below = 0.01").await;
    let reply = ask(&service, &body()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!((cheap.requests(), strong.requests()), (1, 1));
    let again = &strong.bodies()[0];
    let ids: Vec<&str> = again["questions"]
        .as_object()
        .expect("q")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(ids, ["unsure_team", "unsure_urgent"]);
    assert_eq!(again["model"], json!("strong-upstream"));
    assert_eq!(again["state"], body()["state"]);
    assert_eq!(reply.header("x-systemone-escalated"), Some("2"));
    assert_eq!(reply.header("x-systemone-escalation"), None);
    let mut sure = again.clone();
    sure["x_always_sure"] = json!(true);
    let strong_said = FakeNative::expected(&sure);
    let cheap_said = FakeNative::expected(&cheap.bodies()[0]);
    let answers = &reply.body["answers"];
    for id in ["unsure_team", "unsure_urgent"] {
        assert_eq!(answers[id]["model"], json!("strong"), "{id}");
        assert_eq!(
            answers[id]["confidence"], strong_said["answers"][id]["confidence"],
            "{id}"
        );
        assert!(
            answers[id]["confidence"].as_f64().is_some_and(|c| c > 0.01),
            "{id}"
        );
    }
    assert_eq!(
        answers["refund"]["noul"],
        cheap_said["answers"]["refund"]["noul"]
    );
    assert!(
        answers["refund"].get("model").is_none(),
        "the cheap model's answer"
    );
    assert!(answers["one"].get("model").is_none());
    assert_eq!(reply.body["model"], json!("cheap-upstream"));
    let usage = &reply.body["usage"];
    assert_eq!(usage["upstream_requests"], json!(2), "{usage}");
    assert_eq!(usage["input_tokens"], json!(300 + 200), "{usage}");
    let metrics = reply_text(&service, "/metrics").await;
    assert!(
        metrics.contains(
            "systemone_escalations_total{from=\"cheap\",outcome=\"answered\",to=\"strong\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("systemone_escalated_answers_total{from=\"cheap\",to=\"strong\"} 2"),
        "{metrics}"
    );
}

async fn reply_text(service: &Service, path: &str) -> String {
    let r = service
        .client
        .get(service.url(path))
        .send()
        .await
        .expect("answers");
    r.text().await.expect("text")
}

#[tokio::test]
async fn nothing_unsure_sends_nothing_more() {
    let (cheap, strong) = fakes().await;
    let service = front(&cheap, &strong, "escalate_below = 0.01").await;
    let sure =
        json!({"state": "s", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}});
    let reply = ask(&service, &sure).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.header("x-systemone-escalated"), Some("0"));
    assert_eq!(strong.requests(), 0);
}

/// When the strong model fails, the first answers stand and a header says so; under
/// `escalate_required` the request fails with the strong model's error.
#[tokio::test(start_paused = true)]
async fn a_failed_escalation_keeps_the_first_answers_unless_required() {
    for (fault, required, status) in [
        (Fault::Status(500), false, 200),
        (Fault::Hang, false, 200),
        (Fault::MissingField, false, 200),
        (Fault::Status(500), true, 502),
        (Fault::Hang, true, 504),
    ] {
        let (cheap, strong) = fakes().await;
        strong.set_fault(fault.clone());
        let rule = format!("escalate_below = 0.01\nescalate_required = {required}");
        let service = front(&cheap, &strong, &rule).await;
        let reply = ask(&service, &body()).await;
        let what = format!("{fault:?} required={required}");
        assert_eq!(reply.status, status, "{what}: {}", reply.text);
        assert_eq!(strong.requests(), 1, "{what}");
        if status == 200 {
            assert_eq!(
                reply.header("x-systemone-escalation"),
                Some("failed"),
                "{what}"
            );
            assert_eq!(reply.header("x-systemone-escalated"), Some("0"), "{what}");
            let first = FakeNative::expected(&cheap.bodies()[0]);
            let answers = &reply.body["answers"];
            assert_eq!(
                answers["unsure_team"]["probabilities"],
                first["answers"]["unsure_team"]["probabilities"]
            );
            assert!(answers["unsure_team"].get("model").is_none(), "{what}");
            // The failed escalation's request was sent: usage counts it.
            assert_eq!(reply.body["usage"]["upstream_requests"], json!(2), "{what}");
        }
    }
}

/// Under `escalate_required` a failed escalation fails the request, yet what was sent
/// counts: the cheap model's request (300 input tokens, its three questions of two or more
/// options) and the escalation's, in `/v1/usage` (not as an answered request) and on the
/// ledger's record of the refusal.
#[tokio::test]
async fn a_required_escalation_that_fails_still_counts_what_was_sent() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (cheap, strong) = fakes().await;
    strong.set_fault(Fault::Status(500));
    let rule = "escalate_below = 0.01\nescalate_required = true";
    let service = start_with_ledger(config(&cheap, &strong, rule, &db.flags())).await;
    let reply = ask(&service, &body()).await;
    assert_error(&reply, 502, "system_one_upstream_error", "protocol");
    assert_eq!((cheap.requests(), strong.requests()), (1, 1));
    let usage = get_as(&service, "/v1/usage", None).await;
    let total = &usage.body["total"];
    assert_eq!(total["upstream_requests"], json!(2), "{}", usage.text);
    assert_eq!(total["input_tokens"], json!(300), "{}", usage.text);
    assert_eq!(total["requests"], json!(0), "{}", usage.text);
    let id = reply.header("x-request-id").expect("a request id");
    let store = service.state.ledger.store().expect("the ledger is on");
    let record = store.decision(id).await.expect("reads").expect("on record");
    assert_eq!(
        (record.status, record.code.as_deref()),
        (502, Some("system_one_upstream_error"))
    );
    assert_eq!(
        (record.usage.upstream_requests, record.usage.input_tokens),
        (2, 300)
    );
}

#[tokio::test]
async fn not_automate_without_a_covering_profile_escalates_nothing() {
    let (cheap, strong) = fakes().await;
    let service = front(&cheap, &strong, "escalate_when = \"not_automate\"").await;
    let reply = ask(&service, &body()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.header("x-systemone-escalated"), Some("0"));
    assert_eq!(strong.requests(), 0);
}

#[tokio::test]
async fn escalating_to_an_unknown_model_is_a_startup_error() {
    let url = "http://127.0.0.1:9/v1";
    let registry = native_model("a", url, "escalate_to = \"zz\"\nescalate_below = 0.3");
    assert_eq!(
        crate::setup::registry_error(&registry),
        "model a: escalate_to \"zz\" is not a configured model"
    );
}

/// `escalate_when = "not_automate"` on a native model under a named profile: exactly the
/// answers the profile did not flag `automate` (as a run without escalation shows them) are
/// asked again.
#[tokio::test]
async fn not_automate_escalates_exactly_the_answers_the_profile_did_not_automate() {
    let (cheap, strong) = fakes().await;
    let registry = |rule: &str| {
        let first = format!("escalate_to = \"strong\"\n{rule}");
        let first = if rule.is_empty() {
            String::new()
        } else {
            first
        };
        [
            native_model("gemma-3-270m", &cheap.base_url(), &first),
            native_model("strong", &strong.base_url(), ""),
        ]
        .concat()
    };
    let noul = |text: &str| json!({"type": "noul", "instructions": text});
    let body = json!({
        "state": "Subject: WIN a FREE cruise!!! Click now.",
        "questions": {"spam": noul("Spam?"), "unsure_spam": noul("Really spam?"), "phishing": noul("Phishing?")},
        "calibration": "spam"
    });
    let plain = support::start(support::registry_config(&registry(""), &[])).await;
    let first = ask(&plain, &body).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let not_automated: Vec<String> = first.body["answers"]
        .as_object()
        .expect("answers")
        .iter()
        .filter(|(_, a)| a["automate"] == json!(false))
        .map(|(id, _)| id.clone())
        .collect();
    assert!(
        not_automated.contains(&"unsure_spam".to_string()),
        "{}",
        first.text
    );
    let rule = "escalate_when = \"not_automate\"";
    let service = support::start(support::registry_config(&registry(rule), &[])).await;
    let reply = ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let count = not_automated.len().to_string();
    assert_eq!(reply.header("x-systemone-escalated"), Some(count.as_str()));
    let again = strong.bodies().pop().expect("one escalation");
    let asked: Vec<&String> = again["questions"].as_object().expect("q").keys().collect();
    assert_eq!(asked, not_automated.iter().collect::<Vec<_>>());
    let strong_name = json!("strong");
    for (id, answer) in reply.body["answers"].as_object().expect("answers") {
        let want = not_automated.contains(id).then_some(&strong_name);
        assert_eq!(answer.get("model"), want, "{id}");
    }
}
