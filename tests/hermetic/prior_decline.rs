//! The position prior declines rather than answer worse than the raw read. Three planted
//! questions in four pull the model hard to whatever option is shown first (the fake's
//! `lure`), the fourth not at all. Read in both orders, they teach a prior of the pulled
//! ones' mean: taken out, it brings the pulled reads nearer their rotation average (the
//! held-out cross-entropy gains, well past 2 standard errors) but leaves them on the wrong
//! side, and pushes the unpulled reads across the line. The corrected reads pick the
//! rotation average's answer less often than the raw ones, so the service declines: its
//! single reads are the raw reads, and `/readyz` and `/metrics` count why.

use serde_json::{json, Value};

use crate::support::fake_vllm::{FakeVllm, Planted};
use crate::support::prior::lured;
use crate::support::{self, Service};

/// Questions asked in both orders to learn from.
const TAUGHT: usize = 80;
/// Questions then read once.
const ASKED: usize = 12;
/// How hard three questions in four pull to the first position shown (logits).
const LURE: f64 = 24.0;

/// Planted question `i`: its truth alternates; all but every fourth pull to the first
/// position.
fn question(i: usize, extra: Value) -> Value {
    lured(i, if i % 4 == 0 { 0.0 } else { LURE }, extra)
}

/// Each question's answer as `(choice, probability of alpha, whether corrected)`.
async fn answers(service: &Service, from: usize, extra: &Value) -> Vec<(String, f64, bool)> {
    let mut out = Vec::new();
    for i in from..from + ASKED {
        let reply = support::ask(service, &question(i, extra.clone())).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let a = &reply.body["answers"]["q"];
        out.push((
            a["choice"].as_str().unwrap_or_default().to_string(),
            a["probabilities"]["alpha"].as_f64().unwrap_or(f64::NAN),
            a.get("prior_correction").is_some(),
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correction_that_flips_answers_is_declined_and_the_raw_read_answered() {
    let fake = FakeVllm::start().await;
    fake.set_planted(Some(Planted {
        bias: vec![0.0, 0.0],
        clarity: 1.5,
        read_noise: 0.3,
    }));
    let flags = ["--prior-correction", "true", "--prior-sample-share", "0"];
    let service = support::start(support::config(&fake.base_url(), &flags)).await;
    for i in 0..TAUGHT {
        let reply = support::ask(&service, &question(i, json!({"permutations": 2}))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let report = service.state.models.default_model().prior.report();
    let shape = &report[0];
    eprintln!("{shape:?}");
    assert_eq!(shape.scored, TAUGHT as u64);
    assert!(
        shape.prior[0] > 3.0,
        "the pull looks like a prior: {shape:?}"
    );
    let a = shape.agreement;
    assert!(a.corrected < a.raw, "corrected reads flip answers: {a:?}");

    let raw = answers(&service, 1000, &json!({"prior_correction": false})).await;
    let served = answers(&service, 1000, &json!({})).await;
    assert!(served.iter().all(|s| !s.2), "nothing corrected: {served:?}");
    assert_eq!(served, raw, "the raw reads are the answers");

    let ready = support::get(&service, "/readyz").await;
    let declined = &ready.body["prior"]["declined"];
    assert_eq!(declined["flips_answers"], ASKED, "{}", ready.text);
    assert_eq!(declined["no_gain"], 0, "{}", ready.text);
    assert_eq!(ready.body["prior"]["store"], Value::Null, "{}", ready.text);
    let metrics = support::metrics(&service).await;
    let line = format!("systemone_prior_declined_total{{reason=\"flips_answers\"}} {ASKED}");
    assert!(metrics.contains(&line), "{line} not in {metrics}");
}

/// A service without the prior has no `prior` line; one whose reads hold no position
/// preference answers raw for want of a gain, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_counts_reads_answered_raw_for_want_of_a_gain() {
    let fake = FakeVllm::start().await;
    fake.set_planted(Some(Planted {
        bias: vec![0.0, 0.0],
        clarity: 1.5,
        read_noise: 0.3,
    }));
    let off = support::start(support::config(&fake.base_url(), &[])).await;
    let ready = support::get(&off, "/readyz").await;
    assert_eq!(ready.body["prior"], Value::Null, "{}", ready.text);

    let flags = ["--prior-correction", "true", "--prior-sample-share", "0"];
    let on = support::start(support::config(&fake.base_url(), &flags)).await;
    let unpulled = |i: usize, extra: Value| lured(i, 0.0, extra);
    for i in 0..40 {
        let reply = support::ask(&on, &unpulled(i, json!({"permutations": 2}))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    for i in 100..105 {
        let reply = support::ask(&on, &unpulled(i, json!({}))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert!(reply.body["answers"]["q"].get("prior_correction").is_none());
    }
    let ready = support::get(&on, "/readyz").await;
    let declined = &ready.body["prior"]["declined"];
    assert_eq!(declined["no_gain"], 5, "{}", ready.text);
    assert_eq!(declined["flips_answers"], 0, "{}", ready.text);
}
