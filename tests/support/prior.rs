//! The position prior's scenarios both tiers run: a fake planting a bias of 3 on two
//! options (learned within a few requests), requests until one is corrected, and the
//! book's state and its store exchanges as a service shows them.

use std::time::Duration;

use serde_json::{json, Value};

use super::fake_vllm::{FakeVllm, Planted};
use super::Service;

/// Plants `+1.5` on the first position and `−1.5` on the second.
pub fn plant_two(fake: &FakeVllm) {
    fake.set_planted(Some(Planted {
        bias: vec![1.5, -1.5],
        clarity: 1.5,
        read_noise: 0.3,
    }));
}

/// Planted question `i` (its truth alternates), with `extra` top-level fields.
pub fn planted(i: usize, extra: Value) -> Value {
    let truth = ["alpha", "beta"][i % 2];
    let mut body = json!({
        "state": {"truth": truth, "seed": i},
        "questions": {"q": {"type": "choice", "instructions": "Which one?",
                            "criteria": {"alpha": null, "beta": null}}}
    });
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    body
}

/// Planted question `i` whose state also has `lure`: it pulls the model to whatever option
/// is shown first, in every order (the fake's [`Planted`]).
#[allow(dead_code)] // the hermetic tier's only
pub fn lured(i: usize, lure: f64, extra: Value) -> Value {
    let mut body = planted(i, extra);
    body["state"]["lure"] = json!(lure);
    body
}

/// Asks planted questions from `from` until an answer says the prior was taken out;
/// returns the next question's index. Fails after 100.
pub async fn learn_until_corrected(service: &Service, from: usize) -> usize {
    for i in from..from + 100 {
        let reply = super::ask(service, &planted(i, json!({}))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        if reply.body["answers"]["q"].get("prior_correction").is_some() {
            return i + 1;
        }
    }
    panic!("no answer corrected within 100 requests");
}

/// The default model's samples for the planted shape (`choice/2/accuracy`), 0 when none.
pub fn samples(service: &Service) -> u64 {
    let model = service.state.models.default_model();
    model
        .prior
        .report()
        .iter()
        .find(|r| r.shape == "choice/2/accuracy")
        .map_or(0, |r| r.samples)
}

/// Waits (up to 30 s) until the service's book holds `learned` samples of the planted
/// shape (a restarted service loads them from its store in the background).
#[allow(dead_code)] // the hermetic tier's restarts only
pub async fn loaded(service: &Service, learned: u64) {
    super::until("the prior is loaded", Duration::from_secs(30), || {
        samples(service) == learned
    })
    .await;
}

/// Successful exchanges with `store` (`file`, `redis`) so far, from `/metrics`.
pub async fn syncs(service: &Service, store: &str) -> u64 {
    let line = format!("systemone_prior_syncs_total{{outcome=\"ok\",store=\"{store}\"}} ");
    super::metrics(service)
        .await
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()).map(str::to_string))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits (up to 30 s) for a failed exchange with `store` on `/metrics`; returns the
/// metrics text that showed it.
pub async fn sync_failed(service: &Service, store: &str) -> String {
    let failed = format!("systemone_prior_syncs_total{{outcome=\"failed\",store=\"{store}\"}}");
    for _ in 0..3000 {
        let seen = super::metrics(service).await;
        if seen.contains(&failed) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no failed exchange with the {store} store within 30 s");
}

/// Waits (up to 30 s) for two more exchanges with `store`: the second began after this
/// call, so everything learned before it is in the store.
pub async fn synced(service: &Service, store: &str) {
    let target = syncs(service, store).await + 2;
    for _ in 0..3000 {
        if syncs(service, store).await >= target {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("two exchanges with the {store} store did not happen within 30 s");
}

/// The flags of a service that learns the position prior and exchanges it every 20 ms with
/// the store `store` names (`--state-dir DIR`, or `--redis-url URL` and its prefix).
pub fn syncing<'a>(store: &[&'a str]) -> Vec<&'a str> {
    let mut flags = vec!["--prior-correction", "true", "--prior-sync-ms", "20"];
    flags.extend_from_slice(store);
    flags
}
