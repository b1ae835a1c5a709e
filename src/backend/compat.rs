//! The `openai` dialect: any OpenAI-compatible host (SGLang, TGI, Ollama's `/v1`, LM Studio,
//! llama-server, hosted APIs), `POST <base>/chat/completions` with standard fields only,
//! read the way a startup **probe** found the host can be read exactly, or refused.
//!
//! Hosts differ in what decides whether a masked distribution can be read at all, so
//! nothing is guessed: [`CompatBackend::prepare`] asks the host a few small questions first
//! (at startup, and before the first read if the startup probe did not conclude):
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::http::exchange;
use super::openai::{ChatResponse, TokenLogprobs, TopLogprob};
use super::{Backend, BackendError, Due, HostReport, Messages, ReadReply, ReadRequest, ReadUsage};
use crate::limits::{InFlight, InFlightPermit};
use crate::secret::Secret;

/// The bias that makes a group of options the top of the distribution (hosted APIs accept
/// at most ±100).
const GROUP_BIAS: f64 = 100.0;
/// `top_logprobs` values the probe tries, largest first: the llama.cpp dialect's raw K,
/// hosted APIs' and Ollama's 20, TGI's default `top_n_tokens` cap of 5.
const CAP_CANDIDATES: [usize; 3] = [1000, 20, 5];
/// The prefill probe: a pattern whose continuation flips with its last letter.
const PATTERN: &str = "x y x y x y x y x y x";
/// How long a refusal stands before the host is probed again (it may have been redeployed).
const REPROBE_REFUSED_AFTER: Duration = Duration::from_secs(600);
/// `ln 0.5`: a biased token above it took the bias into its logprob.
const LN_HALF: f64 = -std::f64::consts::LN_2;

/// How the host names the tokens of its logprob entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenIds {
    /// An `id` field (llama.cpp) or a `token_id` field.
    Field,
    /// Tokens written `token_id:N`.
    Strings,
    /// Only the text: options are found by their label text.
    Text,
}

/// What `logit_bias` does on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bias {
    /// Honoured, and the returned logprobs include it.
    AfterLogprobs,
    /// Honoured, but the returned logprobs are raw.
    BeforeLogprobs,
    /// Not honoured (or refused).
    Ignored,
}

/// Which request field makes the host continue the `answer=` prefill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prefill {
    /// A trailing assistant message is continued as it is.
    TrailingMessage,
    /// `continue_final_message: true` with `add_generation_prompt: false`.
    ContinueFinalMessage,
}

/// What the probe found out about the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Host {
    /// Most `top_logprobs` entries one answer carries.
    cap: usize,
    /// How its entries name tokens.
    ids: TokenIds,
    /// What `logit_bias` does to its logprobs.
    bias: Bias,
    /// What continues the `answer=` prefill.
    prefill: Prefill,
}

impl Host {
    /// The strategy's name for `/readyz`, the metric and the log.
    fn strategy(&self) -> &'static str {
        match self.bias {
            Bias::AfterLogprobs => "post_bias",
            Bias::BeforeLogprobs | Bias::Ignored => "raw_top_k",
        }
    }

    fn report(&self) -> HostReport {
        HostReport {
            probe: "ready",
            strategy: Some(self.strategy()),
            refused: None,
            top_logprobs: Some(self.cap),
            token_ids: Some(match self.ids {
                TokenIds::Field => "id",
                TokenIds::Strings => "token_id:N",
                TokenIds::Text => "text",
            }),
            logit_bias: Some(match self.bias {
                Bias::AfterLogprobs => "after_logprobs",
                Bias::BeforeLogprobs => "before_logprobs",
                Bias::Ignored => "ignored",
            }),
            prefill: Some(match self.prefill {
                Prefill::TrailingMessage => "trailing_message",
                Prefill::ContinueFinalMessage => "continue_final_message",
            }),
        }
    }
}

/// The probe's standing verdict.
#[derive(Debug, Clone)]
enum ProbeState {
    /// No probe has concluded: none finished yet (`None`), or the last one could not
    /// conclude, for this reason (refused requests are answered with it).
    Unprobed(Option<BackendError>),
    Ready(Host),
    /// The host cannot be read exactly; since when.
    Refused {
        what: String,
        since: Instant,
    },
}

/// The text of every label token the token table names, for hosts that return token text
/// only, and the single-token labels the bias probe uses.
#[derive(Debug, Clone, Default)]
pub struct LabelTexts {
    /// The prefill (`answer=`).
    prefix: String,
    /// Single-token labels: `(id, text)`, in table order.
    singles: Vec<(u32, String)>,
    /// Every label token's text; an id two labels give different texts is left out.
    by_id: HashMap<u32, String>,
}

impl LabelTexts {
    /// From the prefix, the single-token labels and the tokens of the multi-token labels
    /// (each `(id, text)`: one character per token).
    pub fn new(
        prefix: String,
        singles: Vec<(u32, String)>,
        multi: impl IntoIterator<Item = (u32, String)>,
    ) -> Self {
        let mut by_id: HashMap<u32, String> = HashMap::new();
        let mut ambiguous = Vec::new();
        for (id, text) in singles.iter().cloned().chain(multi) {
            match by_id.get(&id) {
                Some(seen) if *seen != text => ambiguous.push(id),
                Some(_) => {}
                None => {
                    by_id.insert(id, text);
                }
            }
        }
        for id in ambiguous {
            by_id.remove(&id);
        }
        LabelTexts {
            prefix,
            singles,
            by_id,
        }
    }
}

/// An OpenAI-compatible host serving one model.
pub struct CompatBackend {
    /// Shared connection pool.
    client: reqwest::Client,
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

impl std::fmt::Debug for CompatBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompatBackend")
            .field("upstream_model", &self.upstream_model)
            .field("api_key", &self.api_key)
            .finish_non_exhaustive()
    }
}

/// `logit_bias` as OpenAI writes it: `{"<id>": bias, …}`.
struct LogitBias<'a>(&'a [u32]);

impl Serialize for LogitBias<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for id in self.0 {
            map.serialize_entry(&id.to_string(), &GROUP_BIAS)?;
        }
        map.end()
    }
}

/// The request body of one read.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Messages<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    continue_final_message: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    add_generation_prompt: Option<bool>,
    max_tokens: u32,
    temperature: f64,
    top_p: f64,
    seed: u32,
    logprobs: bool,
    top_logprobs: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    logit_bias: Option<LogitBias<'a>>,
}

/// Why a probe did not end in a host to read.
enum ProbeFailure {
    /// The host answered, and lacks what an exact read needs.
    Refused(String),
    /// The host did not answer usefully (down, 5xx, 429, timeout): try again later.
    Inconclusive(BackendError),
}

impl From<BackendError> for ProbeFailure {
    fn from(e: BackendError) -> Self {
        ProbeFailure::Inconclusive(e)
    }
}

/// One parsed probe answer: the answer position's sampled token and its top entries.
struct Seen {
    sampled_id: Option<u64>,
    sampled_text: Option<String>,
    /// `(id, text, logprob)` per entry, in the host's order.
    top: Vec<(Option<u64>, Option<String>, f64)>,
}

impl Seen {
    /// The entry with the highest logprob.
    fn best(&self) -> Option<&(Option<u64>, Option<String>, f64)> {
        self.top.iter().max_by(|a, b| a.2.total_cmp(&b.2))
    }

    /// The logprob of the label `(id, text)`, found by id or, failing that, by text.
    fn logprob_of(&self, id: u32, text: &str) -> Option<f64> {
        self.top
            .iter()
            .find(|(i, t, _)| match i {
                Some(i) => *i == u64::from(id),
                None => t.as_deref() == Some(text),
            })
            .map(|e| e.2)
    }
}

impl CompatBackend {
    /// A backend at `base_url` (ending in `/v1`); `probe_timeout` bounds one probe.
    pub fn new(
        client: reqwest::Client,
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

    /// When the next probe is due: now while none concluded, never once the host is
    /// ready, and [`REPROBE_REFUSED_AFTER`] after a refusal (it may have been redeployed).
    fn probe_due(&self) -> Due {
        match &*self.lock() {
            ProbeState::Unprobed(_) => Due::Retry,
            ProbeState::Ready(_) => Due::Never,
            ProbeState::Refused { since, .. } => {
                Due::In(REPROBE_REFUSED_AFTER.saturating_sub(since.elapsed()))
            }
        }
    }

    /// Probes the host when a probe is due (the upkeep task only), and says when the next
    /// one is.
    async fn probe_if_due(&self, in_flight: &InFlight) -> Due {
        if matches!(self.probe_due(), Due::Retry | Due::In(Duration::ZERO)) {
            let outcome = tokio::time::timeout(self.probe_timeout, self.probe(in_flight))
                .await
                .unwrap_or(Err(ProbeFailure::Inconclusive(BackendError::Timeout)));
            self.record(outcome);
            self.probed.send_modify(|n| *n += 1);
        }
        self.probe_due()
    }

    /// The host to read, from the last probe's verdict; before the first probe finished,
    /// waits for it (bounded by the probe timeout).
    async fn ready_host(&self) -> Result<(), BackendError> {
        let mut probed = self.probed.subscribe();
        if matches!(&*self.lock(), ProbeState::Unprobed(None)) {
            let _ = tokio::time::timeout(self.probe_timeout, probed.changed()).await;
        }
        self.host().map(|_| ())
    }

    /// Applies a probe's outcome and logs it once.
    fn record(&self, outcome: Result<Host, ProbeFailure>) {
        match outcome {
            Ok(host) => {
                let r = host.report();
                tracing::info!(
                    upstream_model = %self.upstream_model,
                    strategy = host.strategy(),
                    top_logprobs = host.cap,
                    token_ids = r.token_ids,
                    logit_bias = r.logit_bias,
                    prefill = r.prefill,
                    "OpenAI-compatible host probed"
                );
                *self.lock() = ProbeState::Ready(host);
            }
            Err(ProbeFailure::Refused(what)) => {
                tracing::error!(
                    upstream_model = %self.upstream_model,
                    refused = %what,
                    "OpenAI-compatible host refused: the model is disabled (503)"
                );
                *self.lock() = ProbeState::Refused {
                    what,
                    since: Instant::now(),
                };
            }
            Err(ProbeFailure::Inconclusive(e)) => {
                tracing::warn!(
                    upstream_model = %self.upstream_model,
                    error = %e,
                    "OpenAI-compatible host probe did not conclude; retried with backoff"
                );
                let mut state = self.lock();
                if matches!(*state, ProbeState::Unprobed(_)) {
                    *state = ProbeState::Unprobed(Some(e));
                }
            }
        }
    }

    /// POSTs a body to the chat endpoint under a fresh permit and returns the answer's bytes.
    async fn post_probe(
        &self,
        in_flight: &InFlight,
        body: &Value,
    ) -> Result<Vec<u8>, BackendError> {
        let slot = Arc::new(in_flight.acquire().await);
        self.post(body, &slot).await
    }

    async fn post(
        &self,
        body: &impl Serialize,
        slot: &Arc<InFlightPermit>,
    ) -> Result<Vec<u8>, BackendError> {
        let mut call = self.client.post(&self.url).json(body);
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key.expose());
        }
        exchange(call, slot).await
    }

    /// A probe body: standard fields, the given messages, `top_logprobs: k`.
    fn probe_body(&self, messages: Value, k: usize) -> Value {
        json!({
            "model": self.upstream_model,
            "messages": messages,
            "max_tokens": 1,
            "temperature": 1,
            "top_p": 1,
            "seed": 0,
            "logprobs": true,
            "top_logprobs": k,
        })
    }

    /// Messages ending in an assistant `prefill`, with the field that asks for it.
    fn with_prefill(&self, mut body: Value, user: &str, prefill: &str, how: Prefill) -> Value {
        body["messages"] = json!([
            {"role": "user", "content": user},
            {"role": "assistant", "content": prefill},
        ]);
        if how == Prefill::ContinueFinalMessage {
            body["continue_final_message"] = json!(true);
            body["add_generation_prompt"] = json!(false);
        }
        body
    }

    /// Finds out how to read the host (the module doc lists the steps).
    async fn probe(&self, in_flight: &InFlight) -> Result<Host, ProbeFailure> {
        let (cap, ids) = self.probe_logprobs(in_flight).await?;
        let prefill = self.probe_prefill(in_flight, cap).await?;
        let bias = self.probe_bias(in_flight, cap, prefill).await?;
        Ok(Host {
            cap,
            ids,
            bias,
            prefill,
        })
    }

    /// The `top_logprobs` cap and how ids come back, from a plain one-message request.
    async fn probe_logprobs(
        &self,
        in_flight: &InFlight,
    ) -> Result<(usize, TokenIds), ProbeFailure> {
        let messages = json!([{"role": "user", "content": "Name one colour."}]);
        for k in CAP_CANDIDATES {
            let bytes = match self
                .post_probe(in_flight, &self.probe_body(messages.clone(), k))
                .await
            {
                Err(BackendError::Rejected { status }) if status != 401 && status != 403 => {
                    continue
                }
                other => other?,
            };
            let seen = parse_seen(&bytes)?.ok_or_else(|| {
                ProbeFailure::Refused(
                    "the backend returns no logprobs (`logprobs: true` came back without top_logprobs)"
                        .into(),
                )
            })?;
            let cap = seen.top.len().min(k);
            if cap < 2 {
                return Err(ProbeFailure::Refused(format!(
                    "the backend returns {cap} top logprob(s) per position; reading the options needs at least 2"
                )));
            }
            return Ok((cap, token_ids(&bytes)));
        }
        Err(ProbeFailure::Refused(format!(
            "the backend rejects `logprobs` with every `top_logprobs` tried ({}): it returns no logprobs",
            CAP_CANDIDATES.map(|k| k.to_string()).join(", ")
        )))
    }

    /// Which field, if any, makes the host continue a trailing assistant message.
    async fn probe_prefill(
        &self,
        in_flight: &InFlight,
        cap: usize,
    ) -> Result<Prefill, ProbeFailure> {
        let user = "Continue the pattern.";
        let k = cap.min(5);
        for how in [Prefill::TrailingMessage, Prefill::ContinueFinalMessage] {
            let mut best = Vec::with_capacity(2);
            for prefill in [PATTERN.to_string(), format!("{PATTERN} y")] {
                let body = self.with_prefill(self.probe_body(Value::Null, k), user, &prefill, how);
                let bytes = match self.post_probe(in_flight, &body).await {
                    Err(BackendError::Rejected { status }) if status != 401 && status != 403 => {
                        break
                    }
                    other => other?,
                };
                let seen = parse_seen(&bytes)?.ok_or_else(|| {
                    ProbeFailure::Inconclusive(BackendError::Protocol(
                        "a prefill probe answer without logprobs".into(),
                    ))
                })?;
                best.push(seen.best().map(|(id, text, _)| (*id, text.clone())));
            }
            if best.len() == 2 && continues_pattern(&best[0], &best[1]) {
                return Ok(how);
            }
        }
        Err(ProbeFailure::Refused(
            "the backend does not continue a trailing assistant message (tried it as it is and with `continue_final_message`): the `answer=` prefill would be answered, not continued"
                .into(),
        ))
    }

    /// What `logit_bias` does: +100 on the label the unbiased read found least likely.
    async fn probe_bias(
        &self,
        in_flight: &InFlight,
        cap: usize,
        prefill: Prefill,
    ) -> Result<Bias, ProbeFailure> {
        let user = "Pick a number.";
        let body = self.with_prefill(
            self.probe_body(Value::Null, cap),
            user,
            &self.labels.prefix,
            prefill,
        );
        let bytes = self.post_probe(in_flight, &body).await?;
        let unbiased = parse_seen(&bytes)?.ok_or_else(|| {
            ProbeFailure::Inconclusive(BackendError::Protocol(
                "a bias probe answer without logprobs".into(),
            ))
        })?;
        self.check_label_ids(&unbiased)?;
        // Without a single-token label to bias, the raw read (exact or a 502) is the safe way.
        let Some((target, text, before)) = self.least_likely_label(&unbiased) else {
            return Ok(Bias::Ignored);
        };
        let mut biased_body = body.clone();
        biased_body["logit_bias"] = json!({ target.to_string(): GROUP_BIAS });
        let bytes = match self.post_probe(in_flight, &biased_body).await {
            Err(BackendError::Rejected { status }) if status != 401 && status != 403 => {
                return Ok(Bias::Ignored)
            }
            other => other?,
        };
        let biased = parse_seen(&bytes)?.ok_or_else(|| {
            ProbeFailure::Inconclusive(BackendError::Protocol(
                "a bias probe answer without logprobs".into(),
            ))
        })?;
        let sampled = match biased.sampled_id {
            Some(id) => id == u64::from(target),
            None => biased.sampled_text.as_deref() == Some(text.as_str()),
        };
        let after = biased.logprob_of(target, &text);
        Ok(
            if after.is_some_and(|lp| lp > LN_HALF) && before.is_none_or(|lp| lp < LN_HALF) {
                Bias::AfterLogprobs
            } else if sampled {
                Bias::BeforeLogprobs
            } else {
                Bias::Ignored
            },
        )
    }

    /// The single-token label with the lowest unbiased logprob (one outside the top-K
    /// first), with its text and that logprob.
    fn least_likely_label(&self, seen: &Seen) -> Option<(u32, String, Option<f64>)> {
        self.labels
            .singles
            .iter()
            .map(|(id, text)| (*id, text.clone(), seen.logprob_of(*id, text)))
            .min_by(|a, b| match (a.2, b.2) {
                (None, None) => std::cmp::Ordering::Equal,
                (None, Some(_)) => std::cmp::Ordering::Less,
                (Some(_), None) => std::cmp::Ordering::Greater,
                (Some(x), Some(y)) => x.total_cmp(&y),
            })
    }

    /// Every entry that names a label id of the table by id and text must carry that
    /// label's text: the probe's part of the token-table check.
    fn check_label_ids(&self, seen: &Seen) -> Result<(), ProbeFailure> {
        for (id, text, _) in &seen.top {
            let (Some(id), Some(text)) = (id, text) else {
                continue;
            };
            let Some(label) = u32::try_from(*id)
                .ok()
                .and_then(|i| self.labels.by_id.get(&i))
            else {
                continue;
            };
            if text != label {
                return Err(ProbeFailure::Refused(format!(
                    "the token table does not match the backend's tokens: id {id} is {text:?} there and label {label:?} in the table"
                )));
            }
        }
        Ok(())
    }

    /// One read, with the host's strategy.
    async fn send(
        &self,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let host = self.host()?;
        if host.bias == Bias::AfterLogprobs && !request.chained {
            self.read_post_bias(host, request, slot).await
        } else {
            self.read_raw(host, request, slot).await
        }
    }

    /// The request body: the prefill field the probe found, and a bias on `biased`.
    fn body<'a>(
        &'a self,
        host: Host,
        request: &ReadRequest<'a>,
        top_logprobs: usize,
        biased: Option<&'a [u32]>,
    ) -> ChatRequest<'a> {
        let continued = (host.prefill == Prefill::ContinueFinalMessage).then_some(true);
        ChatRequest {
            model: &self.upstream_model,
            messages: Messages::new(request),
            continue_final_message: continued,
            add_generation_prompt: continued.map(|_| false),
            max_tokens: 1,
            temperature: 1.0,
            top_p: 1.0,
            seed: 0,
            logprobs: true,
            top_logprobs,
            logit_bias: biased.map(LogitBias),
        }
    }

    /// Strategy 2: the raw top-K, no bias; every option must be in it.
    async fn read_raw(
        &self,
        host: Host,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let bytes = self
            .post(&self.body(host, &request, host.cap, None), slot)
            .await?;
        let (found, usage, model) = self.find(&bytes, host, request.read_ids)?;
        Ok(ReadReply {
            logprobs: all_found(found, host.cap)?,
            usage,
            model,
            pre_mask: true,
            http_requests: 1,
        })
    }

    /// Strategy 1 and 3: the group (the read's ids and the anchor) biased alike; each
    /// option's log-ratio to the anchor, the same in every group of the prompt.
    async fn read_post_bias(
        &self,
        host: Host,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let anchor = *request
            .allowed_ids
            .first()
            .ok_or_else(|| BackendError::Protocol("a read without options".into()))?;
        let mut group = Vec::with_capacity(request.read_ids.len() + 1);
        if !request.read_ids.contains(&anchor) {
            group.push(anchor);
        }
        group.extend_from_slice(request.read_ids);
        if group.len() > host.cap {
            return Err(BackendError::Protocol(format!(
                "a group of {} ids is more than the host's top-{} cap",
                group.len(),
                host.cap
            )));
        }
        let body = self.body(host, &request, group.len(), Some(&group));
        let bytes = self.post(&body, slot).await?;
        let (found, usage, model) = self.find(&bytes, host, &group)?;
        let group_lps = all_found(found, host.cap)?;
        let anchor_lp = group_lps[group.iter().position(|g| *g == anchor).unwrap_or(0)];
        let offset = group.len() - request.read_ids.len();
        Ok(ReadReply {
            logprobs: group_lps[offset..]
                .iter()
                .map(|lp| lp - anchor_lp)
                .collect(),
            usage,
            model,
            pre_mask: false,
            http_requests: 1,
        })
    }

    /// The logprob of each of `wanted` in an answer (`None` where absent), its usage and
    /// model.
    #[allow(clippy::type_complexity)]
    fn find(
        &self,
        bytes: &[u8],
        host: Host,
        wanted: &[u32],
    ) -> Result<(Vec<Option<f64>>, Option<ReadUsage>, Option<String>), BackendError> {
        let mut response = ChatResponse::parse(bytes)?;
        let usage = response.read_usage();
        let model = response.model.take();
        let top = response
            .into_first_position()
            .and_then(|p| p.top_logprobs)
            .ok_or_else(|| BackendError::Protocol("no logprobs in the answer".into()))?;
        let texts = match host.ids {
            TokenIds::Text => Some(self.texts_of(wanted)?),
            TokenIds::Field | TokenIds::Strings => None,
        };
        let mut found = vec![None; wanted.len()];
        for entry in &top {
            let Some(pos) = position_of(entry, host.ids, wanted, texts.as_deref()) else {
                continue;
            };
            let lp = entry.logprob.unwrap_or(f64::NAN);
            if !lp.is_finite() {
                return Err(BackendError::Protocol(format!(
                    "non-finite logprob for option {pos} of the read"
                )));
            }
            if found[pos].replace(lp).is_some() {
                return Err(BackendError::Protocol(format!(
                    "option {pos} of the read appears twice in the answer"
                )));
            }
        }
        Ok((found, usage, model))
    }

    /// The label text of each of `ids`, for a host that names tokens by text only.
    fn texts_of<'t>(&'t self, ids: &[u32]) -> Result<Vec<&'t str>, BackendError> {
        ids.iter()
            .map(|id| {
                self.labels
                    .by_id
                    .get(id)
                    .map(String::as_str)
                    .ok_or_else(|| {
                        BackendError::Protocol(format!(
                            "the host names tokens by text only and id {id} has no label text"
                        ))
                    })
            })
            .collect()
    }
}

/// Which of `wanted` an entry is, by the host's way of naming tokens (`texts`: the label
/// texts of `wanted`, for a text-only host).
fn position_of(
    entry: &TopLogprob<'_>,
    ids: TokenIds,
    wanted: &[u32],
    texts: Option<&[&str]>,
) -> Option<usize> {
    let by_id = |id: Option<u64>| id.and_then(|id| wanted.iter().position(|w| u64::from(*w) == id));
    match ids {
        TokenIds::Field => by_id(entry.id.or(entry.token_id)),
        TokenIds::Strings => by_id(
            entry
                .token
                .as_deref()
                .and_then(|t| t.strip_prefix("token_id:"))
                .and_then(|n| n.parse().ok()),
        ),
        TokenIds::Text => {
            let text = entry.token.as_deref()?;
            texts?.iter().position(|t| *t == text)
        }
    }
}

/// Every option's logprob, or how many are missing from the top-K.
fn all_found(found: Vec<Option<f64>>, top_k: usize) -> Result<Vec<f64>, BackendError> {
    let options = found.len();
    let missing = found.iter().filter(|f| f.is_none()).count();
    if missing > 0 {
        return Err(BackendError::Missing {
            missing,
            options,
            top_k,
        });
    }
    Ok(found.into_iter().flatten().collect())
}

/// The first position of a probe answer; `None` when it carries no top logprobs.
fn parse_seen(bytes: &[u8]) -> Result<Option<Seen>, BackendError> {
    let response = ChatResponse::parse(bytes)?;
    let Some(position) = response.into_first_position() else {
        return Ok(None);
    };
    let TokenLogprobs {
        id,
        token_id,
        token,
        top_logprobs,
        ..
    } = position;
    let top: Vec<_> = top_logprobs
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let lp = e.logprob.filter(|lp| !lp.is_nan())?;
            let strings = e
                .token
                .as_deref()
                .and_then(|t| t.strip_prefix("token_id:"))
                .and_then(|n| n.parse().ok());
            let id = e.id.or(e.token_id).or(strings);
            let text = e
                .token
                .filter(|_| strings.is_none())
                .map(|t| t.into_owned());
            Some((id, text, lp))
        })
        .collect();
    if top.is_empty() {
        return Ok(None);
    }
    let strings = token
        .as_deref()
        .and_then(|t| t.strip_prefix("token_id:"))
        .and_then(|n| n.parse().ok());
    Ok(Some(Seen {
        sampled_id: id.or(token_id).or(strings),
        sampled_text: token.filter(|_| strings.is_none()).map(|t| t.into_owned()),
        top,
    }))
}

/// How the answer's top entries name their tokens.
fn token_ids(bytes: &[u8]) -> TokenIds {
    let first = ChatResponse::parse(bytes)
        .ok()
        .and_then(|r| r.into_first_position())
        .and_then(|p| p.top_logprobs)
        .and_then(|t| t.into_iter().next());
    match first {
        Some(e) if e.id.is_some() || e.token_id.is_some() => TokenIds::Field,
        Some(e)
            if e.token
                .as_deref()
                .is_some_and(|t| t.starts_with("token_id:")) =>
        {
            TokenIds::Strings
        }
        _ => TokenIds::Text,
    }
}

/// Whether the most likely next tokens after `… x` and `… x y` follow the pattern: ` y`
/// then ` x` by text, or (a host that names tokens by id only) two different tokens.
fn continues_pattern(
    after_x: &Option<(Option<u64>, Option<String>)>,
    after_y: &Option<(Option<u64>, Option<String>)>,
) -> bool {
    match (after_x, after_y) {
        (Some((_, Some(a))), Some((_, Some(b)))) => a.trim() == "y" && b.trim() == "x",
        (Some((Some(a), None)), Some((Some(b), None))) => a != b,
        _ => false,
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
            ProbeState::Ready(host) if host.bias == Bias::AfterLogprobs && ids > host.cap => {
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
                probe: "refused",
                refused: Some(what.clone()),
                ..empty_report()
            },
            ProbeState::Unprobed(_) => empty_report(),
        })
    }
}

fn empty_report() -> HostReport {
    HostReport {
        probe: "unprobed",
        strategy: None,
        refused: None,
        top_logprobs: None,
        token_ids: None,
        logit_bias: None,
        prefill: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_must_flip_with_its_last_letter() {
        let t = |s: &str| Some((None, Some(s.to_string())));
        assert!(continues_pattern(&t(" y"), &t(" x")));
        assert!(
            !continues_pattern(&t(" y"), &t(" y")),
            "answered, not continued"
        );
        assert!(!continues_pattern(&t("The"), &t("The")));
        let id = |i: u64| Some((Some(i), None));
        assert!(continues_pattern(&id(7), &id(8)));
        assert!(!continues_pattern(&id(7), &id(7)));
        assert!(!continues_pattern(&None, &t(" x")));
    }

    #[test]
    fn label_texts_drop_ids_two_labels_disagree_on() {
        let labels = LabelTexts::new(
            "answer=".into(),
            vec![(10, "0".into()), (11, "1".into())],
            [(10, "0".into()), (11, "7".into()), (12, "2".into())],
        );
        assert_eq!(labels.by_id.get(&10).map(String::as_str), Some("0"));
        assert_eq!(labels.by_id.get(&11), None, "ambiguous");
        assert_eq!(labels.by_id.get(&12).map(String::as_str), Some("2"));
    }

    #[test]
    fn logit_bias_is_an_object_of_id_strings() {
        let body = serde_json::to_value(LogitBias(&[7, 1000])).expect("serialises");
        assert_eq!(body, json!({"7": 100.0, "1000": 100.0}));
    }

    #[test]
    fn missing_options_are_counted_never_zero() {
        let err = all_found(vec![Some(-1.0), None, None], 20).expect_err("missing");
        assert_eq!(
            err,
            BackendError::Missing {
                missing: 2,
                options: 3,
                top_k: 20
            }
        );
        assert_eq!(all_found(vec![Some(-1.0)], 20), Ok(vec![-1.0]));
    }
}
