//! The key's usage, recorded by the flow: an answered request (its questions, tokens and
//! upstream requests), or what a call that failed once its upstream requests were sent
//! used (usage counts every request sent). A batch line's usage is not recorded here but
//! kept on its context: the batch charges it with the line's output, once even when the
//! line runs again after a crash (`batch::progress`), to the key's counters, as any
//! request's, and to the key's batch counters, which say how much of it came from batches.
//! `GET /v1/usage` (`http/ops/usage.rs`) reads both back.

use crate::engine::TokenUsage;
use crate::http::auth::Caller;
use crate::http::context::RequestContext;
use crate::http::AppState;
use crate::quota::UsageCounts;

/// Adds one answered request to its key's usage today.
pub(super) async fn record(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    questions: usize,
    usage: &TokenUsage,
) {
    let counts = UsageCounts {
        requests: 1,
        questions: questions as u64,
        ..used(usage)
    };
    add(state, context, caller, counts).await;
}

/// Adds what a call that failed after its upstream requests were sent used (its tokens and
/// upstream requests; not an answered request, nor its questions) to its key's usage today.
pub(super) async fn record_unanswered(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    usage: &TokenUsage,
) {
    add(state, context, caller, used(usage)).await;
}

/// `counts` to the key's usage; a batch line's to its context, for the batch to charge.
async fn add(state: &AppState, context: &RequestContext, caller: &Caller, counts: UsageCounts) {
    match &context.batch_usage {
        Some(line) => line
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .add(&counts),
        None => state.quotas.record(caller.name(), counts).await,
    }
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
