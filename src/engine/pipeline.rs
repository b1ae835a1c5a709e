//! The orchestrator: runs one [`ValidRequest`] from prompt to answers.
//!
//! Every question's reads go out concurrently under the process-wide in-flight cap
//! ([`InFlight`]); with images, a shared history or the `cost` layout the first question
//! goes alone first (`staged`) to seat the shared prefix in the backend's cache, and a
//! trie's root goes before its other nodes, unless the backend shares prefixes between
//! requests in flight (vLLM; images still go staged), where both would only add a round
//! trip. Each read
//! has its own timeout and the whole request a deadline (slot waits included). The first
//! failure drops every other future, which cancels their upstream requests: a caller gets
//! all answers or one error.
//!
//! Every read of a request carries its routing key (a hash of the prompts' shared head) in
//! the model's routing headers; a model with several replicas reads all of a request from
//! one of them, the first of the request's order that takes it, and tries the next when
//! one could not be reached before any read was answered ([`crate::models::fleet`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use tokio::time::{timeout, Instant};
use tracing::Instrument;

use super::answers::{Answers, PipelineError, TokenUsage};
use super::position_prior;
use super::spans::{self, ReadSpan};
use super::tenant::Tenant;

use crate::backend::{Backend, BackendError, ReadReply, ReadRequest, ReadUsage, Routing};
use crate::calibration::prior;
use crate::config::UpstreamSettings;
use crate::engine::decode::{certain, decode, Decoded, OrderRead};
use crate::error::MAX_RETRY_AFTER_SECS;
use crate::in_flight::InFlight;
use crate::metrics::Metrics;
use crate::models::circuit::{CircuitState, Health, Ticket};
use crate::models::fleet::{Fleet, Replica};
use crate::models::tokens::estimate_tokens_for_bytes;
use crate::models::tokens::verify::Verdict;
use crate::models::Serving;
use crate::request::prompt::{plan, Ask};
use crate::request::trie::ReadPlan;
use crate::request::ValidRequest;

/// Decodes question `q`'s reads: with the named profile when it covers the question
/// (decoded at T = 1, then recalibrated), else at the request's temperature or the
/// model's formula for its option count, after the model's position prior is taken out of
/// a single-read request's reads ([`prior`]).
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
                Some(Ok(c)) => corrected(orders, &c, t)?,
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

/// Decodes reads with the prior taken out of each, and says so on the answer.
fn corrected(
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

/// Runs requests; one per process, shared by every handler.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The process-wide cap on upstream requests in flight.
    in_flight: InFlight,
    /// Limit on one upstream read.
    read_timeout: Duration,
    /// Limit on one whole request.
    request_timeout: Duration,
    /// Where upstream latency and status are recorded.
    metrics: Arc<Metrics>,
}

/// What one question's reads returned, before decoding.
struct QuestionReads {
    orders: Vec<OrderRead>,
    usage: TokenUsage,
    model: Option<String>,
}

impl Pipeline {
    /// A pipeline with the given timeouts and cap.
    pub fn new(settings: &UpstreamSettings) -> Self {
        Pipeline {
            in_flight: InFlight::new(settings.max_in_flight),
            read_timeout: settings.read_timeout(),
            request_timeout: settings.request_timeout(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Records upstream latency and status into `metrics` (the ones `/metrics` shows).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Where upstream latency and status are recorded.
    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The in-flight cap (for metrics and tests).
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// The bound on one whole caller request; a front door that runs several requests
    /// for one call (`/v2/rerank`'s batches) holds the call as a whole to it too.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Answers every question of `req`, or fails as a whole. `ticket` is the model's
    /// circuit breaker's admission (taken by the caller, so an open circuit refuses the
    /// request before anything else is counted); it learns the outcome.
    pub async fn run(
        &self,
        req: &ValidRequest,
        ticket: Ticket<'_>,
    ) -> Result<Answers, PipelineError> {
        self.run_counting(req, ticket, &AtomicU64::new(0), &Tenant::default())
            .await
    }

    /// [`Pipeline::run`], counting in `sent` every upstream read it started (whatever its
    /// end), so a caller can tell a failure that sent nothing (and refund it); every read
    /// carries the `tenant`'s salt to a dialect that sends one, and the tenant's own
    /// position prior learns from and corrects its reads.
    pub async fn run_counting(
        &self,
        req: &ValidRequest,
        ticket: Ticket<'_>,
        sent: &AtomicU64,
        tenant: &Tenant,
    ) -> Result<Answers, PipelineError> {
        let result = match &req.model().serving {
            // A native upstream answers the whole request: its own timeout is the deadline.
            Serving::Forwards(upstream) => self.forward(upstream, req, sent).await,
            Serving::Reads(backend) => {
                let routing = routing(req);
                let via = Via::direct(backend.as_ref(), routing.as_ref(), tenant);
                timeout(self.request_timeout, self.run_unbounded(req, via, sent))
                    .await
                    .unwrap_or(Err(PipelineError::Deadline))
            }
            Serving::Fleet(fleet) => timeout(
                self.request_timeout,
                self.run_fleet(req, fleet, sent, tenant),
            )
            .await
            .unwrap_or(Err(PipelineError::Deadline)),
        };
        record(ticket, &result);
        result
    }

    /// Runs `req` on one replica of `fleet`: the first in the request's order (rendezvous,
    /// bounded by load) whose table matched its tokenizer and whose circuit admits. Reads
    /// are idempotent, so the request goes on to the next replica when one could not be
    /// reached (refused, no connection within the connect timeout, or a connection that
    /// broke before an answer) before any read was answered, or when one answered with
    /// something that is not a valid completion. Each replica's circuit learns its own
    /// outcome; the model's circuit (the caller's ticket) the request's.
    async fn run_fleet(
        &self,
        req: &ValidRequest,
        fleet: &Fleet,
        sent: &AtomicU64,
        tenant: &Tenant,
    ) -> Result<Answers, PipelineError> {
        let key = req.head_key();
        let routing = Routing::new(&req.model().routing_headers, &key.hex());
        let mut skipped = Skipped::default();
        let mut garbled = Garbled::default();
        for (attempt, index) in (1..).zip(fleet.order(key.as_u64())) {
            let replica = &fleet.replicas()[index];
            if replica.verifier.settled().await == Verdict::Mismatch {
                skipped.mismatch(replica.verifier.seconds_to_next_check());
                continue;
            }
            let ticket = match replica.circuit.admit() {
                Ok(ticket) => ticket,
                Err(open) => {
                    skipped.open(open.retry_after);
                    continue;
                }
            };
            let _lease = replica.lease();
            let answered = AtomicU64::new(0);
            let via = Via {
                backend: replica.backend.as_ref(),
                replica: Some((&req.model().name, replica)),
                attempt,
                routing: routing.as_ref(),
                answered: Some(&answered),
                cache_salt: tenant.cache_salt.as_deref(),
                tenant: &tenant.prior,
            };
            let result = self.run_unbounded(req, via, sent).await;
            if result.as_ref().is_err_and(PipelineError::is_garbled) {
                tracing::warn!(model = %req.model().name, replica = %replica.label, "replica answered with something that is not a valid completion: trying the next in its order");
                garbled.hold(ticket);
                skipped.failed = result.err();
                continue;
            }
            garbled.settle(result.is_ok());
            record_replica(fleet, index, ticket, &result);
            if unreached(&result) && answered.load(Ordering::Relaxed) == 0 {
                tracing::warn!(model = %req.model().name, replica = %replica.label, "replica unreachable before any read of the request was answered: trying the next in its order");
                skipped.failed = result.err();
                continue;
            }
            return result;
        }
        Err(skipped.into_error())
    }

    async fn run_unbounded(
        &self,
        req: &ValidRequest,
        via: Via<'_>,
        sent: &AtomicU64,
    ) -> Result<Answers, PipelineError> {
        let backend = via.backend;
        let sampled = position_prior::sample(req, via.tenant);
        if sampled.is_some() {
            spans::prior_sampled();
        }
        let req = sampled.as_ref().unwrap_or(req);
        // A dialect that probes its host knows how to slice the reads only after the probe.
        backend.prepare().await?;
        self.check_table(req).await?;
        super::context_window::settle_limits(req, &self.in_flight).await?;
        let asks = plan(req);
        super::context_window::fits(req.model(), backend, &self.in_flight, &asks).await?;
        let mut reads = self.ask_all(req, via, asks, sent).await?;
        let mut usage = TokenUsage::default();
        let mut model = None;
        let mut answers = Vec::with_capacity(reads.len());
        for (q, r) in reads.iter_mut().enumerate() {
            let Some(r) = r.take() else {
                answers.push(certain());
                continue;
            };
            let span = spans::decode(req.questions()[q].options.len(), r.orders.len());
            answers.push(
                span.in_scope(|| decode_question(req, via.tenant, q, &r.orders, &self.metrics))?,
            );
            usage.add(&r.usage);
            model = model.or(r.model);
        }
        Ok(Answers {
            answers,
            usage,
            model: model.unwrap_or_else(|| req.model().upstream_model.clone()),
        })
    }

    /// Refuses the request while the model's token table is known not to match the
    /// serving tokenizer (waiting only for the model's first check).
    async fn check_table(&self, req: &ValidRequest) -> Result<(), PipelineError> {
        let model = req.model();
        let verdict = model
            .verifier
            .settled()
            .instrument(spans::token_table_check())
            .await;
        if verdict == Verdict::Mismatch {
            return Err(PipelineError::TableMismatch(
                model
                    .verifier
                    .seconds_to_next_check()
                    .min(MAX_RETRY_AFTER_SECS),
            ));
        }
        Ok(())
    }

    /// Every question with two or more options, read concurrently (the first alone first
    /// when the request is staged); `None` for the questions answered without asking.
    async fn ask_all(
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
        let permit = self
            .in_flight
            .acquire()
            .instrument(spans::permit_wait())
            .await;
        sent.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let span = spans::read(req, &at);
        let result = timeout(self.read_timeout, backend.read(request, permit))
            .instrument(span.clone())
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

/// Whether a replica could not be reached: refused, no connection within the connect
/// timeout, or a connection that broke before an answer.
fn unreached(result: &Result<Answers, PipelineError>) -> bool {
    matches!(
        result,
        Err(PipelineError::Backend(
            BackendError::Unreachable | BackendError::ConnectTimeout | BackendError::Dropped(_)
        ))
    )
}

/// Tells a circuit how a request went.
fn record(ticket: Ticket<'_>, result: &Result<Answers, PipelineError>) {
    ticket.record(health(result));
}

/// What a request says about its backend: a success only when it sent reads.
fn health(result: &Result<Answers, PipelineError>) -> Health {
    match result {
        Ok(outcome) if outcome.usage.upstream_requests > 0 => Health::Success,
        Ok(_) => Health::Neutral,
        Err(e) => e.health(),
    }
}

/// Tells replica `index`'s circuit how the request went; while no other replica of the
/// fleet is closed, its run of failures cannot take it out (a stall that hits every
/// replica leaves one serving; the failure rate still judges it).
fn record_replica(
    fleet: &Fleet,
    index: usize,
    ticket: Ticket<'_>,
    result: &Result<Answers, PipelineError>,
) {
    let others_serve = fleet
        .replicas()
        .iter()
        .enumerate()
        .any(|(i, r)| i != index && r.circuit.state() == CircuitState::Closed);
    if others_serve {
        ticket.record(health(result));
    } else {
        ticket.record_sparing(health(result));
    }
}

/// The circuits of the replicas that answered one request with garbage, until another
/// replica shows whose fault it was: when a later one answers the same request, theirs
/// (each counts a failure); when none does, maybe the request's (nothing is counted), so a
/// caller cannot open replicas' circuits with requests no replica can answer.
#[derive(Default)]
struct Garbled<'a>(Vec<Ticket<'a>>);

impl<'a> Garbled<'a> {
    fn hold(&mut self, ticket: Ticket<'a>) {
        self.0.push(ticket);
    }

    /// Another replica ended the request: `answered` when it answered.
    fn settle(&mut self, answered: bool) {
        for ticket in self.0.drain(..) {
            if answered {
                ticket.record(Health::Failure);
            }
        }
    }
}

/// The routing key of a request read from one URL, when its model sends one (for a router
/// in front of the URL).
fn routing(req: &ValidRequest) -> Option<Routing> {
    let headers = &req.model().routing_headers;
    if headers.is_empty() {
        return None;
    }
    Routing::new(headers, &req.head_key().hex())
}

/// Where one request's reads go.
#[derive(Clone, Copy)]
struct Via<'a> {
    /// The backend (of a fleet, the chosen replica's).
    backend: &'a dyn Backend,
    /// Of a fleet: the model's name and the replica, whose reads are counted.
    replica: Option<(&'a str, &'a Replica)>,
    /// Which replica of the request's order this is (1 the first; 1 for one URL).
    attempt: u32,
    /// The routing key every read carries, when the model sends one.
    routing: Option<&'a Routing>,
    /// Of a fleet: counts the reads answered, so an unreachable replica is skipped only
    /// while none was.
    answered: Option<&'a AtomicU64>,
    /// The caller's tenant salt, for a dialect that sends one (`http/auth/salt.rs`).
    cache_salt: Option<&'a str>,
    /// The caller's id in the model's position prior.
    tenant: &'a str,
}

impl<'a> Via<'a> {
    /// What a read's span says of where it goes, for a question of `options` options (the
    /// position prior's `sample` or not).
    fn read_span(&self, options: usize, sample: bool) -> ReadSpan<'a> {
        ReadSpan {
            dialect: self.backend.dialect(),
            replica: self.replica.map(|(_, r)| r.label.as_str()),
            attempt: self.attempt,
            options,
            sample,
        }
    }

    /// Straight to a model's one backend.
    fn direct(backend: &'a dyn Backend, routing: Option<&'a Routing>, tenant: &'a Tenant) -> Self {
        Via {
            backend,
            replica: None,
            attempt: 1,
            routing,
            answered: None,
            cache_salt: tenant.cache_salt.as_deref(),
            tenant: &tenant.prior,
        }
    }
}

/// Why a fleet found no replica to read from.
#[derive(Debug, Default)]
struct Skipped {
    /// The soonest check of a replica whose table did not match its tokenizer, in seconds.
    mismatch: Option<u64>,
    /// The soonest an open circuit among them lets a probe through, in seconds.
    open: Option<u64>,
    /// Why the last replica tried did not serve the request (refused, not within the
    /// connect timeout, a connection that broke before an answer, or garbage).
    failed: Option<PipelineError>,
}

impl Skipped {
    fn open(&mut self, retry_after: u64) {
        self.open = Some(self.open.map_or(retry_after, |s| s.min(retry_after)));
    }

    fn mismatch(&mut self, next_check: u64) {
        let next = next_check.min(MAX_RETRY_AFTER_SECS);
        self.mismatch = Some(self.mismatch.map_or(next, |s| s.min(next)));
    }

    /// The error the request ends with: the last replica's when none it tried served it
    /// (a failure of the backend, as with one URL), else the replicas out of service.
    fn into_error(self) -> PipelineError {
        match self {
            Skipped {
                failed: Some(why), ..
            } => why,
            Skipped {
                open: Some(retry_after),
                ..
            } => PipelineError::ReplicasOut(retry_after),
            Skipped { mismatch, .. } => PipelineError::TableMismatch(mismatch.unwrap_or(1)),
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
pub(super) fn status_class<T>(result: &Result<T, BackendError>) -> &'static str {
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

/// One upstream read of a question: which order, which node of the read plan, which ids
/// of that node.
struct Slice {
    ask: usize,
    node: usize,
    ids: std::ops::Range<usize>,
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
fn merge_replies(
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
