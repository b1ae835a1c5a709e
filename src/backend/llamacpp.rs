//! The llama.cpp dialect: llama.cpp's `llama-server`, `POST <base>/chat/completions`.
//!
//! The prompt bytes are the vLLM dialect's; the request and the reading differ:
//! * **No `allowed_token_ids` / `logprob_token_ids`** (llama-server ignores vLLM's extras
//!   silently, so sending them would be a silent no-op). The mask is `logit_bias` `+100` on
//!   every option id (OpenAI's map form, which routers that parse the body accept), with a neutral sampler (`temperature: 1, top_k: 0, top_p: 1,
//!   min_p: 0`, fixed `seed`); the sampled token is irrelevant.
//! * **Pre-mask read through the raw top-K.** `logprobs`/`top_logprobs` report the raw
//!   softmax before any bias, top-K only. With K = [`RAW_TOP_K`] every option id of Gemma 3
//!   270M was in the read in 20 of 20 calls (`docs/backends.md`), so one read gives both the
//!   masked distribution (the options' raw probabilities renormalised) and `option_mass`.
//! * **Exact when an option is outside the top-K.** A second read of the same prompt with
//!   `post_sampling_probs: true` returns the masked distribution, whose log-probabilities
//!   are the raw ones minus one constant (the log of the options' raw mass). The raw
//!   log-probability of each missing option is recovered from it by the ratio to the
//!   option most probable in the raw read: `raw = masked + (raw_a − masked_a)`. When no
//!   option is in the raw top-K (or the masked read underflows to 0 for one), the raw read
//!   is widened to the whole vocabulary ([`WHOLE_VOCABULARY`]; llama-server clamps it to
//!   its vocabulary). Every read thus yields raw conditionals: `option_mass` is always a
//!   number and a trie's chain rule holds. An option's −∞ or NaN is a protocol break (502).
//! * **One read per question**: no per-request id cap, so no slices.
//! * **Token ids** come back as `id` fields of the logprob entries.
//! * **Prefix cache**: `cache_prompt` (on by default). A prompt served from the cache can
//!   move probabilities by up to 0.033 against a full evaluation on this backend, so exact
//!   comparisons run with it off. llama-server has no `cache_salt`: its slots reuse a
//!   prefix across callers, so tenants who must not time each other's prompts need a
//!   server each or `cache_prompt` off (`docs/operations/tokens.md`).
//! * **Tokenizer check** through `POST /tokenize` (one text per request; the server root,
//!   not `/v1`), and the chat template through `POST /apply-template`: a template that
//!   opens a reasoning block before the answer position is refused.
//!
//! One read, sometimes two or three: one raw read with K = 1000 usually returns every
//! option id (docs/benchmarks.md); the recovery read comes from the prefix cache; the
//! whole-vocabulary read is tens of megabytes and seconds, so it is the last resort.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::chat::{BiasMap, ChatResponse, Positions, TokenLogprobs};
use super::http::{exchange, exchange_up_to, get, post};
use super::window_probe::ContextWindow;
use super::{Backend, BackendError, Due, Messages, ReadReply, ReadRequest, ReadUsage, Routing};
use crate::in_flight::{InFlight, InFlightPermit};
use crate::secret::Secret;

/// How many raw top log-probabilities one read asks for.
pub const RAW_TOP_K: usize = 1000;
/// The raw read that widens K to the whole vocabulary when no option of a read is in the
/// raw top-[`RAW_TOP_K`]: llama-server clamps `n_probs` to its vocabulary (262,144 entries,
/// ~26 MB, for Gemma 3).
pub const WHOLE_VOCABULARY: usize = 1 << 22;
/// The largest whole-vocabulary answer read: 256 bytes for each of 262,144 entries
/// (`{"id", "token", "bytes", "logprob"}` averages ~100 on Gemma 3).
const WHOLE_VOCABULARY_BYTES: usize = 64 * 1024 * 1024;

/// Tags that open a reasoning block in chat templates.
const REASONING_OPENERS: &[&str] = &[
    "<think>",
    "<|think|>",
    "<reasoning>",
    "<|channel|>analysis",
    "<seed:think>",
];

/// A `llama-server` serving one model.
// Derived: the key is a `Secret`, whose `Debug` is redacted.
#[derive(Debug)]
pub struct LlamaCppBackend {
    /// Shared connection pool.
    client: crate::backend::Pool,
    /// `<base>/chat/completions`.
    chat_url: String,
    /// The server root (the base without `/v1`), for `/tokenize` and `/apply-template`.
    root_url: String,
    /// The model id sent in `model` (llama-server serves one model and ignores it).
    upstream_model: String,
    /// Bearer key (`--api-key` of llama-server).
    api_key: Option<Secret>,
    /// Whether the server may reuse its prefix cache.
    cache_prompt: bool,
    /// Extra template arguments (e.g. `{"enable_thinking": false}` for Qwen 3 style models).
    chat_template_kwargs: Option<Value>,
    /// Its context window (`/props`: `default_generation_settings.n_ctx`, per slot).
    context: ContextWindow,
}

/// The request body.
#[derive(Debug, Serialize)]
pub struct ChatRequest<'a> {
    model: &'a str,
    messages: Messages<'a>,
    continue_final_message: bool,
    add_generation_prompt: bool,
    max_tokens: u32,
    temperature: f64,
    top_k: u32,
    top_p: f64,
    min_p: f64,
    seed: u32,
    logit_bias: BiasMap<'a>,
    logprobs: bool,
    top_logprobs: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    post_sampling_probs: bool,
    cache_prompt: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat_template_kwargs: Option<&'a Value>,
}

impl LlamaCppBackend {
    /// A backend at `base_url` (ending in `/v1`).
    pub fn new(
        client: crate::backend::Pool,
        base_url: &str,
        upstream_model: String,
        api_key: Option<Secret>,
        cache_prompt: bool,
        chat_template_kwargs: Option<Value>,
    ) -> Self {
        let base = base_url.trim_end_matches('/');
        LlamaCppBackend {
            client,
            chat_url: format!("{base}/chat/completions"),
            root_url: base.trim_end_matches("/v1").to_string(),
            upstream_model,
            api_key,
            cache_prompt,
            chat_template_kwargs,
            context: ContextWindow::default(),
        }
    }

    /// The request body for one read; `post_sampling` asks for the masked distribution.
    pub fn body<'a>(&'a self, request: &ReadRequest<'a>, post_sampling: bool) -> ChatRequest<'a> {
        self.body_with_k(request, post_sampling, RAW_TOP_K)
    }

    /// [`Self::body`] with a raw read of the top `top_k` (the widened read asks for the
    /// whole vocabulary).
    pub fn body_with_k<'a>(
        &'a self,
        request: &ReadRequest<'a>,
        post_sampling: bool,
        top_k: usize,
    ) -> ChatRequest<'a> {
        ChatRequest {
            model: &self.upstream_model,
            messages: Messages::new(request),
            continue_final_message: true,
            add_generation_prompt: false,
            max_tokens: 1,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            logit_bias: BiasMap(request.allowed_ids),
            logprobs: true,
            top_logprobs: if post_sampling {
                request.allowed_ids.len()
            } else {
                top_k
            },
            post_sampling_probs: post_sampling,
            cache_prompt: self.cache_prompt,
            chat_template_kwargs: self.chat_template_kwargs.as_ref(),
        }
    }

    /// A POST of `body` to `url`, with a read's routing key when it has one.
    async fn post(
        &self,
        url: &str,
        body: &impl Serialize,
        routing: Option<&Routing>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<Vec<u8>, BackendError> {
        let call = post(&self.client, url, self.api_key.as_ref())
            .routed(routing)
            .json(body);
        exchange(call, slot).await
    }

    async fn send(
        &self,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let raw = self.read_raw(&request, RAW_TOP_K, slot).await?;
        let mut reply = ReadReply {
            logprobs: Vec::new(),
            usage: raw.usage,
            model: raw.model,
            pre_mask: true,
            http_requests: 1,
        };
        let mut found = raw.logprobs;
        if found.iter().any(Option::is_none) {
            if let Some(anchor) = raw.anchor {
                let usage = self.recover(&request, anchor, &mut found, slot).await?;
                add_usage(&mut reply, usage);
            }
        }
        if found.iter().any(Option::is_none) {
            let whole = self.read_raw(&request, WHOLE_VOCABULARY, slot).await?;
            found = whole.logprobs;
            add_usage(&mut reply, whole.usage);
        }
        reply.logprobs = found
            .into_iter()
            .zip(request.read_ids)
            .map(|(lp, id)| {
                lp.ok_or_else(|| {
                    BackendError::Protocol(format!(
                        "option id {id} missing from the whole-vocabulary read"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(reply)
    }

    /// A raw (pre-mask) read of the top `top_k` log-probabilities: each read id's, where it
    /// is among them, and the anchor for [`Self::recover`]. An option's non-finite logprob
    /// breaks the protocol (every reply's logprobs are finite).
    async fn read_raw(
        &self,
        request: &ReadRequest<'_>,
        top_k: usize,
        slot: &Arc<InFlightPermit>,
    ) -> Result<RawRead, BackendError> {
        let body = self.body_with_k(request, false, top_k);
        let bytes = if top_k > RAW_TOP_K {
            let call = post(&self.client, &self.chat_url, self.api_key.as_ref())
                .routed(request.routing)
                .json(&body);
            exchange_up_to(call, slot, WHOLE_VOCABULARY_BYTES).await?
        } else {
            self.post(&self.chat_url, &body, request.routing, slot)
                .await?
        };
        let parsed = parse(&bytes)?;
        let entries = parsed.entries(false)?;
        let positions = Positions::of(request.read_ids);
        let mut logprobs: Vec<Option<f64>> = vec![None; request.read_ids.len()];
        // The first entry of an id wins, as a scan of the entries in order would find.
        for (id, lp) in entries.iter().rev() {
            if let Some(pos) = positions.find(u64::from(*id)) {
                logprobs[pos] = Some(finite_option(*id, *lp)?);
            }
        }
        let options = Positions::of(request.allowed_ids);
        let anchor = entries
            .iter()
            .filter(|(id, lp)| options.find(u64::from(*id)).is_some() && lp.is_finite())
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .copied();
        Ok(RawRead {
            logprobs,
            anchor,
            usage: parsed.usage,
            model: parsed.model,
        })
    }

    /// Fills the read ids missing from the raw top-K from the masked (post-sampling) read
    /// of the same prompt, exactly: a masked log-probability is the raw one minus the log
    /// of the options' raw mass, the same for every option, so `raw = masked + (raw_a −
    /// masked_a)` for the anchor `a`, the option most probable in the raw read. An id the
    /// masked read puts at probability 0 (or leaves out) stays missing. Sent right after
    /// the raw read of the same prompt, it is served from the prefix cache.
    async fn recover(
        &self,
        request: &ReadRequest<'_>,
        (anchor, anchor_raw): (u32, f64),
        found: &mut [Option<f64>],
        slot: &Arc<InFlightPermit>,
    ) -> Result<Option<ReadUsage>, BackendError> {
        let bytes = self
            .post(
                &self.chat_url,
                &self.body(request, true),
                request.routing,
                slot,
            )
            .await?;
        let masked = parse(&bytes)?;
        let entries = masked.entries(true)?;
        let masked_lp = |id: u32| {
            entries
                .iter()
                .find(|(e, lp)| *e == id && lp.is_finite())
                .map(|(_, lp)| *lp)
        };
        let Some(anchor_masked) = masked_lp(anchor) else {
            return Ok(masked.usage);
        };
        let log_mass = anchor_raw - anchor_masked;
        for (lp, id) in found.iter_mut().zip(request.read_ids) {
            if lp.is_none() {
                *lp = masked_lp(*id).map(|m| m + log_mass);
            }
        }
        Ok(masked.usage)
    }

    async fn tokenize_texts(
        &self,
        texts: &[String],
        slot: &Arc<InFlightPermit>,
    ) -> Result<Vec<Vec<u32>>, BackendError> {
        let url = format!("{}/tokenize", self.root_url);
        let mut out = Vec::with_capacity(texts.len());
        for text in texts {
            let bytes = self
                .post(&url, &serde_json::json!({"content": text, "add_special": false, "with_pieces": false}), None, slot)
                .await?;
            let parsed: TokenizeResponse = serde_json::from_slice(&bytes)
                .map_err(|e| BackendError::Protocol(format!("malformed /tokenize answer: {e}")))?;
            out.push(parsed.tokens);
        }
        Ok(out)
    }

    /// Whether the chat template opens a reasoning block between the user turn and the
    /// `answer=` prefill (such models would answer inside their thoughts).
    async fn opens_reasoning(
        &self,
        prefix: &str,
        slot: &Arc<InFlightPermit>,
    ) -> Result<Option<String>, BackendError> {
        const PROBE: &str = "SYSTEMONE-TEMPLATE-PROBE";
        let mut body = serde_json::json!({
            "messages": [{"role": "user", "content": PROBE}, {"role": "assistant", "content": prefix}],
            "continue_final_message": true,
            "add_generation_prompt": false,
        });
        if let Some(kwargs) = &self.chat_template_kwargs {
            body["chat_template_kwargs"] = kwargs.clone();
        }
        let bytes = self
            .post(
                &format!("{}/apply-template", self.root_url),
                &body,
                None,
                slot,
            )
            .await?;
        let parsed: ApplyTemplateResponse = serde_json::from_slice(&bytes).map_err(|e| {
            BackendError::Protocol(format!("malformed /apply-template answer: {e}"))
        })?;
        Ok(reasoning_between(&parsed.prompt, PROBE, prefix))
    }
}

/// The reasoning tag a rendered prompt opens (and does not close) between `user_text` and
/// the last occurrence of `prefix`, if any.
pub fn reasoning_between(prompt: &str, user_text: &str, prefix: &str) -> Option<String> {
    let start = prompt.find(user_text)? + user_text.len();
    let end = prompt
        .rfind(prefix)
        .filter(|e| *e >= start)
        .unwrap_or(prompt.len());
    let between = &prompt[start..end];
    REASONING_OPENERS.iter().find_map(|open| {
        let opened = between.rfind(open)?;
        let closer = open.replacen('<', "</", 1);
        let closed = between[opened..].contains(&closer) || between[opened..].contains("<|end|>");
        (!closed).then(|| open.to_string())
    })
}

impl Backend for LlamaCppBackend {
    fn dialect(&self) -> &'static str {
        "llamacpp"
    }

    fn max_ids_per_read(&self, _ids: usize) -> usize {
        usize::MAX
    }

    fn read<'a>(
        &'a self,
        request: ReadRequest<'a>,
        permit: InFlightPermit,
    ) -> BoxFuture<'a, Result<ReadReply, BackendError>> {
        let slot = Arc::new(permit);
        async move { self.send(request, &slot).await }.boxed()
    }

    fn tokenize<'a>(
        &'a self,
        texts: &'a [String],
        permit: InFlightPermit,
    ) -> BoxFuture<'a, Result<Vec<Vec<u32>>, BackendError>> {
        let slot = Arc::new(permit);
        async move { self.tokenize_texts(texts, &slot).await }.boxed()
    }

    fn upkeep<'a>(&'a self, in_flight: &'a InFlight) -> BoxFuture<'a, Due> {
        let call = get(
            &self.client,
            format!("{}/props", self.root_url),
            self.api_key.as_ref(),
        );
        let n_ctx = |props: &Value| props["default_generation_settings"]["n_ctx"].as_u64();
        self.context.refresh(call, in_flight, n_ctx).boxed()
    }

    fn context_tokens(&self) -> Option<usize> {
        self.context.get()
    }

    fn refuses_template<'a>(
        &'a self,
        prefix: &'a str,
        permit: InFlightPermit,
    ) -> BoxFuture<'a, Result<Option<String>, BackendError>> {
        let slot = Arc::new(permit);
        async move { self.opens_reasoning(prefix, &slot).await }.boxed()
    }
}

#[derive(Deserialize)]
struct TokenizeResponse {
    tokens: Vec<u32>,
}

#[derive(Deserialize)]
struct ApplyTemplateResponse {
    prompt: String,
}

/// A parsed answer: the first position's entries, usage and model.
struct Parsed<'a> {
    model: Option<String>,
    usage: Option<ReadUsage>,
    position: Option<TokenLogprobs<'a>>,
}

fn parse(bytes: &[u8]) -> Result<Parsed<'_>, BackendError> {
    let mut response = ChatResponse::parse(bytes)?;
    Ok(Parsed {
        model: response.model.take(),
        usage: response.read_usage()?,
        position: response.into_first_position(),
    })
}

impl Parsed<'_> {
    /// `(id, log-probability)` of each entry; from `top_probs` when `post_sampling`.
    fn entries(&self, post_sampling: bool) -> Result<Vec<(u32, f64)>, BackendError> {
        let position = self
            .position
            .as_ref()
            .ok_or_else(|| BackendError::Protocol("no logprobs in the answer".into()))?;
        let list = if post_sampling {
            position.top_probs.as_ref()
        } else {
            position.top_logprobs.as_ref()
        }
        .ok_or_else(|| BackendError::Protocol("no top-k entries in the answer".into()))?;
        list.iter()
            .map(|e| {
                let id =
                    e.id.and_then(|id| u32::try_from(id).ok())
                        .ok_or_else(|| BackendError::Protocol("an entry without an id".into()))?;
                let lp = if post_sampling {
                    e.prob.map(f64::ln)
                } else {
                    e.logprob
                }
                .unwrap_or(f64::NAN);
                // Kept as it came (a masked probability of 0 is ln 0 = −∞): only an option's
                // number must be finite, which its reader checks.
                Ok((id, lp))
            })
            .collect()
    }
}

/// What one raw read found.
struct RawRead {
    /// Each read id's raw log-probability, `None` where it is outside the top-K.
    logprobs: Vec<Option<f64>>,
    /// The option (any id of the mask) most probable in the read, with its logprob.
    anchor: Option<(u32, f64)>,
    usage: Option<ReadUsage>,
    model: Option<String>,
}

/// An option's log-probability, refused unless finite: a backend that says −∞ or NaN for
/// an option breaks the protocol (an option is never probability 0 by omission or by
/// underflow).
fn finite_option(id: u32, lp: f64) -> Result<f64, BackendError> {
    if lp.is_finite() {
        Ok(lp)
    } else {
        Err(BackendError::Protocol(format!(
            "non-finite logprob for option id {id}"
        )))
    }
}

/// Adds a further exchange of one read to its reply: its usage and the request count.
fn add_usage(reply: &mut ReadReply, more: Option<ReadUsage>) {
    reply.http_requests += 1;
    if let (Some(u), Some(m)) = (reply.usage.as_mut(), more) {
        u.prompt_tokens = u.prompt_tokens.saturating_add(m.prompt_tokens);
        u.completion_tokens = u.completion_tokens.saturating_add(m.completion_tokens);
        u.cached_tokens = u.cached_tokens.saturating_add(m.cached_tokens);
        u.evaluated_tokens = u.evaluated_tokens.saturating_add(m.evaluated_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_blocks_before_the_answer_are_found() {
        let qwen =
            "<|im_start|>user\nP<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nanswer=";
        assert_eq!(reasoning_between(qwen, "P", "answer="), None);
        let thinking = "<|im_start|>user\nP<|im_end|>\n<|im_start|>assistant\n<think>\nanswer=";
        assert_eq!(
            reasoning_between(thinking, "P", "answer="),
            Some("<think>".into())
        );
        let gemma = "<start_of_turn>user\nP<end_of_turn>\n<start_of_turn>model\nanswer=";
        assert_eq!(reasoning_between(gemma, "P", "answer="), None);
    }
}
