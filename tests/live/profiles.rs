//! Server-side calibration profiles through the official Python SDK (`SYSTEMONE_PYTHON`):
//! the SDK names a profile in `extra_body`. Profiles over plain HTTP are in the hermetic
//! tier (`tests/hermetic/profiles.rs`).

use serde_json::{json, Value};

use crate::setup::sdk::sdk_python;
use crate::support::fake_vllm::FakeVllm;
use crate::support::profiles::{answered, profiles_dir, service_with, spam_profile};

/// The official Python SDK names the profile through `extra_body` and parses answers that
/// carry the profile's extra keys: its noul is the profile-calibrated value the service
/// sends over plain HTTP for the same request, and the uncovered choice the default one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_names_a_profile_in_extra_body() {
    let fake = FakeVllm::start().await;
    let dir = profiles_dir("sdk", &spam_profile(json!([0.5]), json!(0.6)));
    let service = service_with(&fake, &dir).await;
    let stdout = crate::setup::sdk::run_program(
        sdk_python(),
        vec!["tests/sdk/profile.py".into()],
        vec![
            ("TYPESAFE_BASE_URL", service.url("")),
            ("TYPESAFE_API_KEY", "sk-any-value-works".into()),
        ],
    )
    .await;
    let sdk: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let direct = answered(
        &service,
        &json!({
            "state": {"subject": "WIN A PRIZE", "body": "click here"},
            "questions": {
                "spam": {"type": "noul", "instructions": "Is this email spam?"},
                "kind": {"type": "choice", "criteria": {"spam": null, "ham": null, "news": null}}
            },
            "calibration": "spam"
        }),
    )
    .await;
    assert_eq!(direct["answers"]["spam"]["calibration"], "spam", "{direct}");
    assert_eq!(sdk["noul"], direct["answers"]["spam"]["noul"], "{sdk}");
    assert_eq!(
        sdk["kind"], direct["answers"]["kind"]["probabilities"],
        "{sdk}"
    );
    assert!(sdk["request_id"]
        .as_str()
        .is_some_and(|id| id.starts_with("req_")));
    std::fs::remove_dir_all(&dir).ok();
}
