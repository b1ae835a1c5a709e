//! What only the live tier needs: the real llama-server and vLLM (`llama`, `vllm`), the
//! recording proxies in front of them (`proxy`, `post_bias_proxy`), redis-server and
//! PostgreSQL of a test's own (`redis`, `postgres`), the official SDKs (`sdk`) and the real
//! tokenizers (`tokenizers`); and [`require`], the one way a live test reads what
//! `scripts/test.sh` provides.

pub mod llama;
pub mod post_bias_proxy;
pub mod postgres;
pub mod proxy;
pub mod redis;
pub mod sdk;
pub mod tokenizers;
pub mod vllm;

use serde_json::{json, Value};

use crate::support::criteria;

/// The environment variable `name`, trimmed; when it is unset or empty the test fails at
/// once with one line naming `script`, which starts or fetches what the variable points at
/// (`scripts/test.sh` runs them all). A live test never skips.
pub fn require(name: &str, script: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value.trim().to_string(),
        _ => panic!("{name} is not set: run {script} (scripts/test.sh runs it and exports it)"),
    }
}

/// A choice `team` of `n` options and a noul `refund` about a short state, at `temperature:
/// 1`: the request the real-backend suites compare across dialects and paths.
pub fn team_and_refund(n: usize) -> Value {
    json!({
        "state": "The customer says the invoice total is wrong and asks for a refund.",
        "temperature": 1,
        "questions": {
            "team": {"type": "choice", "instructions": "Which team should handle this?", "criteria": criteria(n)},
            "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        },
    })
}
