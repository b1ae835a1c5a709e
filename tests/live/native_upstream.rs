//! A real native upstream: a second `systemone` process (the service's own binary, over the
//! real llama-server with Gemma 3 270M) is the native System One server, and a front service
//! reaches it with `--backend systemone`.
//!
//! * The official TypeSafe Python SDK (`tests/sdk/system_one.py`, as `tests/live/llamacpp_sdk.rs`
//!   drives it) gets the same numbers through the front as directly from the upstream (to
//!   `setup::SAME_READ`: two requests' reads of the same prompts),
//!   a 40-option choice and a zstd-compressed body included; its 256-option choice is a 422
//!   from the front that never reaches the upstream (a recording proxy between them counts).
//! * Escalation with the real llama-server as the cheap model and the native upstream (with
//!   another calibration formula, so its answers differ) as the strong one: exactly the
//!   questions under the threshold are asked again, in one upstream request, and the
//!   answers carry the right `model`.
//!
//! Needs `SYSTEMONE_LLAMA_URL` and `SYSTEMONE_PYTHON` (with `typesafe-sdk[zstd]==0.7.5`), as
//! `scripts/test.sh` exports them; fails without them, never skips.

use crate::support;
use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::setup::assert_same_read;
use crate::setup::llama::{backend_turn, num, MODEL};
use crate::setup::proxy::Proxy;
use crate::setup::sdk::{run_typesafe_script, scenario};
use crate::support::ask;
use crate::support::native_model;
use crate::support::{Reply, Service};

/// The upstream `systemone` process; killed when dropped.
struct Upstream {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Upstream {
    /// The binary serving Gemma through llama-server at `llama`, without the prompt cache,
    /// with `extra` flags; its address read from its `listening` log line.
    async fn start(llama: &str, extra: &[&str]) -> Upstream {
        let mut args = vec![
            "--backend",
            "llamacpp",
            "--backend-url",
            llama,
            "--model",
            MODEL,
        ];
        args.extend(["--token-table", "gemma-3", "--cache-prompt", "false"]);
        args.extend(["--token-check-interval-secs", "0"]);
        args.extend([
            "--read-timeout-secs",
            "300",
            "--request-timeout-secs",
            "900",
        ]);
        args.extend(extra);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let (child, addr) = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            support::spawn_serve(&args)
        })
        .await
        .expect("stderr reader");
        Upstream { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Every number of `got` equals `want`'s (two requests' reads: `assert_same_read`), and
/// every other value is the same.
fn assert_same_numbers(got: &Value, want: &Value, at: &str) {
    match (got, want) {
        (Value::Number(_), Value::Number(_)) => {
            let (g, w) = (num(got), num(want));
            assert_same_read(g, w, at);
        }
        (Value::Object(g), Value::Object(w)) => {
            let keys: Vec<&String> = g.keys().collect();
            assert_eq!(keys, w.keys().collect::<Vec<_>>(), "{at}: keys");
            for (k, v) in g {
                assert_same_numbers(v, &w[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(got, want, "{at}"),
    }
}

/// The front service: one model `front` on the native upstream behind `proxy`.
async fn front(proxy: &Proxy) -> Service {
    let url = format!("{}/v1", proxy.url());
    let flags = ["--upstream-model", MODEL, "--request-timeout-secs", "900"];
    support::start(support::native_config(&url, "front", &flags)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_gets_the_same_numbers_through_the_front_as_directly() {
    let python = crate::setup::sdk::sdk_python();
    let (llama, _turn) = backend_turn().await;
    let upstream = Upstream::start(&llama, &[]).await;
    let proxy = Proxy::start(upstream.url()).await;
    let service = front(&proxy).await;
    let direct = run_typesafe_script(&python, "system_one.py", upstream.url()).await;
    let through =
        run_typesafe_script(&python, "system_one.py", format!("http://{}", service.addr)).await;
    for name in ["roundtrip", "compressed", "forty"] {
        let (got, want) = (
            &scenario(&through, name)["raw"],
            &scenario(&direct, name)["raw"],
        );
        assert_eq!(got["model"], json!(MODEL), "{name}: the model that served");
        assert_same_numbers(&got["answers"], &want["answers"], name);
        assert_eq!(
            got["usage"]["input_tokens"], want["usage"]["input_tokens"],
            "{name}"
        );
    }
    let forty = &scenario(&through, "forty")["raw"]["answers"]["product"]["probabilities"];
    assert_eq!(forty.as_object().map(|p| p.len()), Some(40));
    let invalid = scenario(&through, "invalid");
    assert_eq!(
        (invalid["raised"].as_str(), invalid["status"].as_u64()),
        (Some("TypeSafeUnprocessableEntityError"), Some(422)),
        "{invalid}"
    );
    let forwarded: Vec<_> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.path == "/v1/systemone")
        .collect();
    assert_eq!(
        forwarded.len(),
        3,
        "roundtrip, compressed, forty; never the 422: {forwarded:?}"
    );
}

/// Four questions about one state, answered by `service`.
fn four_questions() -> Value {
    json!({
        "state": "Invoice 1042 was charged twice to my card and nobody answers the phone.",
        "questions": {
            "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
            "team": {"type": "choice", "instructions": "Which team handles it?", "criteria": {"billing": null, "bug": null, "sales": null, "legal": null}},
            "angry": {"type": "noul", "instructions": "Is the customer angry?"},
            "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["Routine", "Soon", "Now"]}
        }
    })
}

/// A registry: `cheap` on llama-server, `strong` on the native upstream behind `proxy`;
/// `cheap` escalates below `below` when given.
async fn escalating_front(llama: &str, proxy: &Proxy, below: Option<f64>) -> Service {
    let escalation = below.map_or(String::new(), |b| {
        format!("escalate_to = \"strong\"\nescalate_below = {b}\n")
    });
    let cheap = format!(
        "\n[[model]]\nname = \"cheap\"\nbackend = \"llamacpp\"\nbackend_url = \"{llama}\"\n\
         upstream_model = \"{MODEL}\"\ntoken_table = \"gemma-3\"\ncache_prompt = false\n\
         token_check_interval_secs = 0\n{escalation}"
    );
    let strong_url = format!("{}/v1", proxy.url());
    let strong = native_model(
        "strong",
        &strong_url,
        &format!("upstream_model = \"{MODEL}\""),
    );
    let flags = [
        "--read-timeout-secs",
        "300",
        "--request-timeout-secs",
        "900",
    ];
    support::start(support::registry_config(&(cheap + &strong), &flags)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalation_re_asks_exactly_the_unsure_questions_of_the_native_upstream() {
    let (llama, _turn) = backend_turn().await;
    let upstream = Upstream::start(&llama, &["--calibration", "glm-5.3"]).await;
    let proxy = Proxy::start(upstream.url()).await;
    // The cheap model's confidences, then a threshold between the second and third.
    let plain = escalating_front(&llama, &proxy, None).await;
    let first = ask(&plain, &four_questions()).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let mut ranked: Vec<(f64, String)> = first.body["answers"]
        .as_object()
        .expect("answers")
        .iter()
        .map(|(id, a)| (num(&a["confidence"]), id.clone()))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(
        ranked[1].0 < ranked[2].0,
        "distinct confidences: {ranked:?}"
    );
    let below = (ranked[1].0 + ranked[2].0) / 2.0;
    let unsure: Vec<&str> = ranked[..2].iter().map(|(_, id)| id.as_str()).collect();

    let service = escalating_front(&llama, &proxy, Some(below)).await;
    let reply = ask(&service, &four_questions()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let forwarded = proxy
        .seen()
        .into_iter()
        .filter(|s| s.path == "/v1/systemone")
        .count();
    assert_eq!(
        forwarded, 1,
        "one upstream request for both unsure questions"
    );
    assert_eq!(reply.header("x-systemone-escalated"), Some("2"));
    // The strong model's answers to the unsure questions, asked of it directly.
    let mut subset = four_questions();
    let questions = subset["questions"].as_object_mut().expect("questions");
    questions.retain(|id, _| unsure.contains(&id.as_str()));
    let direct = Reply::read(
        reqwest::Client::new()
            .post(format!("{}/v1/systemone", upstream.url()))
            .json(&subset)
            .send()
            .await
            .expect("upstream answers"),
    )
    .await;
    assert_eq!(direct.status, 200, "{}", direct.text);
    for (id, answer) in reply.body["answers"].as_object().expect("answers") {
        if unsure.contains(&id.as_str()) {
            assert_eq!(answer["model"], json!("strong"), "{id}");
            let mut got = answer.clone();
            got.as_object_mut().expect("answer").shift_remove("model");
            assert_same_numbers(&got, &direct.body["answers"][id], id);
            assert_ne!(
                answer["confidence"], first.body["answers"][id]["confidence"],
                "{id}: replaced"
            );
        } else {
            assert!(answer.get("model").is_none(), "{id}: the cheap model's");
            assert_same_numbers(answer, &first.body["answers"][id], id);
        }
    }
    let usage = &reply.body["usage"];
    let cheap_reads = first.body["usage"]["upstream_requests"]
        .as_u64()
        .expect("reads");
    assert_eq!(
        usage["upstream_requests"],
        json!(cheap_reads + 1),
        "{usage}"
    );
}
