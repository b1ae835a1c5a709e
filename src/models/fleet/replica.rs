//! [`Replica`]: one of a model's backends behind a [`super::Fleet`], with its own circuit,
//! its own token-table check and its requests in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::backend::Backend;
use crate::models::circuit::{Circuit, CircuitState};
use crate::models::tokens::verify::{Verdict, Verifier};

/// One replica of a model.
#[derive(Debug)]
pub struct Replica {
    /// `host:port` of its URL (no path, no credentials): the metric label and `/readyz`'s
    /// name for it, from the configuration, never from a caller.
    pub label: String,
    /// The dialect's backend at this replica's URL.
    pub backend: Arc<dyn Backend>,
    /// Its own breaker: a failing replica is skipped while the others serve.
    pub circuit: Circuit,
    /// Its own check of the model's token table against its tokenizer: a replica whose
    /// tokenizer differs is taken out until a check passes.
    pub verifier: Verifier,
    /// Its rendezvous seed (a hash of its URL).
    pub(super) seed: u64,
    /// Requests reading from it now (bounded load counts these).
    in_flight: AtomicUsize,
}

/// A request's hold on a replica: counted in its in-flight requests until dropped.
#[derive(Debug)]
pub struct Lease<'a>(&'a Replica);

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Replica {
    /// A replica at `url` reading through `backend`.
    pub fn new(url: &str, backend: Arc<dyn Backend>, circuit: Circuit, verifier: Verifier) -> Self {
        Replica {
            label: label(url),
            backend,
            circuit,
            verifier,
            seed: super::rendezvous::seed(url),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The one replica of a fleet of one (a model's single URL): its breaker is off and its
    /// check turned off, since the model's own circuit and token-table check already judge
    /// the same backend; its label is never shown.
    pub fn alone(backend: Arc<dyn Backend>) -> Self {
        let off = crate::config::CircuitSettings {
            failure_rate: 0,
            eject_after: 0,
            ..Default::default()
        };
        Replica {
            label: String::new(),
            backend,
            circuit: Circuit::new("", off),
            verifier: Verifier::new(std::time::Duration::ZERO, std::time::Duration::ZERO),
            seed: 0,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Counts a request on it until the lease is dropped.
    pub fn lease(&self) -> Lease<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Lease(self)
    }

    /// Requests reading from it now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Whether it may take requests, from memory: its table verified (or checks off) and
    /// its circuit not open; with the reason when not.
    pub fn readiness(&self) -> (bool, Option<String>) {
        let status = self.verifier.status();
        let checked = match status.verdict {
            Verdict::Verified | Verdict::Disabled => None,
            Verdict::Mismatch => Some(
                self.verifier
                    .reason()
                    .map(|r| format!("token table mismatch: {r}"))
                    .unwrap_or_else(|| "token table mismatch".into()),
            ),
            Verdict::Unchecked if status.last_check.is_some() => {
                Some("its tokenizer has not answered a check yet".into())
            }
            Verdict::Unchecked => Some("not checked yet".into()),
        };
        let why = checked.or_else(|| {
            (self.circuit.state() == CircuitState::Open)
                .then(|| "its circuit is open (recent requests failed)".into())
        });
        (why.is_none(), why)
    }
}

/// `host:port` of `url` (the scheme's port when none is given); the URL itself when it
/// does not parse (it then fails on sending, and names itself in the log already).
pub fn label(url: &str) -> String {
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return "unparsed".into();
    };
    let host = uri.host().unwrap_or("unknown");
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    format!("{host}:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_host_and_port_without_credentials_or_path() {
        assert_eq!(label("http://10.0.0.1:8000/v1"), "10.0.0.1:8000");
        assert_eq!(
            label("https://user:secret@vllm.internal/v1"),
            "vllm.internal:443"
        );
        assert_eq!(label("http://vllm/v1"), "vllm:80");
        assert_eq!(label("not a url"), "unparsed");
    }
}
