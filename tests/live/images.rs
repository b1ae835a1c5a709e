//! Images through the official SDKs (`SYSTEMONE_PYTHON`, `SYSTEMONE_NPM_SDK`): the Python
//! SDK sends an image through its multipart transport, and the npm SDK
//! (`@typesafe-ai/sdk` 0.6.0) does a noul/choice/score round trip, against the fake vLLM.
//! What the service does with images itself is in the hermetic tier
//! (`tests/hermetic/images.rs`).

use std::time::Duration;

use serde_json::{json, Value};

use crate::setup::sdk::{node, npm_sdk, run_program, sdk_python};
use crate::support;
use crate::support::fake_vllm::FakeVllm;
use systemone::question::PREAMBLE;

/// The official Python SDK puts an `Image` in the state; it goes out as the SDK's multipart
/// body (zstd-compressed: it is over 1 KiB) and reaches the backend as the first content part,
/// the text (with the image's reference where the SDK put it) after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_sends_an_image_through_multipart() {
    let fake = FakeVllm::start().await;
    fake.set_delay(Duration::from_millis(20));
    let service = support::start(support::config(&fake.base_url(), &["--vision"])).await;
    let stdout = run_program(
        sdk_python(),
        vec!["tests/sdk/image_multipart.py".into()],
        vec![
            ("TYPESAFE_BASE_URL", service.url("")),
            ("TYPESAFE_API_KEY", "sk-test-any-key".into()),
        ],
    )
    .await;
    let out: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let image = out["image_base64"].as_str().expect("image");
    let reference = out["reference"].as_str().expect("reference");
    assert!(reference.starts_with("<image:"), "{reference}");
    // Over 1 KiB, so the SDK compressed the multipart body with zstd (test.sh installs the
    // `zstd` extra): the service read a compressed multipart body.
    assert!(
        out["image_bytes"].as_u64().expect("size") > out["min_compressed"].as_u64().expect("min")
    );
    assert_eq!(
        out["zstd_available"], true,
        "the SDK's zstd extra is missing: pip install 'typesafe-sdk[zstd]==0.7.5'"
    );

    let bodies = fake.chat_bodies();
    assert_eq!(bodies.len(), 2, "one read per question");
    assert_eq!(out["raw"]["usage"]["upstream_requests"], json!(2));
    for body in &bodies {
        let parts = body["messages"][0]["content"].as_array().expect("parts");
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert_eq!(parts[0]["type"], "image_url");
        assert_eq!(
            parts[0]["image_url"]["url"].as_str(),
            Some(format!("data:image/png;base64,{image}").as_str())
        );
        assert_eq!(parts[1]["type"], "text");
        let text = parts[1]["text"].as_str().expect("text");
        assert!(text.starts_with(PREAMBLE));
        assert!(
            text.contains(reference),
            "the reference stays in the state: {text}"
        );
    }
    // Staged: the first question went alone, then the second.
    assert!(bodies[0]["messages"][0]["content"][1]["text"]
        .as_str()
        .is_some_and(|t| t.contains("Is the parcel in the picture damaged?")));
    assert_eq!(fake.max_in_flight(), 1);
    assert!(out["noul"]
        .as_f64()
        .is_some_and(|p| (0.0..=1.0).contains(&p)));
    assert!(["parcel", "letter", "other"].contains(&out["choice"].as_str().expect("choice")));
    assert!(out["request_id"]
        .as_str()
        .is_some_and(|id| id.starts_with("req_")));
}

/// `@typesafe-ai/sdk` 0.6.0 from npm asks a noul, a choice and a score in one call and gets
/// typed answers back, in question order, with the request id it reads from the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_npm_sdk_does_a_noul_choice_score_round_trip() {
    let prefix = npm_sdk();
    let (fake, service) = support::setup(&[]).await;
    let stdout = run_program(
        node(),
        vec!["tests/sdk/npm_roundtrip.cjs".into()],
        vec![
            ("TYPESAFE_BASE_URL", service.url("")),
            ("TYPESAFE_API_KEY", "sk-test-any-key".into()),
            (
                "NODE_PATH",
                prefix.join("node_modules").display().to_string(),
            ),
        ],
    )
    .await;
    let out: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(out["sdk_version"], "0.6.0");
    assert_eq!(out["status"], 200);
    let id = out["request_id"]
        .as_str()
        .expect("request id read by the SDK");
    assert!(id.starts_with("req_"));
    assert_eq!(out["x_request_id"].as_str(), Some(id));
    let data = &out["data"];
    let answers = data["answers"].as_object().expect("answers");
    assert_eq!(
        answers.keys().collect::<Vec<_>>(),
        ["refund", "team", "urgency"]
    );
    let noul = &answers["refund"];
    assert_eq!(noul["type"], "noul");
    assert!(noul["noul"]
        .as_f64()
        .is_some_and(|p| (0.0..=1.0).contains(&p)));
    let choice = &answers["team"];
    assert_eq!(choice["type"], "choice");
    let probs = choice["probabilities"].as_object().expect("probabilities");
    assert_eq!(
        probs.keys().collect::<Vec<_>>(),
        ["billing", "bug", "sales"]
    );
    let sum: f64 = probs.values().filter_map(Value::as_f64).sum();
    assert!((sum - 1.0).abs() < 1e-9, "{sum}");
    assert!(probs.contains_key(choice["choice"].as_str().expect("choice")));
    let score = &answers["urgency"];
    assert_eq!(score["type"], "score");
    assert!(score["score"]
        .as_f64()
        .is_some_and(|s| (0.0..=2.0).contains(&s)));
    assert_eq!(
        score["legend"],
        json!({"0": "Routine", "1": "Soon", "2": "Now"})
    );
    assert_eq!(data["model"], "glm-5.3-flash");
    assert_eq!(data["usage"]["upstream_requests"], json!(3));
    assert_eq!(fake.chat_requests(), 3);
    // The state went out as JSON, not a string.
    let text = fake.chat_bodies()[0]["messages"][0]["content"]
        .as_str()
        .expect("text content without images")
        .to_string();
    assert!(
        text.contains("\"ticket\": \"Invoice 1042 was charged twice to my card.\""),
        "{text}"
    );
}
