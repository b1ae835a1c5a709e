//! End to end against a real llama.cpp `llama-server` serving Gemma 3 270M (`docs/backends.md`):
//! the llama.cpp dialect answers a noul, a choice and a score in the contract's shapes, fits
//! Gemma 3's ten single-token labels, and refuses what it cannot do (a 256th option,
//! images) before any upstream call, which a recording proxy (`tests/live/setup/proxy.rs`) in
//! front of llama-server sees.
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: base URL of a llama-server with Gemma 3 270M, ending in `/v1`
//!   (`scripts/start-llama.sh` starts one and prints it).
//!
//! Without it the tests fail with a message that says so; they never skip. Services listen
//! on 127.0.0.1:0; `tests/live/setup/llama.rs` has the setup and the shape checks.

use crate::support;
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::setup::llama::{
    answer, ask, assert_close, assert_request_id_headers, backend_turn, check_answer, check_mixed,
    check_usage, default_temperature, llama_config, llama_root, mixed_body, num, MODEL,
};
use crate::setup::proxy::Proxy;

/// Proves that a noul, a choice and a score asked together of the real Gemma backend come
/// back 200 in the contract's shapes: answers in question order; `noul` in [0, 1];
/// `probabilities` keyed by label (choice) or `"0"`… (score) in option order, summing to 1;
/// `choice` the first argmax; `score` = Σ i·p_i with its `legend`; `confidence` =
/// 1 − H/ln n; the default temperature per option count; an `option_mass`; `model` as
/// llama-server reports it; usage counted from the backend (one read per question); and
/// both request-id headers as `req_<hex>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noul_choice_and_score_come_back_in_the_contracts_shapes() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = support::start(llama_config(&url, &[])).await;

    let reply = ask(&service, &mixed_body(None)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_request_id_headers(&reply);
    assert_eq!(reply.body["model"], MODEL, "{}", reply.body);
    let answers = check_mixed(&reply.body);
    for (id, p) in &answers {
        let t = num(&answer(&reply.body, id)["temperature"]);
        assert_close(t, default_temperature(p.len()), 1e-12, id);
    }
    check_usage(&reply.body, 3);
    eprintln!(
        "shapes: one 3-question request answered in {:.2?} (service start included)",
        started.elapsed()
    );
}

/// Proves Gemma 3's label capacity end to end: a 10-option choice (labels 0–9, all single
/// tokens) is answered 200 with ten probabilities in one read; with `--max-options 300`, a
/// 256-option choice is a 422 `system_one_too_many_options` whose message names the
/// capacity 255 (10 single-token labels, then the numerals 000–254) and whose `detail`
/// points at the criteria; `images` sent to this text-only model is a 422
/// `system_one_images_unsupported`. Neither 422 sends anything upstream (a proxy in front of
/// llama-server sees no request at all until the 10-option question).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_options_fit_while_256_options_and_images_are_refused_before_any_upstream_call() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let proxy = Proxy::start(llama_root(&url)).await;
    let service = support::start(llama_config(
        &format!("{}/v1", proxy.url()),
        // Checks off: the proxy then sees the reads only (the token-table check runs in
        // the background from the start and would go through it too).
        &["--max-options", "300", "--token-check-interval-secs", "0"],
    ))
    .await;
    const LABELS: [&str; 11] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliett", "kilo",
    ];
    let choice_of = |n: usize| {
        let criteria: Map<String, Value> = (0..n)
            .map(|i| LABELS.get(i).map_or(format!("word-{i}"), |l| l.to_string()))
            .map(|l| (l, Value::Null))
            .collect();
        json!({
            "state": "The caller spelled the word with the NATO alphabet.",
            "questions": {"word": {
                "type": "choice",
                "instructions": "Which code word comes first in the alphabet?",
                "criteria": criteria
            }}
        })
    };

    let over = ask(&service, &choice_of(256)).await;
    assert_eq!(over.status, 422, "{}", over.body);
    assert_request_id_headers(&over);
    let error = &over.body["error"];
    assert_eq!(
        error["code"], "system_one_too_many_options",
        "{}",
        over.body
    );
    assert_eq!(
        over.header("x-systemone-error-code"),
        Some("system_one_too_many_options")
    );
    assert_eq!(error["type"], "invalid");
    let message = error["message"].as_str().expect("message");
    let numbers: Vec<&str> = message
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(
        numbers.contains(&"255") && numbers.contains(&"256") && numbers.contains(&"10"),
        "the message names the capacity 255, its 10 single-token labels and the 256 options sent: {message:?}"
    );
    assert!(message.contains("questions.word.criteria"), "{message:?}");
    assert_eq!(
        over.body["detail"][0]["loc"],
        json!(["body", "questions", "word", "criteria"])
    );

    let mut with_image = choice_of(2);
    with_image["images"] = json!([
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    ]);
    let images = ask(&service, &with_image).await;
    assert_eq!(images.status, 422, "{}", images.body);
    assert_eq!(
        images.body["error"]["code"], "system_one_images_unsupported",
        "{}",
        images.body
    );
    assert_eq!(
        images.header("x-systemone-error-code"),
        Some("system_one_images_unsupported")
    );
    assert_eq!(images.body["detail"][0]["loc"], json!(["body", "images"]));
    // The model's upkeep reads the context window (`/props`) on its own; requests send
    // nothing else.
    let sent: Vec<_> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.path != "/props")
        .collect();
    assert!(
        sent.is_empty(),
        "a 422 sends nothing upstream: {:?}",
        proxy.seen()
    );

    let ten = ask(&service, &choice_of(10)).await;
    assert_eq!(ten.status, 200, "{}", ten.body);
    let p = check_answer(answer(&ten.body, "word"), "choice", &LABELS[..10]);
    assert_eq!(p.len(), 10);
    assert_close(
        num(&answer(&ten.body, "word")["temperature"]),
        default_temperature(10),
        1e-12,
        "T(10)",
    );
    check_usage(&ten.body, 1);
    let chat = proxy
        .seen()
        .iter()
        .filter(|s| s.path.ends_with("/chat/completions"))
        .count();
    assert!(
        chat >= 1,
        "the 10-option question was read: {:?}",
        proxy.seen()
    );
    eprintln!(
        "capacity: 256 options and images refused, 10 options answered in {:.2?}",
        started.elapsed()
    );
}
