//! The engine's side of the model's position prior ([`crate::calibration::prior`]): whether
//! a request learns from and is corrected by it, which single-read requests are asked once
//! more in the order rotated by one as its sample, and what each question read in two or
//! more orders teaches it. The request stays a description of what was asked; the prior's
//! policy lives here.

use super::answers::PipelineError;
use super::decode::{decode, Decoded, OrderRead};
use crate::calibration::prior;
use crate::request::ValidRequest;

/// The rotation a sampled request is asked in besides the caller's order.
const SAMPLE_SHIFT: usize = 1;

/// Whether the model's position prior is learned from and applied to `req`: the request's
/// own `prior_correction` switch, else the model's setting.
pub fn enabled(req: &ValidRequest) -> bool {
    req.prior_switch()
        .unwrap_or_else(|| req.model().prior.settings().enabled)
}

/// The request asked once more in the order rotated by one, written in its own layout, when
/// the model's prior takes it as a sample (a share of single-read requests,
/// [`prior::PriorBook::take_sample`]).
pub fn sample(req: &ValidRequest, tenant: &str) -> Option<ValidRequest> {
    let wanted = enabled(req) && req.permutations() == 1;
    let shapes = || -> Vec<prior::PriorShape> {
        (0..req.questions().len())
            .filter(|q| req.questions()[*q].options.len() >= 2)
            .map(|q| shape(req, tenant, q))
            .collect()
    };
    (wanted && req.model().prior.take_sample(&shapes()))
        .then(|| req.with_rotation(SAMPLE_SHIFT))
        .flatten()
}

/// Feeds a question read in two or more orders (`reads`: shift and log-probabilities by
/// position per order; empty for one order) to the `tenant`'s prior of the model, and returns
/// what a single-read request's question gets: the correction, or why the prior declined
/// (the read is then answered raw); `None` when the request or model turned it off or the
/// question was read in more than one order.
pub fn learn(
    req: &ValidRequest,
    q: usize,
    tenant: &str,
    reads: &[(usize, Vec<f64>)],
) -> Option<Result<prior::Correction, prior::Declined>> {
    if !enabled(req) {
        return None;
    }
    let book = &req.model().prior;
    let shape = shape(req, tenant, q);
    if !reads.is_empty() {
        book.observe(shape.clone(), reads);
    }
    (req.asked_orders(q) == 1).then(|| book.correction(&shape))
}

/// Decodes reads with the prior taken out of each, and says so on the answer.
pub fn corrected(
    orders: &[OrderRead],
    c: &prior::Correction,
    t: f64,
) -> Result<Decoded, PipelineError> {
    let mut orders = orders.to_vec();
    for o in &mut orders {
        prior::correct(&mut o.logprobs, &c.prior, c.weight);
    }
    let mut d = decode(&orders, t)?;
    d.prior = Some(c.weight);
    Ok(d)
}

/// Question `q`'s shape for the prior: type, option count, layout and the `tenant` it is
/// asked for, nothing it says.
fn shape(req: &ValidRequest, tenant: &str, q: usize) -> prior::PriorShape {
    let question = &req.questions()[q];
    prior::PriorShape {
        kind: question.kind.as_str(),
        options: question.options.len(),
        layout: req.layout().as_str().to_string(),
        tenant: tenant.to_string(),
    }
}
