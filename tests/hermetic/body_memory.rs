//! Request bodies share one memory budget while they are decompressed and parsed
//! (`--max-body-memory-mb`). With a small budget (16 MiB, a 6 MiB body
//! limit): concurrent gzip bodies that expand to ~5 MB each are answered or refused with
//! 503 `system_one_overloaded` and `Retry-After`, never any other 5xx; the budget is given
//! back, so a body after the burst is answered, and a request waiting on its backend holds
//! none of it; a small body whose parsed value would take more than the whole budget
//! (`[1,1,…]`) is refused the same way while it is parsed.

use std::io::Write;

use serde_json::{json, Value};

use crate::support::{criteria, settled, setup, Reply, Service};

/// The flags of every test here: a 16 MiB budget, a 6 MiB body limit (a compressed body
/// reserves twice the limit, for its text and its value, so one decodes at a time).
const FLAGS: [&str; 4] = ["--max-body-memory-mb", "16", "--max-body-bytes", "6291456"];

/// A valid request padded with an ignored top-level field of `padding` bytes.
fn padded(padding: usize) -> Value {
    json!({
        "state": "A customer asks for a refund.",
        "questions": {"q": {"type": "choice", "criteria": criteria(3)}},
        "padding": "x".repeat(padding),
    })
}

/// `body` gzip-compressed (at the best ratio).
pub(crate) fn gzip(body: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(body).expect("compresses");
    gz.finish().expect("compresses")
}

/// POSTs a gzip body to `/v1/systemone`.
async fn send_gzip(service: &Service, body: Vec<u8>) -> Reply {
    let response = service
        .client
        .post(service.url("/v1/systemone"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(body)
        .send()
        .await
        .expect("service answers");
    Reply::read(response).await
}

/// A refusal for memory: 503 `system_one_overloaded` with `Retry-After`.
fn assert_overloaded(reply: &Reply) {
    reply.assert_code(503, "system_one_overloaded", "unavailable");
    assert!(reply.retry_secs() >= 1, "{}", reply.text);
}

#[tokio::test]
async fn concurrent_expanding_bodies_are_answered_or_refused_and_the_budget_comes_back() {
    let (_fake, service) = setup(&FLAGS).await;
    let body = gzip(&serde_json::to_vec(&padded(5_000_000)).expect("json"));
    assert!(body.len() < 64 * 1024, "a small body on the wire");
    let replies =
        futures::future::join_all((0..8).map(|_| send_gzip(&service, body.clone()))).await;
    let mut answered = 0;
    for reply in &replies {
        if reply.status == 200 {
            answered += 1;
        } else {
            assert_overloaded(reply);
        }
    }
    assert!(answered >= 1, "the budget lets at least one body through");
    // Everything the burst took was given back: the next body is answered.
    assert_eq!(send_gzip(&service, body).await.status, 200);
}

#[tokio::test]
async fn a_body_within_the_budget_is_answered() {
    let (_fake, service) = setup(&FLAGS).await;
    let reply = send_gzip(
        &service,
        gzip(&serde_json::to_vec(&padded(1000)).expect("json")),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["answers"]["q"]["probabilities"]
            .as_object()
            .map(|p| p.len()),
        Some(3),
        "{}",
        reply.text
    );
}

#[tokio::test]
async fn a_value_larger_than_the_budget_is_refused_while_parsed() {
    let (_fake, service) = setup(&FLAGS).await;
    // 2 MB of text, ~100 MB as a parsed value.
    let mut body = padded(0);
    body["padding"] = Value::Array(vec![json!(1); 1_000_000]);
    let text = serde_json::to_vec(&body).expect("json");
    for reply in [
        send_gzip(&service, gzip(&text)).await,
        Reply::read(
            service
                .client
                .post(service.url("/v1/systemone"))
                .header("content-type", "application/json")
                .body(text)
                .send()
                .await
                .expect("service answers"),
        )
        .await,
    ] {
        assert_overloaded(&reply);
    }
}

#[tokio::test]
async fn a_request_waiting_on_its_backend_holds_no_budget() {
    let (fake, service) = setup(&FLAGS).await;
    settled(&service).await;
    let before = fake.chat_requests();
    fake.set_delay(std::time::Duration::from_secs(3600));
    let body = gzip(&serde_json::to_vec(&padded(5_000_000)).expect("json"));
    let pending = tokio::spawn(
        service
            .client
            .post(service.url("/v1/systemone"))
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(body)
            .send(),
    );
    // Polls until the request reaches the backend (a bound, not a measured wait).
    for _ in 0..6000 {
        if fake.chat_requests() > before {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        fake.chat_requests() > before,
        "the request reached the backend"
    );
    assert!(!pending.is_finished(), "it is still waiting on the backend");
    assert_eq!(service.state.body_budget.free_bytes(), 16 * 1024 * 1024);
    pending.abort();
}
