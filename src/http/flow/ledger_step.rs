//! The ledger step of the front-door flow: the record of every answered call is committed
//! before its answer leaves ([`answered`], from `flow::run`), and every refusal of a door
//! is recorded with its status and code before it leaves ([`refused`], from the request
//! middleware, which sees refusals made before the flow: validation, body, auth; [`failed`],
//! from `flow::run`, for a call refused after it sent upstream requests, with their usage).
//!
//! Building a record hashes the caller's text (HMAC-SHA256, a few ns a byte): a large
//! request is hashed on the blocking pool, like its validation.

use super::AnsweredCall;
use crate::engine::TokenUsage;
use crate::error::{ApiError, Code};
use crate::http::auth::Caller;
use crate::http::blocking::{self, Weight};
use crate::http::context::RequestContext;
use crate::http::routes::DOORS;
use crate::http::AppState;
use crate::ledger::draft::{self, RequestAnswers};
use crate::ledger::record::{Decision, Tokens};
use crate::request::ValidRequest;

/// Commits the record of an answered call; under `fail_closed`, a record that is not
/// committed in time refuses the call (503 `system_one_ledger_unavailable`).
pub(super) async fn answered(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    requests: &[ValidRequest],
    answered: &AnsweredCall,
) -> Result<(), ApiError> {
    let Some(key) = state.ledger.key() else {
        return Ok(());
    };
    let who = identity(context, caller.name());
    let model = requests[0].model().name.clone();
    let usage = tokens(&answered.usage);
    // What the store keeps if the wait misses under `fail_closed`: the refusal the caller
    // gets, with the usage of the upstream requests made.
    let withheld = {
        let (who, model) = (who.clone(), model.clone());
        move || Decision {
            usage,
            ..draft::refused(
                key,
                who,
                Code::LedgerUnavailable.status().as_u16(),
                Some(Code::LedgerUnavailable.as_str()),
                Some(&model),
            )
        }
    };
    let full = state.ledger.keeps_inputs();
    let bytes: usize = requests
        .iter()
        .map(|r| r.state_json().len() + r.images().iter().map(|i| i.len()).sum::<usize>())
        .sum();
    let decision = if bytes <= blocking::INLINE_LIGHT_BYTES {
        build(key, who, &model, requests, &answered.answers, usage, full)
    } else {
        let (key, requests, all_answers) =
            (key.clone(), requests.to_vec(), answered.answers.clone());
        blocking::run(bytes, Weight::Light, move || {
            build(&key, who, &model, &requests, &all_answers, usage, full)
        })
        .await?
    };
    context.ledger.note_recorded();
    state
        .ledger
        .commit_answer(decision, withheld)
        .await
        .map_err(|e| {
            ApiError::new(
                Code::LedgerUnavailable,
                format!("{e}; the answer is withheld (--ledger-policy fail_closed): retry later"),
            )
            .retry_after(crate::quota::UNAVAILABLE_RETRY_SECS)
        })
}

fn build(
    key: &crate::ledger::key::LedgerKey,
    who: draft::Identity,
    model: &str,
    requests: &[ValidRequest],
    all_answers: &[crate::engine::Answers],
    usage: Tokens,
    full_inputs: bool,
) -> Decision {
    let answers: Vec<RequestAnswers<'_>> = all_answers
        .iter()
        .map(|o| RequestAnswers {
            decoded: &o.answers,
            model: &o.model,
        })
        .collect();
    draft::answered(
        key,
        who,
        draft::AnsweredCall {
            model,
            requests,
            answers: &answers,
            usage,
            full_inputs,
        },
    )
}

/// Records a call that failed after its upstream requests were sent (a required escalation
/// that failed): the refusal's status and code with the usage of everything sent, so the
/// record adds up to the requests made. A record not committed in time is counted, and the
/// refusal goes out as it was.
pub(super) async fn failed(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    request: &ValidRequest,
    usage: &TokenUsage,
    error: &ApiError,
) {
    let Some(key) = state.ledger.key() else {
        return;
    };
    let refused = draft::refused(
        key,
        identity(context, caller.name()),
        error.status().as_u16(),
        Some(error.code.as_str()),
        Some(&request.model().name),
    );
    let decision = Decision {
        usage: tokens(usage),
        ..refused
    };
    context.ledger.note_recorded();
    let _ = state.ledger.commit(decision).await;
}

/// Records a door's refusal (status ≥ 400) that the flow has not recorded, before it
/// leaves; a record that is not committed in time is counted, and the refusal goes out
/// as it was.
pub(in crate::http) async fn refused(
    state: &AppState,
    context: &RequestContext,
    status: u16,
    code: Option<Code>,
) {
    let Some(key) = state.ledger.key() else {
        return;
    };
    let noted = context.ledger.noted();
    if noted.recorded || status < 400 || !DOORS.contains(&context.route.as_str()) {
        return;
    }
    let name = noted.key.as_deref().unwrap_or("");
    let decision = draft::refused(
        key,
        identity(context, name),
        status,
        code.map(Code::as_str),
        noted.model.as_deref(),
    );
    let _ = state.ledger.commit(decision).await;
}

/// Which request a record is of, and who asked.
fn identity(context: &RequestContext, key: &str) -> draft::Identity {
    draft::Identity {
        request_id: context.id.0.clone(),
        at_ms: context.at_ms,
        key: key.to_owned(),
        route: context.route.clone(),
        latency_ms: context.started.elapsed().as_secs_f64() * 1e3,
    }
}

fn tokens(usage: &TokenUsage) -> Tokens {
    Tokens {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        upstream_requests: usage.upstream_requests,
        cached_tokens: usage.cached_tokens,
    }
}
