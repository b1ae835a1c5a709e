//! Merging: one question's replies, slice by slice, joined into one read per order, with
//! the usage of the orders the caller asked for.

use crate::backend::{ReadReply, ReadUsage};
use crate::engine::answers::TokenUsage;
use crate::engine::decode::OrderRead;
use crate::models::tokens::estimate_tokens_for_bytes;
use crate::request::prompt::Ask;
use crate::request::trie::ReadPlan;

/// What one question's reads returned, before decoding.
pub(super) struct QuestionReads {
    pub(super) orders: Vec<OrderRead>,
    pub(super) usage: TokenUsage,
    pub(super) model: Option<String>,
}

/// One upstream read of a question: which order, which node of the read plan, which ids
/// of that node.
pub(super) struct Slice {
    pub(super) ask: usize,
    pub(super) node: usize,
    pub(super) ids: std::ops::Range<usize>,
}

/// One reply's usage: the backend's, else estimated from the message size (and flagged).
fn reply_usage(ask: &Ask, reply: &ReadReply) -> TokenUsage {
    let (u, estimated) = match reply.usage {
        Some(u) => (u, false),
        None => {
            let prompt_tokens = estimate_tokens_for_bytes(ask.content.text_len()) as u64;
            let u = ReadUsage {
                prompt_tokens,
                completion_tokens: 1,
                cached_tokens: 0,
                evaluated_tokens: prompt_tokens,
            };
            (u, true)
        }
    };
    TokenUsage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
        cached_tokens: u.cached_tokens,
        evaluated_tokens: u.evaluated_tokens,
        upstream_requests: reply.http_requests,
        estimated,
    }
}

/// Merges one question's replies, slice by slice, into one read per order (each option's
/// log-probability joined over the plan's nodes), with the usage of the first `billed`
/// orders, the ones the caller asked for (estimated from the message size for a reply that
/// reported none); a sample for the prior is the service's own cost.
pub(super) fn merge_replies(
    asks: &[Ask],
    plan: &ReadPlan,
    slices: &[Slice],
    replies: Vec<ReadReply>,
    billed: usize,
) -> QuestionReads {
    let mut node_reads: Vec<Vec<Vec<f64>>> = asks
        .iter()
        .map(|_| {
            plan.nodes
                .iter()
                .map(|n| Vec::with_capacity(n.ids.len()))
                .collect()
        })
        .collect();
    let mut pre_mask = vec![true; asks.len()];
    let mut usage = TokenUsage::default();
    let mut reported = None;
    for (slice, reply) in slices.iter().zip(replies) {
        node_reads[slice.ask][slice.node].extend_from_slice(&reply.logprobs);
        pre_mask[slice.ask] &= reply.pre_mask;
        if slice.ask < billed {
            usage.add(&reply_usage(&asks[slice.ask], &reply));
        }
        reported = reported.or(reply.model);
    }
    let orders = asks
        .iter()
        .zip(node_reads)
        .zip(pre_mask)
        .map(|((a, reads), pre_mask)| OrderRead {
            shift: a.shift,
            logprobs: plan.join(reads),
            pre_mask,
        })
        .collect();
    QuestionReads {
        orders,
        usage,
        model: reported,
    }
}
