//! Decoding: each question's merged reads become its calibrated answer, and the model's
//! position prior learns from the questions read in several orders and corrects the
//! single reads ([`crate::engine::position_prior`]).

use crate::engine::answers::{Answers, PipelineError, TokenUsage};
use crate::engine::decode::{certain, decode, Decoded, OrderRead};
use crate::engine::position_prior;
use crate::engine::spans;
use crate::metrics::Metrics;
use crate::request::ValidRequest;

use super::merge::QuestionReads;

/// Every question's answer: a question asked of no one (fewer than two options) is
/// certain, the others decoded from their reads, each in its span; with the reads' usage and
/// the model the backend said it served (else the model's upstream name).
pub(super) fn decode_all(
    req: &ValidRequest,
    tenant: &str,
    reads: Vec<Option<QuestionReads>>,
    metrics: &Metrics,
) -> Result<Answers, PipelineError> {
    let mut usage = TokenUsage::default();
    let mut model = None;
    let mut answers = Vec::with_capacity(reads.len());
    for (q, r) in reads.into_iter().enumerate() {
        let Some(r) = r else {
            answers.push(certain());
            continue;
        };
        let span = spans::decode(req.questions()[q].options.len(), r.orders.len());
        answers.push(span.in_scope(|| decode_question(req, tenant, q, &r.orders, metrics))?);
        usage.add(&r.usage);
        model = model.or(r.model);
    }
    Ok(Answers {
        answers,
        usage,
        model: model.unwrap_or_else(|| req.model().upstream_model.clone()),
    })
}

/// Decodes question `q`'s reads: with the named profile when it covers the question
/// (decoded at T = 1, then recalibrated), else at the request's temperature or the
/// model's formula for its option count, after the model's position prior is taken out of
/// a single-read request's reads ([`position_prior`]).
/// A single read the prior declined to correct is counted by reason in `metrics`.
fn decode_question(
    req: &ValidRequest,
    tenant: &str,
    q: usize,
    orders: &[OrderRead],
    metrics: &Metrics,
) -> Result<Decoded, PipelineError> {
    let question = &req.questions()[q];
    let profile = req
        .calibration()
        .filter(|p| p.covers(&req.model().name, question, req.layout()));
    let reads: Vec<(usize, Vec<f64>)> = if orders.len() >= 2 {
        orders
            .iter()
            .map(|o| (o.shift, o.logprobs.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let correction = position_prior::learn(req, q, tenant, &reads);
    let mut decoded = match profile {
        Some(p) => p.apply(decode(orders, 1.0)?),
        None => {
            let n = question.options.len();
            let t = req
                .temperature()
                .unwrap_or_else(|| req.model().formula(req.layout()).temperature(n));
            match correction {
                Some(Ok(c)) => position_prior::corrected(orders, &c, t)?,
                Some(Err(declined)) => {
                    metrics.prior_declined(declined.as_str());
                    decode(orders, t)?
                }
                None => decode(orders, t)?,
            }
        }
    };
    decoded.orders = reads;
    Ok(decoded)
}
