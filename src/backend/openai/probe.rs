//! The probe: a few small requests that find out how the host can be read exactly (the
//! module doc of `openai/mod.rs` lists them), run by the model's upkeep task; requests
//! only read its verdict.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::{CompatBackend, Host, ProbeState};
use crate::backend::chat::MASK_BIAS;
use crate::backend::chat::{self, ChatResponse, TokenLogprobs};
use crate::backend::host_report::{LogitBias, Prefill, TokenIds};
use crate::backend::{BackendError, Due};
use crate::in_flight::InFlight;

/// `top_logprobs` values the probe tries, largest first: the llama.cpp dialect's raw K,
/// hosted APIs' and Ollama's 20, TGI's default `top_n_tokens` cap of 5.
const CAP_CANDIDATES: [usize; 3] = [1000, 20, 5];

/// The prefill probe: a pattern whose continuation flips with its last letter.
const PATTERN: &str = "x y x y x y x y x y x";

/// How long a refusal stands before the host is probed again (it may have been redeployed).
const REPROBE_REFUSED_AFTER: Duration = Duration::from_secs(600);

/// `ln 0.5`: a biased token above it took the bias into its logprob.
const LN_HALF: f64 = -std::f64::consts::LN_2;

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
    pub(super) async fn probe_if_due(&self, in_flight: &InFlight) -> Due {
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
    pub(super) async fn ready_host(&self) -> Result<(), BackendError> {
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
                tracing::info!(
                    upstream_model = %self.upstream_model,
                    strategy = host.strategy().as_str(),
                    top_logprobs = host.cap,
                    token_ids = host.ids.as_str(),
                    logit_bias = host.bias.as_str(),
                    prefill = host.prefill.as_str(),
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
        self.post(body, None, &slot).await
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
    ) -> Result<LogitBias, ProbeFailure> {
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
            return Ok(LogitBias::Ignored);
        };
        let mut biased_body = body.clone();
        biased_body["logit_bias"] = json!({ target.to_string(): MASK_BIAS });
        let bytes = match self.post_probe(in_flight, &biased_body).await {
            Err(BackendError::Rejected { status }) if status != 401 && status != 403 => {
                return Ok(LogitBias::Ignored)
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
                LogitBias::AfterLogprobs
            } else if sampled {
                LogitBias::BeforeLogprobs
            } else {
                LogitBias::Ignored
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
            let strings = e.id_in_token();
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
    let strings = token.as_deref().and_then(chat::token_id);
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
                .is_some_and(|t| chat::token_id(t).is_some()) =>
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
}
