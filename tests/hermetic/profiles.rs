//! Server-side calibration profiles over HTTP (fake vLLM backend, service on port 0): a
//! request naming a profile gets its temperature and bias on the questions it covers, with
//! `prediction_set` and `automate`; everything else is answered as without it; bad names
//! and combinations are 422s that send nothing upstream.

use crate::support;

use crate::support::fake_vllm::FakeVllm;
use crate::support::profiles::{answered, profiles_dir, service_with, spam_profile};
use serde_json::{json, Value};
use systemone::calibration::fit;

fn request(extra: Value) -> Value {
    let mut body = json!({
        "state": {"subject": "WIN A PRIZE", "body": "click here"},
        "questions": {
            "spam": {"type": "noul", "instructions": "Is this email spam?"},
            "kind": {"type": "choice", "criteria": {"spam": null, "ham": null, "news": null}},
            "other_noul": {"type": "noul", "instructions": "Is it written in English?"}
        }
    });
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_recalibrates_the_questions_it_covers_and_nothing_else() {
    let fake = FakeVllm::start().await;
    let dir = profiles_dir("cover", &spam_profile(json!([0.5]), json!(0.6)));
    let service = service_with(&fake, &dir).await;

    let raw = answered(&service, &request(json!({"temperature": 1}))).await;
    let plain = answered(&service, &request(json!({}))).await;
    let cal = answered(&service, &request(json!({"calibration": "spam"}))).await;

    // Both nouls are covered (same type, same options): softmax(ln p / T + b).
    for id in ["spam", "other_noul"] {
        let p_raw = raw["answers"][id]["noul"].as_f64().expect("raw noul");
        let want = fit::apply(&[1.0 - p_raw, p_raw], 1.7, &[0.3, -0.3]);
        let a = &cal["answers"][id];
        let got = a["noul"].as_f64().expect("noul");
        assert!((got - want[1]).abs() < 1e-12, "{id}: {got} vs {want:?}");
        assert_eq!(a["temperature"], 1.7);
        assert_eq!(a["calibration"], "spam");
        let confidence = systemone::calibration::confidence(&want);
        assert!((a["confidence"].as_f64().expect("confidence") - confidence).abs() < 1e-12);
        // The set holds each option whose 1 − p is within 0.5, as booleans.
        let mut set = Vec::new();
        if 1.0 - want[0] <= 0.5 {
            set.push(json!(false));
        }
        if 1.0 - want[1] <= 0.5 {
            set.push(json!(true));
        }
        assert_eq!(a["prediction_set"], Value::Array(set), "{a}");
        assert_eq!(a["automate"], want[0].max(want[1]) >= 0.6, "{a}");
        assert_eq!(a["option_mass"], raw["answers"][id]["option_mass"]);
    }
    // Counted per profile and automate flag (the profile name is the operator's).
    let automated = ["spam", "other_noul"]
        .iter()
        .filter(|id| cal["answers"][**id]["automate"] == true)
        .count();
    let metrics = support::metrics(&service).await;
    for (flag, count) in [("true", automated), ("false", 2 - automated)] {
        let series =
            format!("systemone_profile_answers_total{{automate=\"{flag}\",profile=\"spam\"}}");
        if count == 0 {
            assert!(!metrics.contains(&series), "{series} in {metrics}");
        } else {
            assert!(
                metrics.contains(&format!("{series} {count}\n")),
                "{series} {count} not in {metrics}"
            );
        }
    }
    // The choice is not covered: byte for byte the default answer, without profile keys.
    assert_eq!(cal["answers"]["kind"], plain["answers"]["kind"]);
    assert!(cal["answers"]["kind"].get("prediction_set").is_none());
    // Key order of a covered answer: the contract's keys, then the profile's.
    let keys: Vec<&str> = cal["answers"]["spam"]
        .as_object()
        .expect("answer")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "type",
            "noul",
            "confidence",
            "temperature",
            "option_mass",
            "calibration",
            "prediction_set",
            "automate"
        ]
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutoffs_and_threshold_at_their_extremes() {
    let fake = FakeVllm::start().await;
    // Cutoff 1: every option is in the set; threshold 0: every answer is automated.
    let dir = profiles_dir("wide", &spam_profile(json!([1.0]), json!(0.0)));
    let service = service_with(&fake, &dir).await;
    let cal = answered(&service, &request(json!({"calibration": "spam"}))).await;
    assert_eq!(
        cal["answers"]["spam"]["prediction_set"],
        json!([false, true])
    );
    assert_eq!(cal["answers"]["spam"]["automate"], true);
    std::fs::remove_dir_all(&dir).ok();
    // Cutoff 0 and no threshold: empty sets (no option is that certain), never automated.
    let dir = profiles_dir("narrow", &spam_profile(json!([0.0]), Value::Null));
    let service = service_with(&fake, &dir).await;
    let cal = answered(&service, &request(json!({"calibration": "spam"}))).await;
    assert_eq!(cal["answers"]["spam"]["prediction_set"], json!([]));
    assert_eq!(cal["answers"]["spam"]["automate"], false);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calibration_fields_are_422_and_send_nothing() {
    let fake = FakeVllm::start().await;
    let dir = profiles_dir("bad", &spam_profile(json!([0.5]), json!(0.6)));
    let service = service_with(&fake, &dir).await;
    let cases = [
        (
            json!({"calibration": "nope"}),
            "system_one_unknown_calibration",
            "not_configured",
            vec!["\"nope\"", "spam"],
        ),
        (
            json!({"calibration": 3}),
            "system_one_bad_calibration",
            "invalid",
            vec!["a string", "number"],
        ),
        (
            json!({"calibration": "spam", "temperature": 2}),
            "system_one_bad_calibration",
            "invalid",
            vec!["temperature", "cannot both"],
        ),
    ];
    for (extra, code, kind, words) in cases {
        let reply = support::ask(&service, &request(extra)).await;
        support::assert_error(&reply, 422, code, kind);
        assert_eq!(
            reply.body["detail"][0]["loc"],
            json!(["body", "calibration"])
        );
        for w in words {
            assert!(reply.message().contains(w), "{} lacks {w}", reply.message());
        }
    }
    // null is absent: answered as without a profile.
    let body = answered(&service, &request(json!({"calibration": null}))).await;
    assert!(body["answers"]["spam"].get("calibration").is_none());
    // Only that request reached the backend (3 questions, one read each).
    assert_eq!(fake.chat_requests(), 3);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_profile_for_a_model_not_served_refuses_to_start() {
    let mut profile = spam_profile(json!([0.5]), json!(0.6));
    profile["model"] = json!("another-model");
    let dir = profiles_dir("unserved", &profile);
    let config = support::config(
        "http://127.0.0.1:9/v1",
        &["--profiles-dir", dir.to_str().expect("utf-8")],
    );
    let err = systemone::build_state(&config).expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("another-model") && text.contains("does not serve"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
