//! The backend's context window (vLLM's `/v1/models` `max_model_len`; llama-server's
//! `/props` `n_ctx`), read by the model's upkeep: a read whose prompt cannot fit is refused
//! with a 413 before anything is sent, over the fake vLLM.
//!
//! A prompt's UTF-8 bytes bound its tokens from above, so only a prompt longer in bytes
//! than the window is counted, by the backend's own tokenizer when no `--tokenizer` is
//! configured: the fake's toy tokenizer reads `answer` as one token, so a long state of
//! that word is many bytes but few tokens, and is answered.

use crate::support;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::fake_vllm::FakeVllm;
use crate::support::{ask, assert_error, Service};

/// A request with one 3-option choice about `state`.
fn about(state: String) -> Value {
    json!({
        "state": state,
        "questions": {"q": {"type": "choice", "instructions": "Pick one.", "criteria": support::criteria(3)}},
    })
}

/// A fake reporting a window of `window` tokens (0: none) and a service in front of it,
/// once the service has read the window (or found that the host reports none).
async fn service(window: usize) -> (FakeVllm, Service) {
    service_with(window, &[]).await
}

/// [`service`] with the service's `flags`.
async fn service_with(window: usize, flags: &[&str]) -> (FakeVllm, Service) {
    let fake = FakeVllm::start().await;
    fake.set_max_model_len(window);
    let service = support::start(support::config(&fake.base_url(), flags)).await;
    support::settled(&service).await;
    let started = tokio::time::Instant::now();
    while window > 0 && self::window(&service).is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the window was never read"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (fake, service)
}

/// The window the default model's backend reported, if any.
fn window(service: &Service) -> Option<usize> {
    service
        .state
        .models
        .default_model()
        .serving
        .reads()
        .and_then(|backend| backend.context_tokens())
}

/// A 3,000-byte state of ordinary text does not fit a 2,000-token window: 413
/// `system_one_request_too_large` naming the window and the prompt's size, counted once by
/// the backend's tokenizer, and no read sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_window_is_a_413_before_any_read() {
    let (fake, service) = service(2000).await;
    assert_eq!(window(&service), Some(2000));
    let tokenized = fake.tokenize_requests();
    let reply = ask(&service, &about("x".repeat(3000))).await;
    assert_error(&reply, 413, "system_one_request_too_large", "cap_exceeded");
    let message = reply.body["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("context window of 2000 tokens"),
        "{message}"
    );
    assert_eq!(fake.chat_requests(), 0, "nothing was read");
    assert_eq!(
        fake.tokenize_requests(),
        tokenized + 1,
        "counted once by the backend"
    );
}

/// A state of 3,500 bytes but ~1,000 tokens (`answer ` repeated) is counted by the
/// backend, fits the 2,000-token window and is answered; a short prompt is never counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_prompt_of_few_tokens_is_counted_and_answered() {
    let (fake, service) = service(2000).await;
    let tokenized = fake.tokenize_requests();
    let short = ask(&service, &about("short".into())).await;
    assert_eq!(short.status, 200, "{}", short.text);
    assert_eq!(
        fake.tokenize_requests(),
        tokenized,
        "a short prompt is settled by its length"
    );
    let reply = ask(&service, &about("answer ".repeat(500))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(fake.tokenize_requests(), tokenized + 1);
}

/// A host that does not report its window (404 on `/v1/models`) is not checked: the long
/// prompt goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_a_window_is_not_checked() {
    let (fake, service) = service(0).await;
    assert_eq!(window(&service), None);
    let reply = ask(&service, &about("x".repeat(3000))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(fake.chat_requests() > 0);
}

/// Token limits without `--tokenizer`: a state of 1,402 bytes but 402 tokens
/// (`answer ` repeated; the fake's tokenizer reads `answer` as one token) is over
/// `--max-state-tokens 500` on the byte estimate only: the service counts the request's
/// pieces with the backend's `/tokenize` (preamble, state, question: one request each)
/// and answers it. A state of as many bytes that is as many tokens is refused on that
/// count, said so, and nothing is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_estimate_only_is_counted_exactly_and_answered() {
    let (fake, service) = service_with(0, &["--max-state-tokens", "500"]).await;
    let tokenized = fake.tokenize_requests();
    let reply = ask(&service, &about("answer ".repeat(200))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        fake.tokenize_requests(),
        tokenized + 3,
        "three pieces counted"
    );
    let chats = fake.chat_requests();
    let refused = ask(&service, &about("x".repeat(1400))).await;
    assert_error(&refused, 413, "system_one_state_too_large", "cap_exceeded");
    assert_eq!(
        refused.body["error"]["message"],
        "state: the state is 1402 tokens, more than the limit of 500 (--max-state-tokens); counted by the backend's tokenizer"
    );
    assert_eq!(fake.chat_requests(), chats, "nothing was read");
}

/// A state whose bytes alone prove it over `--max-state-tokens` (no token of a model
/// without a configured tokenizer is taken to stand for more than 512 bytes) is refused at
/// once with the code an exact count gives, saying it is a lower bound, and the backend's
/// `/tokenize` is never asked; a state long only by the estimate is still counted exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_its_bytes_prove_too_long_is_refused_without_the_backend() {
    let (fake, service) = service_with(0, &["--max-state-tokens", "500"]).await;
    let tokenized = fake.tokenize_requests();
    // 500 * 512 bytes and its two quotes: at least 501 tokens.
    let refused = ask(&service, &about("x".repeat(500 * 512))).await;
    assert_error(&refused, 413, "system_one_state_too_large", "cap_exceeded");
    assert_eq!(
        refused.body["error"]["message"],
        "state: the state is at least 501 tokens, more than the limit of 500 \
         (--max-state-tokens); counted from its UTF-8 bytes, no token of the model standing \
         for more than 512 bytes"
    );
    assert_eq!(
        fake.tokenize_requests(),
        tokenized,
        "never sent to be counted"
    );
    // Two bytes fewer: at least 500 tokens, not provably over, so counted by the backend.
    let counted = ask(&service, &about("x".repeat(500 * 512 - 2))).await;
    assert_error(&counted, 413, "system_one_state_too_large", "cap_exceeded");
    let message = counted.body["error"]["message"]
        .as_str()
        .expect("a message");
    assert!(
        message.ends_with("counted by the backend's tokenizer"),
        "{message}"
    );
    assert!(fake.tokenize_requests() > tokenized, "counted exactly");
    assert_eq!(fake.chat_requests(), 0, "nothing was read");
}

/// While the backend counts a request the estimate put over a limit, the body's share of
/// the memory budget stays held: the texts sent to be counted are copies of the body's, so
/// a burst of such requests waits for the budget instead of holding gigabytes outside it.
/// Once the count ends the share goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_being_counted_keeps_its_share_of_the_body_budget() {
    let (fake, service) = service_with(0, &["--max-state-tokens", "500"]).await;
    let budget = service.state.body_budget.clone();
    let total = budget.free_bytes();
    fake.set_count_delay(Duration::from_secs(2));
    let before = fake.tokenize_requests();
    // 140 KB, 20,000 of the fake's tokens: over 500 on the estimate, not provably so on
    // bytes (at most 274 tokens' worth at 512 bytes a token), so the backend counts it.
    let body = about("answer ".repeat(20_000));
    let asking = {
        let (client, addr) = (service.client.clone(), service.addr);
        tokio::spawn(async move {
            support::post(&client, &format!("http://{addr}/v1/systemone"), &body).await
        })
    };
    let started = std::time::Instant::now();
    while fake.tokenize_requests() == before {
        assert!(started.elapsed() < Duration::from_secs(60), "never counted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let held = total - budget.free_bytes();
    assert!(
        held >= 140_000,
        "the share held while counting: {held} bytes"
    );
    let reply = asking.await.expect("request task");
    assert_error(&reply, 413, "system_one_state_too_large", "cap_exceeded");
    assert_eq!(budget.free_bytes(), total, "the share went back");
}
