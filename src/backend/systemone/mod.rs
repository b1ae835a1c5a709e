//! The `systemone` dialect: a native System One server (`POST <base>/systemone`: TypeSafe,
//! Ollama, vLLM's native route, another `systemone`) answers a whole request at once.
//!
//! How it differs from the chat dialects:
//! * no masked reads: the validated request is forwarded as the contract's body (the
//!   engine builds the caller's fields; this file adds `model` = the upstream model, the
//!   images and the flavor's own fields): the model forwards (`models::Serving::Forwards`)
//!   and the engine sends its requests through [`SystemOneBackend::forward`];
//! * the answer is checked against the contract's types ([`answer`]): a missing or
//!   mistyped field is a 502 that names it (by question position, never by the caller's
//!   ids), never passed on; fields this service does not know are kept;
//! * statuses map as the other dialects' do, plus each flavor's own ([`Quirks`]): 429 and
//!   529 are rate limits with the upstream's wait (capped), 503 overload, 504 a timeout,
//!   other 4xx a rejection with this service's message, other 5xx a 502.
//!
//! Each flavor's quirks are in its own file: [`typesafe`], [`ollama`], [`vllm`] (the trait
//! they implement in `quirks.rs`); the request sent in `native_ask.rs`; the answer's check
//! in [`answer`].

pub mod answer;
mod native_ask;
mod ollama;
mod quirks;
mod typesafe;
mod vllm;

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::host_report::{HostReport, Probe};
use super::http::{exchange_raw, post, RawAnswer};
use super::{BackendError, Due};
use crate::config::Flavor;
use crate::in_flight::{InFlight, InFlightPermit};
use crate::secret::Secret;
pub use answer::{NativeAnswer, NativeReply};
pub use native_ask::NativeAsk;
use quirks::Quirks;

/// Most options one question may have on a server of `flavor`.
pub fn max_options(flavor: Flavor) -> usize {
    SystemOneBackend::quirks(flavor, None).max_options()
}

/// A native System One server serving one model.
// Derived: the key is a `Secret`, whose `Debug` is redacted.
#[derive(Debug)]
pub struct SystemOneBackend {
    /// Shared connection pool.
    client: crate::backend::Pool,
    /// `<base>/systemone`.
    url: String,
    /// The upstream's id for the model (the body's `model`).
    upstream_model: String,
    /// Bearer key for the upstream.
    api_key: Option<Secret>,
    /// The flavor's quirks.
    quirks: Box<dyn Quirks>,
    /// What the startup probe found (flavors that probe): `None` until it concludes.
    probe: Mutex<Option<Result<(), String>>>,
}

impl SystemOneBackend {
    /// The quirks of `flavor`, with the configured `keep_alive` (Ollama only).
    fn quirks(flavor: Flavor, keep_alive: Option<String>) -> Box<dyn Quirks> {
        match flavor {
            Flavor::Typesafe => Box::new(typesafe::TypeSafe),
            Flavor::Ollama => Box::new(ollama::Ollama { keep_alive }),
            Flavor::Vllm => Box::new(vllm::VllmNative),
        }
    }

    /// A native server at `base_url` (ending in `/v1`) of `flavor`.
    pub fn new(
        client: crate::backend::Pool,
        base_url: &str,
        upstream_model: String,
        api_key: Option<Secret>,
        flavor: Flavor,
        keep_alive: Option<String>,
    ) -> Self {
        SystemOneBackend {
            client,
            url: format!("{}/systemone", base_url.trim_end_matches('/')),
            upstream_model,
            api_key,
            quirks: Self::quirks(flavor, keep_alive),
            probe: Mutex::new(None),
        }
    }

    /// A TypeSafe-flavored upstream for `model` at an address nothing listens on: for unit
    /// tests of what is decided before anything is sent.
    #[cfg(test)]
    pub(crate) fn unreachable(model: &str) -> Self {
        let url = "http://127.0.0.1:9/v1";
        Self::new(
            crate::backend::pool::pool(std::time::Duration::from_secs(1), 1)
                .expect("a pool for tests"),
            url,
            model.into(),
            None,
            Flavor::Typesafe,
            None,
        )
    }

    /// The body sent for `ask`: its fields, `model`, the images and the flavor's fields.
    fn body(&self, ask: &NativeAsk<'_>) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("model".into(), Value::from(self.upstream_model.as_str()));
        body.extend(ask.fields.clone());
        if !ask.images.is_empty() {
            body.insert("images".into(), self.quirks.images(ask.images));
        }
        self.quirks.add_fields(&mut body);
        body
    }

    /// Forwards one request under `permit` (held until the upstream is done with it) and
    /// checks its answer. Returns the checked answer and the bytes sent (for estimates).
    pub async fn forward(
        &self,
        ask: &NativeAsk<'_>,
        permit: InFlightPermit,
    ) -> Result<(NativeReply, usize), BackendError> {
        self.refused()?;
        let body = serde_json::to_vec(&self.body(ask))
            .map_err(|e| BackendError::Protocol(format!("cannot encode the request: {e}")))?;
        let sent = body.len();
        let call = post(&self.client, &self.url, self.api_key.as_ref())
            .header(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            )
            .body(body);
        let answer = exchange_raw(call, &Arc::new(permit)).await?;
        self.quirks.note_answer(&answer.headers);
        let body = self.successful(answer)?;
        Ok((answer::check(&body, &ask.questions)?, sent))
    }

    /// The body of a 2xx answer, or the error its status stands for.
    fn successful(&self, answer: RawAnswer) -> Result<Vec<u8>, BackendError> {
        let status = answer.status;
        if (200..300).contains(&status) {
            return Ok(answer.body);
        }
        if let Some(e) = self.quirks.refusal(status, &self.upstream_model) {
            return Err(e);
        }
        let retry_after = self.quirks.retry_after(&answer.headers);
        Err(match status {
            429 | 529 => BackendError::RateLimited { retry_after },
            503 => BackendError::Overloaded { retry_after },
            504 => BackendError::Timeout,
            s @ 400..=499 => BackendError::Rejected { status: s },
            s => BackendError::ServerError { status: s },
        })
    }

    /// The probe's refusal, once it found the model cannot be served natively.
    fn refused(&self) -> Result<(), BackendError> {
        match &*self.probe.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(Err(why)) => Err(BackendError::Unsupported(why.clone())),
            _ => Ok(()),
        }
    }

    /// The startup probe: one noul about a fixed state (this service's words, never a
    /// caller's). An answer settles it as servable; a refusal of the flavor's own
    /// ([`BackendError::Unsupported`]) as refused; anything else leaves it open.
    async fn probe_once(&self, in_flight: &InFlight) -> Due {
        let fields = serde_json::json!({
            "state": "This is a readiness probe of a System One gateway.",
            "questions": {"probe": {"type": "noul", "instructions": "Is this a probe?"}},
        });
        let fields = fields.as_object().cloned().unwrap_or_default();
        let ask = NativeAsk {
            fields,
            images: &[],
            questions: Vec::new(),
        };
        let found = match self.forward(&ask, in_flight.acquire().await).await {
            Ok(_) => Ok(()),
            Err(BackendError::Unsupported(why)) => Err(why),
            Err(e) => {
                tracing::info!(error = %e, "native upstream probe did not conclude");
                return Due::Retry;
            }
        };
        if let Err(why) = &found {
            tracing::warn!(model = %self.upstream_model, reason = %why, "native upstream refused: the model stays disabled");
        }
        *self.probe.lock().unwrap_or_else(|e| e.into_inner()) = Some(found);
        Due::Never
    }
}

/// What a native upstream shares with the chat dialects: a name, a host upkeep (the
/// startup probe, for flavors that probe) and its report.
impl SystemOneBackend {
    /// The dialect's name, for logs and metrics.
    pub fn dialect(&self) -> &'static str {
        "systemone"
    }

    /// Background upkeep: the startup probe, for flavors that probe, and when to come back.
    pub async fn upkeep(&self, in_flight: &InFlight) -> Due {
        if !self.quirks.probes() {
            return Due::Never;
        }
        self.probe_once(in_flight).await
    }

    /// Whether requests may go out: refused once the probe found the model cannot be served.
    pub async fn prepare(&self) -> Result<(), BackendError> {
        self.refused()
    }

    /// What the probe found, for `/readyz` and the metrics; `None` for flavors that do not
    /// probe.
    pub fn host_report(&self) -> Option<HostReport> {
        if !self.quirks.probes() {
            return None;
        }
        let probe = self.probe.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(HostReport {
            probe: match probe {
                None => Probe::Unprobed,
                Some(Ok(())) => Probe::Ready,
                Some(Err(_)) => Probe::Refused,
            },
            refused: probe.and_then(Result::err),
            strategy: None,
            top_logprobs: None,
            token_ids: None,
            logit_bias: None,
            prefill: None,
        })
    }
}
