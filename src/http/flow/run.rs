//! [`run`]: the flow's steps, in the order the folder's doc lists them, for one call's
//! requests.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::try_join_all;

use super::escalate::{escalate, Report};
use super::{ledger_step, usage, AnsweredCall};
use crate::calibration::prior::shape::tenant_id;
use crate::engine::{Answers, PipelineError, Tenant, TokenUsage};
use crate::error::{ApiError, Code};
use crate::http::auth::{count_rejection, Caller};
use crate::http::context::RequestContext;
use crate::http::trace;
use crate::http::AppState;
use crate::models::circuit::Ticket;
use crate::quota::Admission;
use crate::request::ValidRequest;

/// Runs a call's requests (at least one) through the steps in the folder's doc (`flow/mod.rs`).
pub(in crate::http) async fn run(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    requests: &[ValidRequest],
) -> Result<AnsweredCall, ApiError> {
    let started = tokio::time::Instant::now();
    let first = requests
        .first()
        .ok_or_else(|| ApiError::new(Code::Internal, "internal error"))?;
    let questions: usize = requests.iter().map(|r| r.questions().len()).sum();
    context.note_model(&first.model().name, questions);
    state.metrics.observe_request(
        requests
            .iter()
            .flat_map(|r| r.questions().iter().map(|q| q.options.len())),
    );
    let tenant = tier_and_tenant(state, caller, requests)?;
    let ticket = first.model().circuit.admit()?;
    let admission = caller
        .admit_questions(&state.quotas, questions, context.batch_line_id())
        .await
        .inspect_err(|e| count_rejection(&state.metrics, caller, e))?;
    let sent: Vec<AtomicU64> = requests.iter().map(|_| AtomicU64::new(0)).collect();
    let mut all_answers = match run_within_deadline(state, requests, ticket, &sent, &tenant).await {
        Ok(all_answers) => all_answers,
        Err(e) => {
            refund_unsent(state, context, caller, admission, requests, &sent).await;
            return Err(e);
        }
    };
    let escalated = escalate(state, requests, &mut all_answers, started, &tenant).await;
    let (total, escalation) = account(
        state,
        context,
        caller,
        requests,
        questions,
        &all_answers,
        escalated,
    )
    .await?;
    let answered = AnsweredCall {
        answers: all_answers,
        usage: total,
        escalation,
    };
    trace::ledger_commit()
        .scope(ledger_step::answered(
            state, context, caller, requests, &answered,
        ))
        .await?;
    Ok(answered)
}

/// Runs every request within the request deadline: one request is bounded by the
/// pipeline itself (no second timer), several by one timer over them all.
async fn run_within_deadline(
    state: &AppState,
    requests: &[ValidRequest],
    ticket: Ticket<'_>,
    sent: &[AtomicU64],
    tenant: &Tenant,
) -> Result<Vec<Answers>, ApiError> {
    if requests.len() == 1 {
        return run_all(state, requests, ticket, sent, tenant).await;
    }
    let deadline = state.pipeline.request_timeout();
    tokio::time::timeout(deadline, run_all(state, requests, ticket, sent, tenant))
        .await
        .unwrap_or_else(|_| Err(PipelineError::Deadline.into()))
}

/// Refuses a model the caller's tier lacks; else the caller's tenant: its salt for vLLM
/// reads (of its key's name or hashed subject, keyed: never the name) when salting is on,
/// and its own position prior (an open service's one caller: the model's).
fn tier_and_tenant(
    state: &AppState,
    caller: &Caller,
    requests: &[ValidRequest],
) -> Result<Tenant, ApiError> {
    for request in requests {
        let model = request.model();
        caller.allow_model(&model.name, model.aliases.iter().map(String::as_str))?;
    }
    let named = (!caller.is_anonymous()).then(|| caller.name());
    Ok(Tenant {
        cache_salt: named.and_then(|name| state.cache_salt.of(name)),
        prior: tenant_id(named),
    })
}

/// The first request alone under `ticket`, then the rest together, each under its own
/// ticket; the first failure ends the call (dropping the others cancels their reads).
async fn run_all(
    state: &AppState,
    requests: &[ValidRequest],
    ticket: Ticket<'_>,
    sent: &[AtomicU64],
    tenant: &Tenant,
) -> Result<Vec<Answers>, ApiError> {
    let pipeline = &state.pipeline;
    let first = pipeline
        .run_counting(&requests[0], ticket, &sent[0], tenant)
        .await?;
    let rest = requests[1..]
        .iter()
        .zip(&sent[1..])
        .map(|(request, sent)| async move {
            let ticket = request.model().circuit.admit()?;
            Ok::<_, ApiError>(pipeline.run_counting(request, ticket, sent, tenant).await?)
        });
    let mut all_answers = vec![first];
    all_answers.extend(try_join_all(rest).await?);
    Ok(all_answers)
}

/// The one refund rule: the questions of every request that sent no read go back to the
/// key.
async fn refund_unsent(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    admission: Option<Admission>,
    requests: &[ValidRequest],
    sent: &[AtomicU64],
) {
    let unsent: usize = requests
        .iter()
        .zip(sent)
        .filter(|(_, sent)| sent.load(Ordering::Relaxed) == 0)
        .map(|(request, _)| request.questions().len())
        .sum();
    let admission = admission.map(|a| Admission {
        questions: unsent as u64,
        ..a
    });
    caller
        .refund(&state.quotas, admission, context.batch_line_id())
        .await;
}

/// After the escalations: the call's usage summed and noted, recorded for the key and
/// the answers observed; or, when a required escalation failed, the usage recorded all the
/// same (the reads and the escalation were sent), for the key and on the record of the
/// refusal, and the escalation's error.
async fn account(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    requests: &[ValidRequest],
    questions: usize,
    all_answers: &[Answers],
    escalated: Result<Report, ApiError>,
) -> Result<(TokenUsage, Report), ApiError> {
    let total = total_usage(all_answers);
    context
        .summary
        .note_upstream_requests(total.upstream_requests);
    let report = match escalated {
        Ok(report) => report,
        Err(e) => {
            usage::record_unanswered(state, context, caller, &total).await;
            ledger_step::failed(state, context, caller, &requests[0], &total, &e).await;
            return Err(e);
        }
    };
    for (request, answers) in requests.iter().zip(all_answers) {
        observe_answers(state, &request.model().name, answers);
    }
    usage::record(state, context, caller, questions, &total).await;
    Ok((total, report))
}

/// What every request of a call used, escalations included.
fn total_usage(all_answers: &[Answers]) -> TokenUsage {
    let mut total = TokenUsage::default();
    for answers in all_answers {
        total.add(&answers.usage);
    }
    total
}

/// Records each answer's option mass and the profile that covered it, if any.
fn observe_answers(state: &AppState, model: &str, answers: &Answers) {
    for answer in &answers.answers {
        let profile = answer.profile.as_ref().map(|p| (&*p.name, p.automate));
        state
            .metrics
            .observe_answer(model, answer.option_mass, profile);
    }
}
