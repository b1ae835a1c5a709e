//! The token limits (`docs/reference/flags.md`) with the real Gemma 3 and Qwen 3 `tokenizer.json`
//! files from `SYSTEMONE_TOKENIZERS` (filled by `scripts/fetch-tokenizers.sh`), over HTTP
//! against the fake vLLM server. The token-table check itself runs on the fake's toy
//! tokenizer in the hermetic tier (`tests/hermetic/token_check.rs`).

use serde_json::json;
use systemone::models::tokens::build::LoadedTokenizer;

use crate::setup::tokenizers::{one_token_more, state_of_exactly, state_tokens, tokenizer_path};
use crate::support;
use crate::support::bodies::choice_about;
use crate::support::fake_vllm::FakeVllm;
use crate::support::{ask, assert_answered, assert_error, criteria, Service};

/// The contract's default state limit.
const MAX_STATE_TOKENS: usize = 32_768;
/// The contract's default per-question limit.
const MAX_QUESTION_TOKENS: usize = 16_384;

/// A service on the fake with the real Gemma 3 tokenizer and table, checks off.
async fn gemma_service() -> (FakeVllm, Service) {
    let gemma = tokenizer_path("gemma3");
    let gemma = gemma.to_str().expect("utf-8 path");
    let fake = FakeVllm::start().await;
    let config = support::config_with_table(
        &fake.base_url(),
        "gemma-3",
        &["--tokenizer", gemma, "--token-check-interval-secs", "0"],
    );
    let service = support::start(config).await;
    (fake, service)
}

// ---------------------------------------------------------------------------------------
// 7. Limits with the real Gemma 3 tokenizer.
// ---------------------------------------------------------------------------------------

/// The state limit is exact with the real Gemma 3 tokenizer: a string state whose JSON
/// rendering (quotes included) is exactly 32,768 tokens is answered 200 with a 2-option
/// choice; one token more is 413 `system_one_state_too_large`, naming 32768 and the count.
#[tokio::test]
async fn gemma3_state_limit_is_exact() {
    let tk = LoadedTokenizer::from_file(&tokenizer_path("gemma3")).expect("loads");
    let at_limit = state_of_exactly(&tk, MAX_STATE_TOKENS);
    assert_eq!(state_tokens(&tk, &at_limit), MAX_STATE_TOKENS);
    let over = one_token_more(&tk, &at_limit);
    assert_eq!(state_tokens(&tk, &over), MAX_STATE_TOKENS + 1);

    let (fake, service) = gemma_service().await;
    let reply = ask(&service, &choice_about(json!(at_limit), 2)).await;
    assert_answered(&reply);
    assert_eq!(fake.chat_requests(), 1);

    let reply = ask(&service, &choice_about(json!(over), 2)).await;
    assert_error(&reply, 413, "system_one_state_too_large", "cap_exceeded");
    assert!(reply.message().contains("32768"), "{}", reply.text);
    assert!(reply.message().contains("32769"), "{}", reply.text);
    assert_eq!(fake.chat_requests(), 1, "no read for a refused request");
    assert_eq!(fake.tokenizer_checks(), 0, "checks are off");
}

/// With the real Gemma 3 tokenizer, a question whose instructions alone are over 16,384
/// tokens is 413 `system_one_question_too_large` (naming 16384); Gemma 3 has 10
/// single-token labels, so a 10-option choice is one read, an 11-option choice takes the
/// numerals 00–10 (three reads: the root and the nodes `0` and `1`), and a 256-option choice
/// is 422 `system_one_too_many_options` naming the limit 255.
#[tokio::test]
async fn gemma3_question_and_option_limits() {
    let tk = LoadedTokenizer::from_file(&tokenizer_path("gemma3")).expect("loads");
    let instructions = "Decide whether the customer should get a refund for March. ".repeat(2_000);
    assert!(tk.count(&instructions).expect("counts") > MAX_QUESTION_TOKENS);

    let (fake, service) = gemma_service().await;
    let body = json!({
        "state": "A customer writes: my invoice is wrong.",
        "questions": {"q": {"type": "choice", "instructions": instructions, "criteria": criteria(2)}},
    });
    let reply = ask(&service, &body).await;
    assert_error(&reply, 413, "system_one_question_too_large", "cap_exceeded");
    assert!(reply.message().contains("16384"), "{}", reply.text);

    assert_answered(&ask(&service, &choice_about(json!("A short state."), 10)).await);
    assert_eq!(fake.chat_requests(), 1, "the 10-option choice is one read");
    assert_answered(&ask(&service, &choice_about(json!("A short state."), 11)).await);
    assert_eq!(
        fake.chat_requests(),
        4,
        "the 11-option choice is three reads"
    );
    let reply = ask(&service, &choice_about(json!("A short state."), 256)).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(
        reply.body["error"]["code"],
        json!("system_one_too_many_options"),
        "{}",
        reply.text
    );
    assert!(reply.message().contains("255"), "{}", reply.text);
    assert!(reply.message().contains("256"), "{}", reply.text);
    assert_eq!(
        fake.chat_requests(),
        4,
        "the 256-option choice was not read"
    );
}

/// The service refuses to start when `--tokenizer` does not match `--token-table`: the
/// Qwen 3 `tokenizer.json` with the `gemma-3` table makes `build_state` fail with an error
/// that names the mismatch.
#[tokio::test]
async fn a_tokenizer_that_does_not_match_the_table_refuses_to_start() {
    let qwen = tokenizer_path("qwen3");
    let qwen = qwen.to_str().expect("utf-8 path");
    let config =
        support::config_with_table("http://127.0.0.1:9/v1", "gemma-3", &["--tokenizer", qwen]);
    let message = match systemone::build_state(&config) {
        Ok(_) => panic!("a mismatched tokenizer must refuse to start"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("does not match"), "{message}");
    assert!(message.contains("gemma-3"), "{message}");
    assert!(message.contains(qwen), "{message}");
}
