//! [`Serving`]: how a model's requests are answered, one of two roles. A model either reads
//! through a chat dialect (the engine lowers each question into masked reads), on a
//! [`Fleet`] of its replicas (one URL is a fleet of one), or forwards whole requests to a
//! native System One upstream, which reads for itself. What both share
//! (the dialect's name, the host's upkeep and report) is asked of the enum, never of a
//! downcast.

use std::sync::Arc;

use super::fleet::Fleet;
use crate::backend::systemone::SystemOneBackend;
use crate::backend::{Backend, Due, HostReport};
use crate::in_flight::InFlight;

/// How a model's requests are answered.
#[derive(Debug, Clone)]
pub enum Serving {
    /// Masked reads through a chat dialect, each request's on one replica of the fleet.
    Reads(Arc<Fleet>),
    /// Whole requests forwarded to a native System One upstream.
    Forwards(Arc<SystemOneBackend>),
}

impl Serving {
    /// The dialect's name, for logs, metrics and `/readyz`.
    pub fn dialect(&self) -> &'static str {
        match self {
            Serving::Reads(fleet) => fleet.dialect(),
            Serving::Forwards(upstream) => upstream.dialect(),
        }
    }

    /// What the host's upkeep found, for `/readyz` and the metrics; `None` when there is
    /// nothing to find out.
    pub fn host_report(&self) -> Option<HostReport> {
        match self {
            Serving::Reads(fleet) => fleet.host_report(),
            Serving::Forwards(upstream) => upstream.host_report(),
        }
    }

    /// The host's background upkeep (a probe): runs what is due now and says when to come
    /// back. Only the model's upkeep task calls it.
    pub async fn upkeep(&self, in_flight: &InFlight) -> Due {
        match self {
            Serving::Reads(fleet) => fleet.upkeep(in_flight).await,
            Serving::Forwards(upstream) => upstream.upkeep(in_flight).await,
        }
    }

    /// The dialect the model reads through (of a fleet, the first replica whose circuit is
    /// not open: for token counts and an automatic table's build); `None` when it forwards
    /// (nothing to read with, tokenize with or check a token table against).
    pub fn reads(&self) -> Option<&dyn Backend> {
        match self {
            Serving::Reads(fleet) => Some(fleet.any_backend()),
            Serving::Forwards(_) => None,
        }
    }

    /// The model's replicas, when it has several (a fleet of one, a single URL, shows no
    /// replicas: its model's circuit and token-table check are its own).
    pub fn fleet(&self) -> Option<&Fleet> {
        match self {
            Serving::Reads(fleet) if fleet.has_several() => Some(fleet),
            _ => None,
        }
    }
}

impl<B: Backend + 'static> From<Arc<B>> for Serving {
    fn from(backend: Arc<B>) -> Self {
        Serving::Reads(Arc::new(Fleet::one(backend)))
    }
}

impl From<Arc<SystemOneBackend>> for Serving {
    fn from(upstream: Arc<SystemOneBackend>) -> Self {
        Serving::Forwards(upstream)
    }
}
