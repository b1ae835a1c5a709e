//! End to end against a real llama.cpp `llama-server` serving Gemma 3 270M (`docs/backends.md`):
//! the official TypeSafe Python SDK works against the service unchanged, and a recording
//! proxy (`tests/live/setup/proxy.rs`) between the SDK and the service sees what the SDK put on
//! the wire (zstd bodies).
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: base URL of a llama-server with Gemma 3 270M, ending in `/v1`
//!   (`scripts/start-llama.sh` starts one and prints it);
//! * `SYSTEMONE_PYTHON`: a Python with `typesafe-sdk[zstd]==0.7.5` installed.
//!
//! Without them the test fails with a message that says so; it never skips. The service
//! listens on 127.0.0.1:0; `tests/live/setup/llama.rs` has the setup and the shape checks.

use crate::support;
use std::time::Instant;

use serde_json::json;

use crate::setup::llama::{
    answer, answer_ids, assert_request_id, backend_turn, check_answer, check_usage, llama_config,
    num, MODEL, NO_YES,
};
use crate::setup::proxy::{seen_for, Proxy};
use crate::setup::sdk::{run_typesafe_script, scenario};

/// Proves the official TypeSafe Python SDK (`typesafe-sdk` 0.7.5, pointed at the service with
/// `TYPESAFE_BASE_URL` and any `TYPESAFE_API_KEY`) works unchanged: a noul/choice/score round
/// trip parses into the SDK's answer types with the values the service sent (and in the
/// contract's shapes); a body over 1 KiB goes over the wire zstd-compressed (a recording
/// proxy between SDK and service sees `Content-Encoding: zstd` and the zstd magic, and the
/// service answers it) while the small body goes uncompressed; an 11-option choice surfaces
/// as the SDK's `TypeSafeUnprocessableEntityError` whose message names the field path; and
/// `response.request_id` (and the error's) is `req_<hex>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_round_trips_compresses_and_surfaces_422s() {
    let python = crate::setup::sdk::sdk_python();
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = support::start(llama_config(&url, &["--release-date", "2025-08-14"])).await;
    let front = Proxy::start(format!("http://{}", service.addr)).await;
    let lines = run_typesafe_script(&python, "system_one.py", front.url()).await;
    let seen = front.seen();

    // Round trip: the SDK's parsed answers are the service's, in the contract's shapes.
    let trip = scenario(&lines, "roundtrip");
    let raw = &trip["raw"];
    let request_id = trip["request_id"].as_str().expect("response.request_id");
    assert_request_id(request_id);
    assert_eq!(trip["x_request_id"], request_id);
    assert_eq!(trip["model"], MODEL);
    assert_eq!(answer_ids(raw), ["refund", "team", "urgency"]);
    check_answer(answer(raw, "refund"), "noul", &NO_YES);
    let team = check_answer(answer(raw, "team"), "choice", &["billing", "bug", "sales"]);
    let urgency = check_answer(answer(raw, "urgency"), "score", &["Routine", "Soon", "Now"]);
    check_usage(raw, 3);
    assert_eq!(num(&trip["noul"]), num(&answer(raw, "refund")["noul"]));
    assert_eq!(trip["choice"], answer(raw, "team")["choice"]);
    assert_eq!(
        trip["choice_probabilities"]
            .as_object()
            .expect("choice probabilities")
            .values()
            .map(num)
            .collect::<Vec<_>>(),
        team
    );
    assert_eq!(num(&trip["score"]), num(&answer(raw, "urgency")["score"]));
    assert_eq!(
        trip["score_probabilities"]
            .as_object()
            .expect("score probabilities")
            .values()
            .map(num)
            .collect::<Vec<_>>(),
        urgency
    );
    assert_eq!(trip["score_legend"], answer(raw, "urgency")["legend"]);
    assert_eq!(trip["usage"]["output_tokens"], 3);
    let plain = seen_for(&seen, "roundtrip");
    assert_eq!((plain.path.as_str(), plain.status), ("/v1/systemone", 200));
    assert_eq!(
        plain.content_encoding, None,
        "a body under 1 KiB goes uncompressed"
    );
    assert!(
        plain.len < 1024 && plain.head.first() == Some(&b'{'),
        "{plain:?}"
    );

    // A body over 1 KiB: compressed on the wire, answered by the service.
    let big = scenario(&lines, "compressed");
    assert_eq!(big["zstd_available"], true, "the SDK has zstd: {big}");
    assert_request_id(big["request_id"].as_str().expect("request_id"));
    check_answer(answer(&big["raw"], "refund"), "noul", &NO_YES);
    check_usage(&big["raw"], 1);
    let zstd = seen_for(&seen, "compressed");
    assert_eq!(zstd.status, 200, "{zstd:?}");
    assert_eq!(zstd.content_encoding.as_deref(), Some("zstd"), "{zstd:?}");
    assert_eq!(
        zstd.head,
        [0x28, 0xB5, 0x2F, 0xFD],
        "the body is a zstd frame"
    );
    let state_bytes = big["state_bytes"].as_u64().expect("state_bytes") as usize;
    assert!(
        state_bytes >= 1024 && zstd.len < state_bytes,
        "{} compressed bytes for a {state_bytes}-byte state",
        zstd.len
    );

    // 40 options on Gemma 3 (10 single-token labels): the numerals 00–39, read as a trie
    // (root 0–3, then four nodes of the second digit), 40 probabilities back.
    let forty = scenario(&lines, "forty");
    let p = forty["probabilities"].as_object().expect("probabilities");
    assert_eq!(p.len(), 40, "{forty}");
    let sum: f64 = p.values().map(|v| v.as_f64().expect("p")).sum();
    assert!((sum - 1.0).abs() < 1e-9, "{sum}");
    assert!(p.contains_key(forty["choice"].as_str().expect("choice")));
    // Five node reads; a node whose digits are not all in llama.cpp's raw top-K takes a
    // second (post-sampling) request.
    let requests = forty["raw"]["usage"]["upstream_requests"]
        .as_u64()
        .expect("usage");
    assert!(
        (5..=10).contains(&requests),
        "{requests} upstream requests for 5 nodes"
    );
    assert_eq!(seen_for(&seen, "forty").status, 200);

    // A 422 surfaces as the SDK's UnprocessableEntity error naming the field.
    let invalid = scenario(&lines, "invalid");
    assert_eq!(
        invalid["raised"], "TypeSafeUnprocessableEntityError",
        "{invalid}"
    );
    assert_eq!(invalid["status"], 422);
    let message = invalid["message"].as_str().expect("message");
    assert!(
        message.contains("questions.team.criteria"),
        "the SDK's message names the field path: {message:?}"
    );
    assert_eq!(
        invalid["body"]["error"]["code"],
        "system_one_too_many_options"
    );
    assert_request_id(invalid["request_id"].as_str().expect("error request_id"));
    assert_eq!(seen_for(&seen, "invalid").status, 422);
    // models.list(): the SDK parses every name (the alias too) and its string release_date.
    let models = scenario(&lines, "models");
    assert_eq!(
        models["models"],
        json!([
            {"name": "gemma-3-270m", "release_date": "2025-08-14"},
            {"name": "jev-latest", "release_date": "2025-08-14"},
        ]),
        "{models}"
    );
    assert_eq!(seen_for(&seen, "models").status, 200);
    eprintln!(
        "sdk: 5 scenarios through the Python SDK in {:.2?}",
        started.elapsed()
    );
}
