//! The `openai` dialect: any OpenAI-compatible host (SGLang, TGI, Ollama's `/v1`, LM Studio,
//! llama-server, hosted APIs), `POST <base>/chat/completions` with standard fields only,
//! read the way a startup **probe** found the host can be read exactly, or refused.
//!
//! Hosts differ in what decides whether a masked distribution can be read at all, so
//! nothing is guessed: the model's upkeep task asks the host a few small questions first
//! (at startup, retried with backoff until one concludes; `probe.rs`):
//! * **logprobs and their cap**: `top_logprobs` of 1000, 20 and 5 in turn (hosts reject
//!   values above their cap with a 4xx, or return fewer); none at all is refused;
//! * **token ids**: an `id` or `token_id` field, `token_id:N` strings, or only the text
//!   (then each option is found by its label text from the token table, and the report
//!   says so);
//! * **the prefill**: a trailing assistant message `x y x y … x` must be continued with
//!   ` y`, and with one more ` y` with ` x` (a host that answers the message instead of
//!   continuing it predicts the same either way). Tried as a plain trailing message, then
//!   with `continue_final_message`; a host that continues neither is refused;
//! * **`logit_bias`**: +100 on the option label the unbiased read found least likely. The
//!   sampled token says whether the bias is honoured; its returned logprob says whether the
//!   logprobs are taken after the bias (then it is near 0) or before it.
//!
//! The strategy follows (each exact when its condition holds, never approximate):
//! 1. **post-bias logprobs** (`post_bias`): every option of the read is biased by the same
//!    +100, so the options' returned logprobs, renormalised, are exactly the masked
//!    distribution; the option mass is then unknown (`option_mass_unknown`, as llama.cpp's
//!    fallback). With more options than the cap, **anchor merge**: the engine slices the
//!    options into groups of at most cap − 1 ([`Backend::max_ids_per_read`]); each read
//!    biases its group plus one anchor shared by all groups (the question's first option)
//!    and returns each option's log-ratio to the anchor, which is the same in every read of
//!    the one prompt (the common bias and normaliser cancel), so the groups merge exactly.
//! 2. **pre-bias logprobs or no working bias** (`raw_top_k`): the raw top-K read (no
//!    bias), as the llama.cpp dialect's first read: the options' raw logprobs renormalised,
//!    with their mass. Exact when every option is in the top-K; when not, a 502 naming how
//!    many are missing, never a zero.
//!
//! A trie node of multi-token labels (`chained`) is always read raw: the chain rule adds
//! raw conditionals, and a post-bias read would give each node's masked one instead.
//!
//! Only standard fields are sent (strict hosts reject unknown ones): `temperature: 1` and
//! `top_p: 1`, because some hosts take logprobs after temperature scaling; `max_tokens: 1`;
//! a fixed `seed`. No prefix-cache or tokenizer extras: the live token-table check needs a
//! tokenizer endpoint plain OpenAI lacks, so this dialect's check is the probe's (the label
//! ids it sees must carry the label texts the table says).

//!
//! The files: this one holds the backend; `host.rs` what the probe found ([`Host`]);
//! `label_texts.rs` the label texts; `probe.rs` the probe; `read.rs` the two read
//! strategies.

mod host;
mod label_texts;
mod probe;
mod read;

use host::{empty_report, Host, ProbeState};
pub use label_texts::LabelTexts;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::Serialize;

use super::host_report::{LogitBias, Probe};
use super::http::{exchange, post};
use super::{Backend, BackendError, Due, HostReport, ReadReply, ReadRequest};
use crate::in_flight::{InFlight, InFlightPermit};
use crate::secret::Secret;

/// An OpenAI-compatible host serving one model.
// Derived: the key is a `Secret`, whose `Debug` is redacted.
#[derive(Debug)]
pub struct CompatBackend {
    /// Shared connection pool.
    client: crate::backend::Pool,
    /// `<base>/chat/completions`.
    url: String,
    /// The host's model id.
    upstream_model: String,
    /// Bearer key for the host.
    api_key: Option<Secret>,
    /// Label texts, for text-only hosts and the probe.
    labels: LabelTexts,
    /// The probe's verdict; held only to read or write it, never across a request.
    state: Mutex<ProbeState>,
    /// Bumped each time a probe finishes, so requests that arrive before the first one
    /// finished wait for it (never for later ones).
    probed: tokio::sync::watch::Sender<u64>,
    /// Bound on one whole probe.
    probe_timeout: Duration,
}

impl CompatBackend {
    /// A backend at `base_url` (ending in `/v1`); `probe_timeout` bounds one probe.
    pub fn new(
        client: crate::backend::Pool,
        base_url: &str,
        upstream_model: String,
        api_key: Option<Secret>,
        labels: LabelTexts,
        probe_timeout: Duration,
    ) -> Self {
        CompatBackend {
            client,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            upstream_model,
            api_key,
            labels,
            state: Mutex::new(ProbeState::Unprobed(None)),
            probed: tokio::sync::watch::channel(0).0,
            probe_timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ProbeState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The host to read, or why there is none.
    fn host(&self) -> Result<Host, BackendError> {
        match &*self.lock() {
            ProbeState::Ready(host) => Ok(*host),
            ProbeState::Refused { what, .. } => Err(BackendError::Unsupported(what.clone())),
            ProbeState::Unprobed(Some(e)) => Err(e.clone()),
            ProbeState::Unprobed(None) => Err(BackendError::Unsupported(
                "the OpenAI-compatible host has not been probed yet".into(),
            )),
        }
    }

    /// A POST of `body`, with a read's routing key when it has one.
    async fn post(
        &self,
        body: &impl Serialize,
        routing: Option<&crate::backend::Routing>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<Vec<u8>, BackendError> {
        let call = post(&self.client, &self.url, self.api_key.as_ref())
            .routed(routing)
            .json(body);
        exchange(call, slot).await
    }
}

impl Backend for CompatBackend {
    fn dialect(&self) -> &'static str {
        "openai"
    }

    /// Post-bias hosts read more options than their cap in groups of cap − 1 (each plus
    /// the anchor); raw reads take every option at once.
    fn max_ids_per_read(&self, ids: usize) -> usize {
        match &*self.lock() {
            ProbeState::Ready(host) if host.bias == LogitBias::AfterLogprobs && ids > host.cap => {
                (host.cap - 1).max(1)
            }
            _ => usize::MAX,
        }
    }

    fn read<'a>(
        &'a self,
        request: ReadRequest<'a>,
        permit: InFlightPermit,
    ) -> BoxFuture<'a, Result<ReadReply, BackendError>> {
        let slot = Arc::new(permit);
        async move { self.send(request, &slot).await }.boxed()
    }

    /// Plain OpenAI has no tokenizer endpoint; the probe checks the label ids it sees.
    fn tokenize<'a>(
        &'a self,
        texts: &'a [String],
        permit: InFlightPermit,
    ) -> BoxFuture<'a, Result<Vec<Vec<u32>>, BackendError>> {
        let _ = (texts, permit);
        futures::future::ready(Err(BackendError::Protocol(
            "an OpenAI-compatible host has no tokenizer endpoint".into(),
        )))
        .boxed()
    }

    fn upkeep<'a>(&'a self, in_flight: &'a InFlight) -> BoxFuture<'a, Due> {
        self.probe_if_due(in_flight).boxed()
    }

    fn prepare(&self) -> BoxFuture<'_, Result<(), BackendError>> {
        self.ready_host().boxed()
    }

    fn host_report(&self) -> Option<HostReport> {
        Some(match &*self.lock() {
            ProbeState::Ready(host) => host.report(),
            ProbeState::Refused { what, .. } => HostReport {
                probe: Probe::Refused,
                refused: Some(what.clone()),
                ..empty_report()
            },
            ProbeState::Unprobed(_) => empty_report(),
        })
    }
}
