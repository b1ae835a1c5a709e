//! Escalation when unsure, a step of the front-door flow (so every door has it): after a
//! request is answered, the answers its model's [`Escalation`] finds unsure are asked
//! again, all together in one request, of the escalation model; its answers replace them,
//! each naming the model that gave it (an extension field `model`: the escalation model's
//! public name), and the usage adds up. One hop (the escalation model's own escalation is
//! not followed), under the escalation model's circuit, within what is left of the request's
//! deadline. When it fails, the first answers stand and the `x-systemone-escalation` header says so,
//! unless the model sets `escalate_required`: then the request fails with its error. Either
//! way the upstream requests the failed escalation sent are added to the usage, which
//! counts every request sent whatever its outcome.
//! Counted per model pair and outcome (`systemone_escalations_total`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::future::join_all;
use tokio::time::Instant;

use crate::engine::{Answers, PipelineError, Tenant, TokenUsage};
use crate::error::{ApiError, Code};
use crate::http::trace;
use crate::http::AppState;
use crate::models::escalation::Escalation;
use crate::request::ValidRequest;

/// What the escalations of a call did, for its headers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(in crate::http) struct Report {
    /// Whether some request's model escalates.
    pub configured: bool,
    /// Answers replaced by an escalation model's.
    pub answers: usize,
    /// Whether some escalation failed (and its first answers stand).
    pub failed: bool,
}

/// How one request's escalation ended.
enum Step {
    /// Its model does not escalate.
    NotConfigured,
    /// This many answers were replaced (0: none was unsure).
    Answered(usize),
    /// It failed; the first answers stand.
    Failed,
}

/// Escalates each request's unsure answers in `all_answers` (aligned with `requests`), the
/// requests' escalations side by side; `started` is when the call began (its deadline).
pub(super) async fn escalate(
    state: &AppState,
    requests: &[ValidRequest],
    all_answers: &mut [Answers],
    started: Instant,
    tenant: &Tenant,
) -> Result<Report, ApiError> {
    let steps = requests
        .iter()
        .zip(all_answers.iter_mut())
        .map(|(request, answers)| escalate_one(state, request, answers, started, tenant));
    let mut report = Report::default();
    for step in join_all(steps).await {
        match step? {
            Step::NotConfigured => {}
            Step::Answered(n) => {
                report.configured = true;
                report.answers += n;
            }
            Step::Failed => {
                report.configured = true;
                report.failed = true;
            }
        }
    }
    Ok(report)
}

/// One request's escalation.
async fn escalate_one(
    state: &AppState,
    request: &ValidRequest,
    answers: &mut Answers,
    started: Instant,
    tenant: &Tenant,
) -> Result<Step, ApiError> {
    let Some(escalation) = request.model().escalation.as_ref() else {
        return Ok(Step::NotConfigured);
    };
    let unsure: Vec<usize> = (0..answers.answers.len())
        .filter(|q| escalation.wants(&answers.answers[*q]))
        .collect();
    if unsure.is_empty() {
        return Ok(Step::Answered(0));
    }
    let (from, to) = (request.model().name.as_str(), escalation.to.as_str());
    let sent = AtomicU64::new(0);
    let again = trace::escalation(from, to, unsure.len()).scope(ask_again(
        state, request, &unsure, escalation, started, &sent, tenant,
    ));
    match again.await {
        Ok(again) => {
            let name: Arc<str> = Arc::from(to);
            for (q, mut answer) in unsure.iter().zip(again.answers) {
                answer.model = Some(name.clone());
                answers.answers[*q] = answer;
            }
            answers.usage.add(&again.usage);
            state
                .metrics
                .count_escalation(from, to, "answered", unsure.len());
            Ok(Step::Answered(unsure.len()))
        }
        Err(e) => {
            answers.usage.add(&TokenUsage {
                upstream_requests: sent.load(Ordering::Relaxed),
                ..TokenUsage::default()
            });
            state.metrics.count_escalation(from, to, "failed", 0);
            tracing::warn!(
                from,
                to,
                code = e.code.as_str(),
                questions = unsure.len(),
                "escalation failed"
            );
            if escalation.required {
                return Err(e);
            }
            Ok(Step::Failed)
        }
    }
}

/// The `unsure` questions of `request`, asked of the escalation model in one request,
/// under its circuit, within what is left of the call's deadline; `sent` counts the
/// upstream requests it started, whatever their end.
async fn ask_again(
    state: &AppState,
    request: &ValidRequest,
    unsure: &[usize],
    escalation: &Escalation,
    started: Instant,
    sent: &AtomicU64,
    tenant: &Tenant,
) -> Result<Answers, ApiError> {
    let target = state
        .models
        .resolve(&escalation.to)
        .ok_or_else(|| ApiError::new(Code::Internal, "internal error"))?;
    let again = request.subset_for(unsure, target)?;
    let left = state
        .pipeline
        .request_timeout()
        .saturating_sub(started.elapsed());
    if left.is_zero() {
        return Err(PipelineError::Deadline.into());
    }
    let ticket = target.circuit.admit()?;
    let run = state.pipeline.run_counting(&again, ticket, sent, tenant);
    Ok(tokio::time::timeout(left, run)
        .await
        .unwrap_or(Err(PipelineError::Deadline))?)
}
