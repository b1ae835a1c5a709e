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
//! one could not be reached before any read was answered ([`crate::models::fleet`]). A
//! single URL is a fleet of one, read the same way: its replica never refuses (the model's
//! circuit and check are its) and its one try ends the request.
//!
//! The steps, each in its file, in the order a request meets them:
//! * the position prior's sample (which single-read requests are asked once more) and its
//!   correction live with the prior ([`super::position_prior`]);
//! * `replicas.rs`: which replica of a fleet a request reads from, the next one when one
//!   could not be reached, and what the model's and each replica's circuit learn;
//! * `reads.rs`: where a request's reads go (`Via`), every question's reads under the
//!   in-flight permit, each within the read timeout and in its span;
//! * `merge.rs`: one question's replies joined into one read per order, with their usage;
//! * `decoding.rs`: each question's reads decoded and calibrated (a profile, the request's
//!   temperature or the model's formula), the prior learning from them on the way;
//! * a model served by a native upstream is forwarded whole instead (`engine/native.rs`).

mod decoding;
mod merge;
mod reads;
mod replicas;

pub(super) use reads::status_class;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::timeout;

use super::answers::{Answers, PipelineError};
use super::context_window;
use super::position_prior;
use super::spans;
use super::tenant::Tenant;
use reads::Via;

use crate::config::UpstreamSettings;
use crate::error::MAX_RETRY_AFTER_SECS;
use crate::in_flight::InFlight;
use crate::metrics::Metrics;
use crate::models::circuit::Ticket;
use crate::models::tokens::verify::Verdict;
use crate::models::Serving;
use crate::request::prompt::plan;
use crate::request::ValidRequest;

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
            Serving::Reads(fleet) => timeout(
                self.request_timeout,
                self.run_fleet(req, fleet, sent, tenant),
            )
            .await
            .unwrap_or(Err(PipelineError::Deadline)),
        };
        replicas::record(ticket, &result);
        result
    }

    /// One request on one backend (`via`), step by step: the prior's sample, the host's
    /// probe, the token table, the token limits and context window, the reads, the decoding.
    async fn run_unbounded(
        &self,
        req: &ValidRequest,
        via: Via<'_>,
        sent: &AtomicU64,
    ) -> Result<Answers, PipelineError> {
        let sampled = position_prior::sample(req, via.tenant);
        if sampled.is_some() {
            spans::prior_sampled();
        }
        let req = sampled.as_ref().unwrap_or(req);
        // A dialect that probes its host knows how to slice the reads only after the probe.
        via.backend.prepare().await?;
        self.check_table(req).await?;
        context_window::settle_limits(req, &self.in_flight).await?;
        let asks = plan(req);
        context_window::fits(req.model(), via.backend, &self.in_flight, &asks).await?;
        let reads = self.ask_all(req, via, asks, sent).await?;
        decoding::decode_all(req, via.tenant, reads, &self.metrics)
    }

    /// Refuses the request while the model's token table is known not to match the
    /// serving tokenizer (waiting only for the model's first check).
    async fn check_table(&self, req: &ValidRequest) -> Result<(), PipelineError> {
        let model = req.model();
        // The wait's span only while the first check is pending (a span costs ~5 µs traced);
        // settled() answers at once after it.
        let verdict = if model.verifier.first_pending() {
            let wait = model.verifier.settled();
            spans::token_table_check().scope(wait).await
        } else {
            model.verifier.settled().await
        };
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
}
