//! How a request's reads reach vLLM: all at once. vLLM shares a prompt head between
//! requests that arrive together, so neither the `cost` layout's first question nor a trie's
//! root goes ahead alone (that would only add a round trip; measured in
//! `docs/benchmarks/vllm.md`). A request with images stays staged
//! (`tests/hermetic/images.rs`).
//!
//! The fake answers every read after the same delay, so reads that go out together are
//! all in flight at once, and a read held back until another's answer is never in flight
//! beside it: the fake's peak in-flight count tells the two apart.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::bodies::choice_about;
use crate::support::fake_vllm::FakeVllm;
use crate::support::{ask, config_with_table, criteria, start};

/// Long enough that reads sent together overlap on any machine; never waited on by the test
/// itself, only by the service's reads.
const READ_DELAY: Duration = Duration::from_millis(400);

/// Five questions (2 nouls, 2 four-option choices, a 3-level score) about one state.
fn five_questions(layout: &str) -> Value {
    json!({
        "state": "A customer writes: I was charged twice and my guests lost access.",
        "layout": layout,
        "questions": {
            "refund": {"type": "noul", "instructions": "Money back?"},
            "guests": {"type": "noul", "instructions": "Guests lost access?"},
            "team": {"type": "choice", "instructions": "Which team?", "criteria": criteria(4)},
            "request": {"type": "choice", "instructions": "What is asked?", "criteria": criteria(4)},
            "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]},
        },
    })
}

/// Each case: the body, the reads it takes, and how many of them are in flight at the peak
/// (all of them: nothing waits for another read's answer).
#[tokio::test]
async fn every_read_of_a_text_request_goes_to_vllm_at_once() {
    let cases: [(&str, Value, usize, usize); 4] = [
        (
            "accuracy layout, 5 questions",
            five_questions("accuracy"),
            5,
            5,
        ),
        ("cost layout, 5 questions", five_questions("cost"), 5, 5),
        // 37 options: labels 00..36, a root (digits 0-3) and 4 children.
        (
            "a 37-option trie",
            choice_about(json!("Which product did I order?"), 37),
            5,
            5,
        ),
        // 101 options: 000..100, a root (0-1), 11 children (00-09, 10), 11 leaves' parents.
        (
            "a 101-option trie",
            choice_about(json!("Which product did I order?"), 101),
            1 + 2 + 11,
            1 + 2 + 11,
        ),
    ];
    for (name, body, reads, peak) in cases {
        let fake = FakeVllm::start().await;
        fake.set_delay(READ_DELAY);
        // Without a tokenizer the token limits are byte estimates of every read's prompt.
        let flags = [
            "--token-check-interval-secs",
            "0",
            "--max-request-tokens",
            "100000000",
            "--max-question-tokens",
            "100000",
        ];
        let service = start(config_with_table(&fake.base_url(), "gemma-3", &flags)).await;
        let r = ask(&service, &body).await;
        assert_eq!(r.status, 200, "{name}: {}", r.text);
        assert_eq!(fake.chat_requests(), reads, "{name}: reads");
        assert_eq!(fake.max_in_flight(), peak, "{name}: peak in flight");
        assert_eq!(
            r.body["usage"]["upstream_requests"], reads,
            "{name}: {}",
            r.text
        );
    }
}
