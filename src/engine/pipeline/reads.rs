//! Reads: where a request's reads go ([`Via`]), and every question's reads sent under the
//! process-wide in-flight permit, each within the read timeout and in its span, the first
//! question alone first when it seats a shared prefix and a trie's root before its other
//! nodes.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::try_join_all;
use tokio::time::{timeout, Instant};

use super::merge::{merge_replies, QuestionReads, Slice};
use super::Pipeline;
use crate::backend::{Backend, BackendError, ReadReply, ReadRequest, Routing};
use crate::engine::answers::PipelineError;
use crate::engine::spans::{self, ReadSpan};
use crate::models::fleet::Replica;
use crate::request::prompt::Ask;
use crate::request::ValidRequest;

impl Pipeline {
    /// Every question with two or more options, read concurrently (the first alone first
    /// when the request is staged); `None` for the questions answered without asking.
    pub(super) async fn ask_all(
        &self,
        req: &ValidRequest,
        via: Via<'_>,
        asks: Vec<Vec<Ask>>,
        sent: &AtomicU64,
    ) -> Result<Vec<Option<QuestionReads>>, PipelineError> {
        let asked: Vec<usize> = (0..asks.len())
            .filter(|q| req.questions()[*q].options.len() >= 2)
            .collect();
        for (i, q) in req.questions().iter().enumerate() {
            tracing::debug!("q#{i} {} n={}", q.kind.as_str(), q.options.len());
        }
        let ask = |qs: &[usize]| {
            try_join_all(qs.iter().map(|q| {
                let q = *q;
                let asks = &asks[q];
                async move {
                    let reads = self.ask_question(req, via, q, asks, sent).await;
                    reads.map(|r| (q, r))
                }
            }))
        };
        let mut results = Vec::with_capacity(asked.len());
        if seats_first(req, via.backend) && asked.len() > 1 {
            results.extend(ask(&asked[..1]).await?);
            results.extend(ask(&asked[1..]).await?);
        } else {
            results.extend(ask(&asked).await?);
        }
        let mut reads: Vec<Option<QuestionReads>> = (0..asks.len()).map(|_| None).collect();
        for (q, r) in results {
            reads[q] = Some(r);
        }
        Ok(reads)
    }

    /// Sends every read of one question (each order, each node of its read plan, each
    /// slice of ids) and merges them: all at once, or, for a trie, the root first.
    async fn ask_question(
        &self,
        req: &ValidRequest,
        via: Via<'_>,
        question: usize,
        asks: &[Ask],
        sent: &AtomicU64,
    ) -> Result<QuestionReads, PipelineError> {
        let backend = via.backend;
        let plan = &req.rendered()[question].reads;
        let options = req.questions()[question].options.len();
        let billed = req.asked_orders(question);
        let slices: Vec<Slice> = (0..asks.len())
            .flat_map(|ask| {
                plan.nodes.iter().enumerate().flat_map(move |(node, n)| {
                    let per_read = backend.max_ids_per_read(n.ids.len()).max(1);
                    (0..n.ids.len()).step_by(per_read).map(move |s| Slice {
                        ask,
                        node,
                        ids: s..(s + per_read).min(n.ids.len()),
                    })
                })
            })
            .collect();
        let send = |slices: &'_ [Slice]| {
            try_join_all(slices.iter().map(|slice| {
                let node = &plan.nodes[slice.node];
                let request = ReadRequest {
                    content: &asks[slice.ask].content,
                    prefix: &node.prefill,
                    allowed_ids: &node.ids,
                    read_ids: &node.ids[slice.ids.clone()],
                    chained: plan.chained(),
                    routing: via.routing,
                    cache_salt: via.cache_salt,
                };
                let span = via.read_span(options, slice.ask >= billed);
                self.read(req, via, request, sent, span)
            }))
        };
        // A trie's reads share the whole prompt but the prefill: the root's slices go
        // first, alone, so the backend's prefix cache holds the prompt before the other
        // nodes arrive (on a one-slot server they would otherwise all queue behind one cold
        // prompt, each against its own read timeout).
        let first = if plan.nodes.len() > 1 && !backend.shares_prefixes_in_flight() {
            slices
                .iter()
                .take_while(|s| s.ask == 0 && s.node == 0)
                .count()
        } else {
            slices.len()
        };
        let mut replies = send(&slices[..first]).await?;
        replies.extend(send(&slices[first..]).await?);
        Ok(merge_replies(asks, plan, &slices, replies, billed))
    }

    /// One upstream request: wait for a slot, then read within the read timeout, each in
    /// its span (`at` says what the read's says).
    async fn read(
        &self,
        req: &ValidRequest,
        via: Via<'_>,
        request: ReadRequest<'_>,
        sent: &AtomicU64,
        at: ReadSpan<'_>,
    ) -> Result<ReadReply, BackendError> {
        let backend = via.backend;
        // The wait's span only when there is a wait: a span costs ~5 µs traced.
        let permit = match self.in_flight.try_acquire() {
            Some(permit) => permit,
            None => {
                let wait = self.in_flight.acquire();
                spans::permit_wait().scope(wait).await
            }
        };
        sent.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let span = spans::read(req, &at);
        let result = span
            .clone()
            .scope(timeout(self.read_timeout, backend.read(request, permit)))
            .await
            .unwrap_or(Err(BackendError::Timeout));
        let status = status_class(&result);
        spans::read_ended(&span, &result, status);
        self.metrics
            .observe_upstream(backend.dialect(), started.elapsed(), status);
        if let Some((model, replica)) = via.replica {
            self.metrics
                .count_replica_read(model, &replica.label, status);
        }
        if let (Ok(_), Some(answered)) = (&result, via.answered) {
            answered.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

/// Where one request's reads go.
#[derive(Clone, Copy)]
pub(super) struct Via<'a> {
    /// The backend (of a fleet, the chosen replica's).
    pub(super) backend: &'a dyn Backend,
    /// Of a fleet of several: the model's name and the replica, whose reads are counted
    /// (a single URL's fleet of one shows no replica).
    pub(super) replica: Option<(&'a str, &'a Replica)>,
    /// Which replica of the request's order this is (1 the first; 1 for one URL).
    pub(super) attempt: u32,
    /// The routing key every read carries, when the model sends one.
    pub(super) routing: Option<&'a Routing>,
    /// Counts the reads answered, so an unreachable replica is skipped only while none was.
    pub(super) answered: Option<&'a AtomicU64>,
    /// The caller's tenant salt, for a dialect that sends one (`http/auth/salt.rs`).
    pub(super) cache_salt: Option<&'a str>,
    /// The caller's id in the model's position prior.
    pub(super) tenant: &'a str,
}

impl<'a> Via<'a> {
    /// What a read's span says of where it goes, for a question of `options` options (the
    /// position prior's `sample` or not).
    pub(super) fn read_span(&self, options: usize, sample: bool) -> ReadSpan<'a> {
        ReadSpan {
            dialect: self.backend.dialect(),
            replica: self.replica.map(|(_, r)| r.label.as_str()),
            attempt: self.attempt,
            options,
            sample,
        }
    }
}

/// Whether a request's first question goes alone first, to seat the shared prefix: a
/// staged request, unless its backend shares prefixes between requests in flight. Images
/// keep it staged on every backend: whether vLLM encodes an image once for requests that
/// arrive together is not measured here (no vision model runs on this CPU).
fn seats_first(req: &ValidRequest, backend: &dyn Backend) -> bool {
    req.staged() && (!req.images().is_empty() || !backend.shares_prefixes_in_flight())
}

/// The status class label of one upstream read.
pub(in crate::engine) fn status_class<T>(result: &Result<T, BackendError>) -> &'static str {
    match result {
        Ok(_) => "2xx",
        Err(BackendError::RateLimited { .. } | BackendError::Rejected { .. }) => "4xx",
        Err(BackendError::Overloaded { .. } | BackendError::ServerError { .. }) => "5xx",
        Err(BackendError::Timeout | BackendError::ConnectTimeout) => "timeout",
        Err(BackendError::Unreachable) => "unreachable",
        Err(
            BackendError::Protocol(_)
            | BackendError::Dropped(_)
            | BackendError::Missing { .. }
            | BackendError::Contract(_),
        ) => "protocol",
        Err(BackendError::Unsupported(_)) => "unsupported",
    }
}
