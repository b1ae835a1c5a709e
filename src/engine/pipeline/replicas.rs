//! Reads on replicas: a model with several runs each request on one replica of its
//! [`Fleet`], the first of the request's order that may take it, and goes on to the next when
//! one could not be reached before any read was answered or answered with garbage; what the
//! model's circuit and each replica's learn from the request.

use std::sync::atomic::{AtomicU64, Ordering};

use super::reads::Via;
use super::Pipeline;
use crate::backend::{BackendError, Routing};
use crate::engine::answers::{Answers, PipelineError};
use crate::engine::tenant::Tenant;
use crate::error::MAX_RETRY_AFTER_SECS;
use crate::models::circuit::{CircuitState, Health, Ticket};
use crate::models::fleet::{Fleet, Replica};
use crate::models::tokens::verify::Verdict;
use crate::request::ValidRequest;

impl Pipeline {
    /// Runs `req` on one replica of `fleet`: the first in the request's order (rendezvous,
    /// bounded by load) whose table matched its tokenizer and whose circuit admits. Reads
    /// are idempotent, so the request goes on to the next replica when one could not be
    /// reached ([`unreached`]) before any read was answered, or answered with something
    /// that is not a valid completion. Each replica's circuit learns its own outcome; the
    /// model's circuit (the caller's ticket) the request's.
    pub(super) async fn run_fleet(
        &self,
        req: &ValidRequest,
        fleet: &Fleet,
        sent: &AtomicU64,
        tenant: &Tenant,
    ) -> Result<Answers, PipelineError> {
        let key = req.head_key();
        let routing = Routing::new(&req.model().routing_headers, &key.hex());
        let several = fleet.has_several();
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
                replica: several.then(|| (req.model().name.as_str(), replica)),
                attempt,
                routing: routing.as_ref(),
                answered: Some(&answered),
                cache_salt: tenant.cache_salt.as_deref(),
                tenant: &tenant.prior,
            };
            let result = self.run_unbounded(req, via, sent).await;
            if result.as_ref().is_err_and(PipelineError::is_garbled) {
                skipping(several, req, replica, GARBLED);
                garbled.hold(ticket);
                skipped.failed = result.err();
                continue;
            }
            garbled.settle(result.is_ok());
            record_replica(fleet, index, ticket, &result);
            if unreached(&result) && answered.load(Ordering::Relaxed) == 0 {
                skipping(several, req, replica, UNREACHED);
                skipped.failed = result.err();
                continue;
            }
            return result;
        }
        Err(skipped.into_error())
    }
}

/// Why a replica was skipped for the next: it answered with garbage.
const GARBLED: &str = "answered with something that is not a valid completion";
/// Why a replica was skipped for the next: it could not be reached in time.
const UNREACHED: &str = "unreachable before any read of the request was answered";

/// Logs that `replica` is skipped `why` for the next in the request's order; a fleet of one
/// (a single URL) has no next, and its one try ends the request without this line.
fn skipping(several: bool, req: &ValidRequest, replica: &Replica, why: &str) {
    if several {
        tracing::warn!(model = %req.model().name, replica = %replica.label, "replica {why}: trying the next in its order");
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
pub(super) fn record(ticket: Ticket<'_>, result: &Result<Answers, PipelineError>) {
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
