//! [`Fleet`]: several replicas of one model (`backend_url` listing several URLs), and
//! which one a request reads from.
//!
//! Every read of one request goes to one replica, so the prompts' shared head is computed
//! once; the replica is the first of the request's rendezvous order
//! ([`rendezvous`]: by a hash of that head, so a state asked again lands where its head is
//! cached) that is under the bounded-load cap, whose token table matched its tokenizer and
//! whose circuit admits. The engine tries the next in the order when a replica could not
//! be reached before any read of the request was answered (`engine::pipeline`).
//!
//! Each replica has its own circuit ([`crate::models::circuit`]), its own token-table
//! check (against the model's table; an automatic table is built from the first replica)
//! and its own counters (`replica.rs`).
//!
//! One URL is a fleet of one ([`Fleet::one`]), so a request takes one read path however the
//! model is served. Its replica has no circuit or check of its own (the model's are its),
//! and it is not shown as a replica: no replica metrics, no `replicas` in `/readyz`, no
//! replica in a read's span, as for a model that never had several.

mod rendezvous;
mod replica;

pub use replica::{label, Lease, Replica};

use crate::backend::{Backend, Due, HostReport};
use crate::in_flight::InFlight;
use crate::models::tokens::served::ServedTable;

/// A model's replicas (one URL: a fleet of one).
#[derive(Debug)]
pub struct Fleet {
    /// In configuration order; the first builds an automatic token table.
    replicas: Vec<Replica>,
    /// Their rendezvous seeds, by index.
    seeds: Vec<u64>,
    /// The bounded-load factor (at least 1).
    factor: f64,
}

impl Fleet {
    /// A fleet of `replicas` (in configuration order) with the bounded-load `factor`.
    pub fn new(replicas: Vec<Replica>, factor: f64) -> Self {
        Fleet {
            seeds: replicas.iter().map(|r| r.seed).collect(),
            replicas,
            factor: factor.max(1.0),
        }
    }

    /// The fleet of one replica: a model's single URL, read through `backend`.
    pub fn one(backend: std::sync::Arc<dyn Backend>) -> Self {
        Fleet::new(vec![Replica::alone(backend)], 1.0)
    }

    /// Whether a request that could not be served by one replica has another to try (and
    /// the replicas are shown as such: metrics, `/readyz`, spans).
    pub fn has_several(&self) -> bool {
        self.replicas.len() > 1
    }

    /// The replicas, in configuration order.
    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }

    /// The first configured replica: the dialect's name and host report, token counts and an
    /// automatic table's build come from it.
    pub fn lead(&self) -> &Replica {
        &self.replicas[0]
    }

    /// The order in which a request with `key` tries the replicas: its rendezvous order,
    /// the replicas at or past the bounded-load cap moved to the end. A fleet of one (every
    /// single-URL model, on every request) has the one order without ranking or loads.
    pub fn order(&self, key: u64) -> Vec<usize> {
        if self.replicas.len() == 1 {
            return vec![0];
        }
        let order = rendezvous::order(key, &self.seeds);
        let loads: Vec<usize> = self.replicas.iter().map(Replica::in_flight).collect();
        rendezvous::bounded(&order, &loads, self.factor)
    }

    /// Every replica's host upkeep (the `openai` dialect's probe), side by side; comes back
    /// when the soonest wants to.
    pub async fn upkeep(&self, in_flight: &InFlight) -> Due {
        let dues =
            futures::future::join_all(self.replicas.iter().map(|r| r.backend.upkeep(in_flight)))
                .await;
        dues.into_iter().fold(Due::Never, Due::sooner)
    }

    /// Every replica's check of the model's table against its own tokenizer, side by side;
    /// comes back when the soonest wants to.
    pub async fn check_tables(&self, table: &ServedTable, in_flight: &InFlight) -> Due {
        let table = table.get();
        let dues = futures::future::join_all(self.replicas.iter().map(|r| {
            r.verifier
                .check_against(r.backend.as_ref(), table.as_deref(), in_flight)
        }))
        .await;
        dues.into_iter().fold(Due::Never, Due::sooner)
    }

    /// The lead replica's dialect.
    pub fn dialect(&self) -> &'static str {
        self.lead().backend.dialect()
    }

    /// The lead replica's host report.
    pub fn host_report(&self) -> Option<HostReport> {
        self.lead().backend.host_report()
    }

    /// The backend a model-wide task (token counts, an automatic table's build) asks: the
    /// first replica whose circuit is not open, else the lead.
    pub fn any_backend(&self) -> &dyn Backend {
        self.replicas
            .iter()
            .find(|r| r.circuit.check().is_ok())
            .unwrap_or(self.lead())
            .backend
            .as_ref()
    }
}
