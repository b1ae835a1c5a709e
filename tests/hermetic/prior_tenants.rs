//! The position prior's unit of trust: one tenant's samples never move another tenant's
//! answers. A tenant sends many questions written to pull the model to whatever option is
//! shown first (the fake's `lure`), each read in both orders: read that way, they look
//! like a strong position preference. Another tenant's answers to the same questions are
//! then compared with its answers on a service that never saw the attack.

use serde_json::json;

use crate::support::fake_vllm::{FakeVllm, Planted};
use crate::support::prior::lured;
use crate::support::{self, ask_as, key_entry, keys_file, Service};

const VICTIM: &str = "sk-prior-victim-5e6f";
const ATTACKER: &str = "sk-prior-attacker-7a8b";
/// The victim's questions, read once each.
const ASKED: usize = 20;
/// The attacker's crafted questions, each read in both orders.
const CRAFTED: usize = 200;

async fn start(fake: &FakeVllm) -> Service {
    let keys = keys_file(&format!(
        "{}{}",
        key_entry("victim", VICTIM, ""),
        key_entry("attacker", ATTACKER, "")
    ));
    support::start(support::config(
        &fake.base_url(),
        &[
            "--keys-file",
            keys.to_str().expect("utf-8"),
            "--prior-correction",
            "true",
        ],
    ))
    .await
}

/// The victim's answers: (choice, probability of `alpha`) per question.
async fn victim_answers(service: &Service) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for i in 0..ASKED {
        let reply = ask_as(service, Some(VICTIM), &lured(i, 0.0, json!({}))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let answer = &reply.body["answers"]["q"];
        let choice = answer["choice"].as_str().unwrap_or_default().to_string();
        let alpha = answer["probabilities"]["alpha"]
            .as_f64()
            .unwrap_or(f64::NAN);
        out.push((choice, alpha));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_crafted_samples_move_no_other_tenants_answers() {
    let fake = FakeVllm::start().await;
    fake.set_planted(Some(Planted {
        bias: vec![0.0, 0.0],
        clarity: 1.5,
        read_noise: 0.3,
    }));
    let untouched = start(&fake).await;
    let baseline = victim_answers(&untouched).await;

    let attacked = start(&fake).await;
    for i in 0..CRAFTED {
        let body = lured(1000 + i, 4.0, json!({"permutations": 2}));
        let reply = ask_as(&attacked, Some(ATTACKER), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let after = victim_answers(&attacked).await;

    let flipped = baseline
        .iter()
        .zip(&after)
        .filter(|(a, b)| a.0 != b.0)
        .count();
    let moved = baseline
        .iter()
        .zip(&after)
        .map(|(a, b)| (a.1 - b.1).abs())
        .fold(0.0, f64::max);
    assert_eq!(flipped, 0, "answers flipped: {baseline:?} then {after:?}");
    assert!(
        moved < 0.02,
        "probability moved by {moved}: {baseline:?} then {after:?}"
    );

    // The attacker's own single reads do get its prior taken out: its book is its own.
    let reply = ask_as(&attacked, Some(ATTACKER), &lured(5000, 4.0, json!({}))).await;
    assert!(
        reply.body["answers"]["q"].get("prior_correction").is_some(),
        "{}",
        reply.text
    );
}
