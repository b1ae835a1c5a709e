//! The key's usage, recorded by the flow: an answered request (its questions, tokens and
//! upstream requests), or what a call that failed once its upstream requests were sent
//! used (usage counts every request sent). `GET /v1/usage` (`http/ops/usage.rs`) reads it
//! back.

use crate::engine::TokenUsage;
use crate::http::auth::Caller;
use crate::http::AppState;
use crate::quota::UsageCounts;

/// Adds one answered request to its key's usage today.
pub(super) async fn record(
    state: &AppState,
    caller: &Caller,
    questions: usize,
    usage: &TokenUsage,
) {
    let counts = UsageCounts {
        requests: 1,
        questions: questions as u64,
        ..used(usage)
    };
    state.quotas.record(caller.name(), counts).await;
}

/// Adds what a call that failed after its upstream requests were sent used (its tokens and
/// upstream requests; not an answered request, nor its questions) to its key's usage today.
pub(super) async fn record_unanswered(state: &AppState, caller: &Caller, usage: &TokenUsage) {
    state.quotas.record(caller.name(), used(usage)).await;
}

/// The tokens and upstream requests of `usage`, as usage counters.
fn used(usage: &TokenUsage) -> UsageCounts {
    UsageCounts {
        input_tokens: usage.input_tokens,
        cached_tokens: usage.cached_tokens,
        upstream_requests: usage.upstream_requests,
        ..UsageCounts::default()
    }
}
