//! The llama.cpp dialect: llama.cpp's `llama-server`, `POST <base>/chat/completions`.
//!
//! The prompt bytes are the vLLM dialect's; the request and the reading differ:
//! * **No `allowed_token_ids` / `logprob_token_ids`** (llama-server ignores vLLM's extras
//!   silently, so sending them would be a silent no-op). The mask is `logit_bias` `+100` on
//!   every option id, with a neutral sampler (`temperature: 1, top_k: 0, top_p: 1,
//!   min_p: 0`, fixed `seed`); the sampled token is irrelevant.
//! * **Pre-mask read through the raw top-K.** `logprobs`/`top_logprobs` report the raw
//!   softmax before any bias, top-K only. With K = [`RAW_TOP_K`] every option id of Gemma 3
//!   270M was in the read in 20 of 20 calls (technique §7), so one read gives both the
//!   masked distribution (the options' raw probabilities renormalised) and `option_mass`.
//! * **Fallback when an option is outside the top-K**: a second, cached read with
//!   `post_sampling_probs: true`, whose `top_probs` is exactly the masked distribution.
//!   `option_mass` is then unknown, and the answer says so (`option_mass_unknown`) instead
//!   of reporting a number that is not what it claims.
//! * **One read per question**: no per-request id cap, so no slices.
//! * **Token ids** come back as `id` fields of the logprob entries.
//! * **Prefix cache**: `cache_prompt` (on by default). A prompt served from the cache can
//!   move probabilities by up to 0.033 against a full evaluation on this backend, so exact
//!   comparisons run with it off.
//! * **Tokenizer check** through `POST /tokenize` (one text per request; the server root,
//!   not `/v1`), and the chat template through `POST /apply-template`: a template that
//!   opens a reasoning block before the answer position is refused.
//!
//! One read or two: measured on Gemma 3 270M here, one raw read with K = 1000 returned
//! all option ids in every call, and where it did, the renormalised raw read matched the
//! `post_sampling_probs` read to 1.1e-6 (technique §7); a second read costs 20–35 ms even
//! from the cache. So the second read is only the fallback.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::chat::{ChatResponse, Positions, TokenLogprobs};
use super::context::ContextWindow;
use super::http::{exchange, get, post};
use super::{Backend, BackendError, Due, Messages, ReadReply, ReadRequest, ReadUsage};
use crate::limits::{InFlight, InFlightPermit};
use crate::secret::Secret;

/// How many raw top log-probabilities one read asks for.
pub const RAW_TOP_K: usize = 1000;
/// The bias that turns `logit_bias` into a mask (llama.cpp adds it to the logit).
const MASK_BIAS: f64 = 100.0;

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
    client: reqwest::Client,
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
    logit_bias: Vec<(u32, f64)>,
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
        client: reqwest::Client,
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
            logit_bias: request
                .allowed_ids
                .iter()
                .map(|id| (*id, MASK_BIAS))
                .collect(),
            logprobs: true,
            top_logprobs: if post_sampling {
                request.allowed_ids.len()
            } else {
                RAW_TOP_K
            },
            post_sampling_probs: post_sampling,
            cache_prompt: self.cache_prompt,
            chat_template_kwargs: self.chat_template_kwargs.as_ref(),
        }
    }

    async fn post(
        &self,
        url: &str,
        body: &impl Serialize,
        slot: &Arc<InFlightPermit>,
    ) -> Result<Vec<u8>, BackendError> {
        let call = post(&self.client, url, self.api_key.as_ref()).json(body);
        exchange(call, slot).await
    }

    async fn send(
        &self,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let bytes = self
            .post(&self.chat_url, &self.body(&request, false), slot)
            .await?;
        let raw = parse(&bytes)?;
        let mut usage = raw.usage;
        let entries = raw.entries(false)?;
        let positions = Positions::of(request.read_ids);
        let mut found: Vec<Option<f64>> = vec![None; request.read_ids.len()];
        // The first entry of an id wins, as a scan of the entries in order would find.
        for (id, lp) in entries.iter().rev() {
            if let Some(pos) = positions.find(u64::from(*id)) {
                found[pos] = Some(*lp);
            }
        }
        if let Some(logprobs) = found.iter().copied().collect::<Option<Vec<f64>>>() {
            return Ok(ReadReply {
                logprobs,
                usage,
                model: raw.model,
                pre_mask: true,
                http_requests: 1,
            });
        }
        // Some option is outside the raw top-K: read the masked distribution itself.
        let (logprobs, masked_usage) = self.read_masked(&request, slot).await?;
        if let (Some(u), Some(m)) = (usage.as_mut(), masked_usage) {
            u.prompt_tokens += m.prompt_tokens;
            u.completion_tokens += m.completion_tokens;
            u.cached_tokens += m.cached_tokens;
        }
        Ok(ReadReply {
            logprobs,
            usage,
            model: raw.model,
            pre_mask: false,
            http_requests: 2,
        })
    }

    /// The second request of a read: the masked (post-sampling) distribution of the read's
    /// ids, as log-probabilities, with its usage.
    async fn read_masked(
        &self,
        request: &ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<(Vec<f64>, Option<ReadUsage>), BackendError> {
        let bytes = self
            .post(&self.chat_url, &self.body(request, true), slot)
            .await?;
        let masked = parse(&bytes)?;
        let entries = masked.entries(true)?;
        let logprobs = request
            .read_ids
            .iter()
            .map(|id| {
                entries
                    .iter()
                    .find(|(e, _)| e == id)
                    .map(|(_, lp)| *lp)
                    .ok_or_else(|| {
                        BackendError::Protocol(format!(
                            "option id {id} missing from post-sampling probs"
                        ))
                    })
            })
            .collect::<Result<Vec<f64>, _>>()?;
        Ok((logprobs, masked.usage))
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
                .post(&url, &serde_json::json!({"content": text, "add_special": false, "with_pieces": false}), slot)
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
            .post(&format!("{}/apply-template", self.root_url), &body, slot)
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
        usage: response.read_usage(),
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
                // A masked probability of 0 is ln 0 = −∞: refused like any non-finite
                // number, so every reply's logprobs are finite as `ReadReply` promises.
                if !lp.is_finite() {
                    return Err(BackendError::Protocol(format!(
                        "non-finite logprob for token id {id}"
                    )));
                }
                Ok((id, lp))
            })
            .collect()
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
