//! API keys never reach the logs (nor errors).
//!
//! It captures the binary's TRACE log (`support::log::capture`, as
//! `tests/hermetic/robustness_privacy.rs` does): every event and span, text and JSON, in memory.
//! Requests with the right keys (from `SYSTEMONE_API_KEYS`-style `--api-keys`, a keys
//! file's sha256 and its `key_env`), a wrong key, no key, and keys refused by their
//! requests-per-minute and daily limits each leave a "request finished" line naming the
//! key (`key=<name>`), but neither the configured keys nor the wrong bearer ever appear in
//! a log line, an error body or a response header.
//!
//! The rerank routes (`/v2/rerank`, `/v1/rerank`) go through the same keys: their calls
//! leave the same "request finished" line naming the key, and neither the keys nor the
//! caller's query and documents (canary strings, also in a refused body and a truncated
//! document) ever reach a log line, `/metrics`, an error body or a header. The same holds
//! for `/v1/decisions` (its input, instructions, choices and names, also in a refused
//! body). Nor does a state the backend echoes back in its error text: that error is
//! logged by status, length and hash only. The `openai` dialect leaves its
//! probe's line and the count of options missing from a top-K, and none of the caller's
//! state, labels or question ids, nor the backend key.

use crate::support;
use serde_json::json;

use crate::support::fake_vllm::FakeVllm;
use crate::support::{ask_as, sha256_hex};

const LIST_KEY: &str = "sk-canary-list-7f3a";
const FILE_KEY: &str = "sk-canary-file-7f3a";
const ENV_KEY: &str = "sk-canary-env-7f3a";
const WRONG_KEY: &str = "sk-canary-wrong-7f3a";
const ENV_VAR: &str = "SYSTEMONE_TEST_CANARY_KEY";
const QUERY_CANARY: &str = "canary-query-51c9";
const DOC_CANARY: &str = "canary-document-51c9";
const INPUT_CANARY: &str = "canary-input-8d2e";
const CHOICE_CANARY: &str = "canary-choice-8d2e";
const NAME_CANARY: &str = "canary-name-8d2e";
/// In a state the fake backend echoes back in its error text.
const ECHO_CANARY: &str = "canary-echoed-state-3b7f";
/// In the state, a label and a question id sent through the `openai` dialect.
const OPENAI_STATE_CANARY: &str = "canary-openai-state-6e1a";
const OPENAI_LABEL_CANARY: &str = "canary-openai-label-6e1a";
const OPENAI_ID_CANARY: &str = "canary-openai-id-6e1a";

/// POSTs `body` to the service's `path` with `Authorization: Bearer <bearer>` when given.
async fn rerank_as(
    service: &support::Service,
    path: &str,
    bearer: Option<&str>,
    body: &serde_json::Value,
) -> support::Reply {
    let mut request = service
        .client
        .post(service.url(path))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = bearer {
        request = request.bearer_auth(key);
    }
    support::Reply::read(request.send().await.expect("service answers")).await
}

#[test]
fn api_keys_never_reach_logs_errors_or_headers() {
    let log = support::log::capture();
    std::env::set_var(ENV_VAR, ENV_KEY);
    let hex = sha256_hex(FILE_KEY);
    let path = support::keys_file(
        &format!(
            "[[key]]\nname = \"file-key\"\nsha256 = \"{hex}\"\nrequests_per_minute = 1\n\n[[key]]\nname = \"env-key\"\nkey_env = \"{ENV_VAR}\"\ndaily_questions = 1\n"
        ),
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ids: Vec<(String, u16, &str)> = runtime.block_on(async {
        let fake = FakeVllm::start().await;
        let config = support::config(
            &fake.base_url(),
            &[
                "--api-keys",
                LIST_KEY,
                "--keys-file",
                path.to_str().expect("utf-8"),
            ],
        );
        let debug = format!("{config:?}");
        assert!(!debug.contains(LIST_KEY), "{debug}");
        tracing::info!(config = ?config, "configuration");
        let service = support::start(config).await;
        let body =
            json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "yes?"}}});
        let probes: [(Option<&str>, u16, &str); 7] = [
            (Some(LIST_KEY), 200, "key-1"),
            (Some(FILE_KEY), 200, "file-key"),
            (Some(FILE_KEY), 429, "file-key"),
            (Some(ENV_KEY), 200, "env-key"),
            (Some(ENV_KEY), 429, "env-key"),
            (Some(WRONG_KEY), 401, ""),
            (None, 403, ""),
        ];
        let mut ids = Vec::new();
        for (key, status, name) in probes {
            let reply = ask_as(&service, key, &body).await;
            assert_eq!(reply.status, status, "{key:?}");
            let id = reply
                .header("x-request-id")
                .expect("request id")
                .to_string();
            let everything = format!("{:?} {}", reply.headers, reply.text);
            for secret in [LIST_KEY, FILE_KEY, ENV_KEY, WRONG_KEY, &hex] {
                assert!(!everything.contains(secret), "{secret} in {everything}");
            }
            ids.push((id, status, name));
        }
        let long_doc = format!("{DOC_CANARY} ").repeat(40);
        let rerank = json!({"query": format!("{QUERY_CANARY}?"), "documents": [DOC_CANARY, long_doc], "max_tokens_per_doc": 64});
        let bad = json!({"query": QUERY_CANARY, "documents": [DOC_CANARY, 3]});
        let rerank_probes: [(&str, Option<&str>, &serde_json::Value, u16, &str); 5] = [
            ("/v2/rerank", Some(LIST_KEY), &rerank, 200, "key-1"),
            ("/v1/rerank", Some(LIST_KEY), &rerank, 200, "key-1"),
            ("/v2/rerank", Some(LIST_KEY), &bad, 422, "key-1"),
            ("/v2/rerank", Some(WRONG_KEY), &rerank, 401, ""),
            ("/v2/rerank", None, &rerank, 403, ""),
        ];
        for (path, key, body, status, name) in rerank_probes {
            let reply = rerank_as(&service, path, key, body).await;
            assert_eq!(reply.status, status, "{path} {key:?}: {}", reply.text);
            if status == 200 {
                assert!(reply.body["meta"]["warnings"].is_array(), "{}", reply.text);
            }
            let id = reply.header("x-request-id").expect("request id").to_string();
            let everything = format!("{:?} {}", reply.headers, reply.text);
            for secret in [LIST_KEY, WRONG_KEY, QUERY_CANARY, DOC_CANARY] {
                assert!(!everything.contains(secret), "{secret} in {everything}");
            }
            ids.push((id, status, name));
        }
        let decide = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": INPUT_CANARY}]}],
            "questions": [{"type": "choice", "name": NAME_CANARY, "instructions": format!("{INPUT_CANARY}?"),
                           "choices": [{"value": CHOICE_CANARY}, {"value": true, "description": CHOICE_CANARY}]}]});
        let refused = json!({"input": [{"type": "function_call", "call_id": INPUT_CANARY, "name": NAME_CANARY, "arguments": CHOICE_CANARY}],
            "questions": [{"type": "predicate", "name": NAME_CANARY, "instructions": INPUT_CANARY}]});
        let decisions_probes: [(Option<&str>, &serde_json::Value, u16, &str); 4] = [
            (Some(LIST_KEY), &decide, 200, "key-1"),
            (Some(LIST_KEY), &refused, 400, "key-1"),
            (Some(WRONG_KEY), &decide, 401, ""),
            (None, &decide, 403, ""),
        ];
        for (key, body, status, name) in decisions_probes {
            let reply = rerank_as(&service, "/v1/decisions", key, body).await;
            assert_eq!(reply.status, status, "/v1/decisions {key:?}: {}", reply.text);
            let id = reply.header("x-request-id").expect("request id").to_string();
            let mut everything = format!("{:?} {}", reply.headers, reply.text);
            if status == 200 {
                // The caller's own name and choice come back in its answer, and only there.
                assert_eq!(reply.body["answers"][0]["name"], NAME_CANARY, "{}", reply.text);
                everything = everything.replace(NAME_CANARY, "").replace(CHOICE_CANARY, "");
            }
            for secret in [LIST_KEY, WRONG_KEY, INPUT_CANARY, CHOICE_CANARY, NAME_CANARY] {
                assert!(!everything.contains(secret), "{secret} in {everything}");
            }
            ids.push((id, status, name));
        }
        // A backend whose error repeats the prompt: the caller's state is in its text.
        fake.set_fault(support::fake_vllm::Fault::EchoError);
        let echoed = json!({"state": ECHO_CANARY, "questions": {"q": {"type": "noul", "instructions": "yes?"}}});
        let reply = ask_as(&service, Some(LIST_KEY), &echoed).await;
        fake.set_fault(support::fake_vllm::Fault::None);
        assert_eq!(reply.status, 400, "{}", reply.text);
        assert_eq!(reply.body["error"]["code"], "system_one_upstream_rejected");
        assert!(!reply.text.contains(ECHO_CANARY), "{}", reply.text);
        ids.push((reply.header("x-request-id").expect("request id").to_string(), 400, "key-1"));
        ids.extend(openai_dialect_calls().await);
        let metrics = support::metrics(&service).await;
        assert!(metrics.contains("route=\"/v1/decisions\""), "{metrics}");
        assert!(metrics.contains("route=\"/v2/rerank\""), "{metrics}");
        assert!(metrics.contains("route=\"/v1/rerank\""), "{metrics}");
        for secret in [QUERY_CANARY, DOC_CANARY, INPUT_CANARY, CHOICE_CANARY, NAME_CANARY] {
            assert!(!metrics.contains(secret), "{secret} in /metrics");
        }
        for secret in [LIST_KEY, FILE_KEY, ENV_KEY, WRONG_KEY, &hex] {
            assert!(!metrics.contains(secret), "{secret} in /metrics");
        }
        ids
    });
    let text = log.text();
    assert!(text.contains("configuration"), "the config was logged");
    assert!(
        text.lines()
            .any(|l| l.contains("OpenAI-compatible host probed") && l.contains("post_bias")),
        "the openai dialect's probe is logged with its strategy"
    );
    assert!(
        text.lines().any(
            |l| l.contains("options missing from the backend's top-K") && l.contains("missing")
        ),
        "the missing options are logged by count"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("backend answered an error") && l.contains("body_bytes")),
        "the echoing backend's error is logged by its length and hash"
    );
    for (id, status, name) in &ids {
        let finished: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("request finished") && l.contains(id.as_str()))
            .collect();
        assert!(!finished.is_empty(), "no 'request finished' line for {id}");
        if !name.is_empty() {
            assert!(
                finished.iter().any(|l| l.contains(&format!("key={name}"))
                    || l.contains(&format!("\"key\":\"{name}\""))),
                "{status}: the key name {name} is not in {finished:?}"
            );
        }
    }
    for (i, line) in text.lines().enumerate() {
        for secret in [
            LIST_KEY,
            FILE_KEY,
            ENV_KEY,
            WRONG_KEY,
            &hex,
            QUERY_CANARY,
            DOC_CANARY,
            INPUT_CANARY,
            CHOICE_CANARY,
            NAME_CANARY,
            ECHO_CANARY,
            OPENAI_STATE_CANARY,
            OPENAI_LABEL_CANARY,
            OPENAI_ID_CANARY,
        ] {
            assert!(
                !line.contains(secret),
                "log line {i} leaks {secret}: {line}"
            );
        }
    }
}

/// The `openai` dialect: its probe, a 50-option anchor merge with caller content
/// in the state, a label and the question id, a host error that echoes the messages (with
/// them), and a top-K missing an option. Every answer and error body is free of the
/// backend's key; the log lines are checked with the rest.
async fn openai_dialect_calls() -> Vec<(String, u16, &'static str)> {
    use crate::setup::fake_openai::{FakeOpenAi, Family, Fault};
    let labels: Vec<(u32, String)> = (0..191).map(|i| (1000 + i, i.to_string())).collect();
    let fake = FakeOpenAi::start(Family::text_only(), &labels).await;
    let config = support::openai_config(
        &fake.base_url(),
        "golden-fake",
        &[
            "--model",
            "compat-canary",
            "--api-keys",
            LIST_KEY,
            "--backend-api-key",
            WRONG_KEY,
        ],
    );
    let service = support::start(config).await;
    let mut criteria = serde_json::Map::new();
    for i in 0..50 {
        criteria.insert(
            format!("{OPENAI_LABEL_CANARY}-{i}"),
            json!(format!("option {i}")),
        );
    }
    let body = json!({
        "state": OPENAI_STATE_CANARY,
        "questions": {OPENAI_ID_CANARY: {"type": "choice", "instructions": "Which?", "criteria": criteria}},
    });
    let mut ids = Vec::new();
    for (fault, status) in [
        (Fault::None, 200),
        (Fault::Status(400), 400),
        (Fault::DropLast, 502),
    ] {
        fake.set_fault(fault);
        let reply = ask_as(&service, Some(LIST_KEY), &body).await;
        assert_eq!(reply.status, status, "{}", reply.text);
        let everything = format!("{:?} {}", reply.headers, reply.text);
        assert!(
            !everything.contains(WRONG_KEY),
            "the backend key in {everything}"
        );
        if status != 200 {
            for secret in [OPENAI_STATE_CANARY, OPENAI_LABEL_CANARY, OPENAI_ID_CANARY] {
                assert!(!reply.text.contains(secret), "{secret} in {}", reply.text);
            }
        }
        ids.push((
            reply
                .header("x-request-id")
                .expect("request id")
                .to_string(),
            status,
            "key-1",
        ));
    }
    let metrics = support::metrics(&service).await;
    for secret in [
        OPENAI_STATE_CANARY,
        OPENAI_LABEL_CANARY,
        OPENAI_ID_CANARY,
        WRONG_KEY,
        LIST_KEY,
    ] {
        assert!(!metrics.contains(secret), "{secret} in /metrics");
    }
    ids
}
