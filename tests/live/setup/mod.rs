//! What only the live tier needs: the real llama-server and vLLM (`llama`, `vllm`), the
//! recording proxies in front of them (`proxy`, `post_bias_proxy`), redis-server and
//! PostgreSQL of a test's own (`redis`, `postgres`), the official SDKs (`sdk`) and the real
//! tokenizers (`tokenizers`). Each reads what `scripts/test.sh` provides through
//! [`crate::support::require`].

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

/// How far two different requests' reads of the same prompt through a real backend may
/// differ in one probability. A real server does not promise the same float32 computation
/// twice: vLLM batches a request's reads with whatever else is in flight, differently from
/// run to run, and on a loaded machine two requests' probabilities differed by 7.6e-8 and
/// 5.0e-7. 1e-5 is 20 times the larger, and far below what the checks look for (another
/// calibration, label or read). Comparisons against a fake or a golden file stay exact, and
/// a request compared with itself stays at its own tolerance.
pub const SAME_READ: f64 = 1e-5;

/// Asserts that two different requests' reads through a real backend gave the same
/// probability `got` and `want`, within [`SAME_READ`].
pub fn assert_same_read(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= SAME_READ,
        "{what}: {got} vs {want} (|diff| {:e} > {SAME_READ:e})",
        (got - want).abs()
    );
}
