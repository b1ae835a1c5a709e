//! What the calibration-profile suites share (tests/hermetic/profiles.rs over plain HTTP,
//! tests/live/profiles.rs through the Python SDK): a profiles directory, the `spam` profile
//! and a service on the fake vLLM that loads them.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::fake_vllm::FakeVllm;

/// A profiles directory holding one profile for the test model's noul questions.
pub fn profiles_dir(tag: &str, profile: &Value) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("systemone-profiles-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("p.json"), profile.to_string()).expect("write profile");
    dir
}

/// The `spam` profile for the test model's noul questions, with these conformal cutoffs and
/// automation threshold.
pub fn spam_profile(cutoffs: Value, threshold: Value) -> Value {
    json!({
        "name": "spam", "model": "glm-5.3-flash",
        "question": {"type": "noul", "labels": ["no", "yes"]},
        "temperature": 1.7, "bias": [0.3, -0.3],
        "conformal": {"coverage": 0.9, "cutoffs": cutoffs},
        "automation": {"epsilon": 0.1, "delta": 0.05, "threshold": threshold},
        "fit": {"rows": 500}, "provenance": {"note": "test"}
    })
}

/// A service against `fake` that loads the profiles in `dir`.
pub async fn service_with(fake: &FakeVllm, dir: &std::path::Path) -> super::Service {
    super::start(super::config(
        &fake.base_url(),
        &["--profiles-dir", dir.to_str().expect("utf-8")],
    ))
    .await
}

/// The 200 body of a request.
pub async fn answered(service: &super::Service, body: &Value) -> Value {
    let reply = super::ask(service, body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body
}
