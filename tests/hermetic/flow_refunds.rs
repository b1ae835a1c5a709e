//! The front-door flow's one refund rule (`src/http/flow/run.rs`): a key is charged for the
//! questions of every request that sent a read, and given back those of every request
//! that sent none, whatever the refusal (a disabled model, a host the probe could not
//! reach, rerank batches never started). Over HTTP, with a key capped per day, in the
//! in-memory limit store, against the fake backends.

use crate::support;
use serde_json::{json, Value};

use crate::support::fake_vllm::{FakeVllm, Fault};
use crate::support::replicas::used_today;
use crate::support::{ask_as, criteria, Reply, Service};
use systemone::config::ServeConfig;

/// The one key, capped at 100 questions a day.
const KEY: &str = "sk-flow-refunds-7a8b9c";

/// `config` with a keys file holding [`KEY`].
fn keyed(config: impl FnOnce(&[&str]) -> ServeConfig, extra: &[&str]) -> ServeConfig {
    let keys = support::keys_file(&support::key_entry("k", KEY, "daily_questions = 100"));
    let mut flags = vec!["--keys-file", keys.to_str().expect("utf-8 path")];
    flags.extend_from_slice(extra);
    config(&flags)
}

/// `k` three-option choice questions.
fn questions(k: usize) -> Value {
    let qs: serde_json::Map<String, Value> = (0..k)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "choice", "criteria": criteria(3)}),
            )
        })
        .collect();
    json!({"state": "a ticket", "questions": qs})
}

async fn rerank_as(service: &Service, documents: usize) -> Reply {
    let docs: Vec<String> = (0..documents).map(|i| format!("document {i}")).collect();
    let body = json!({"query": "refunds", "documents": docs});
    let request = service
        .client
        .post(service.url("/v2/rerank"))
        .bearer_auth(KEY)
        .json(&body);
    Reply::read(request.send().await.expect("service answers")).await
}

async fn used(service: &Service) -> u64 {
    used_today(service, KEY).await.expect("the store answers")
}

/// A read that was sent and failed (the backend's 500) is charged: the backend did the
/// work. The same key's next request, answered, adds its own questions.
#[tokio::test]
async fn a_request_whose_reads_were_sent_is_charged_even_when_it_fails() {
    let fake = FakeVllm::start().await;
    let service = support::start(keyed(|f| support::config(&fake.base_url(), f), &[])).await;
    fake.set_fault(Fault::ServerError);
    let failed = ask_as(&service, Some(KEY), &questions(3)).await;
    assert_eq!(failed.status, 502, "{}", failed.text);
    assert!(fake.chat_requests() > 0);
    assert_eq!(used(&service).await, 3);
    fake.set_fault(Fault::None);
    let answered = ask_as(&service, Some(KEY), &questions(2)).await;
    assert_eq!(answered.status, 200, "{}", answered.text);
    assert_eq!(used(&service).await, 5);
}

/// An `openai` host the probe cannot reach: the request is refused (503) before any read,
/// and its questions go back (not only a token-table mismatch's: anything that sent no read).
#[tokio::test]
async fn a_refusal_that_sent_no_read_is_refunded() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let url = format!("http://{closed}/v1");
    let config = keyed(
        |f| support::openai_config(&url, "golden-fake", f),
        &["--model", "compat-model"],
    );
    let service = support::start(config).await;
    let refused = ask_as(&service, Some(KEY), &questions(3)).await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(used(&service).await, 0, "the 3 questions came back");
}

/// A rerank call in three batches (`--max-questions 2`, 6 documents) whose first batch
/// fails at the backend: the call is a 502, and the key is charged for the first batch's
/// 2 documents only; the 4 documents of the batches never sent are given back (they were
/// all charged before).
#[tokio::test]
async fn rerank_charges_only_the_documents_of_batches_that_were_sent() {
    let fake = FakeVllm::start().await;
    let flags = ["--max-questions", "2"];
    let service = support::start(keyed(|f| support::config(&fake.base_url(), f), &flags)).await;
    let answered = rerank_as(&service, 6).await;
    assert_eq!(answered.status, 200, "{}", answered.text);
    assert_eq!(used(&service).await, 6);
    let reads = fake.chat_requests();
    fake.set_fault(Fault::ServerError);
    let failed = rerank_as(&service, 6).await;
    assert_eq!(failed.status, 502, "{}", failed.text);
    let sent = fake.chat_requests() - reads;
    assert!(
        (1..=2).contains(&sent),
        "only the first batch's reads: {sent}"
    );
    assert_eq!(used(&service).await, 6 + 2);
}
