//! The vLLM dialect: `POST <base>/chat/completions` with vLLM's extras.
//!
//! How it differs from plain OpenAI chat completions:
//! * `continue_final_message: true` + `add_generation_prompt: false`: the assistant turn
//!   (`answer=`) is continued, not answered.
//! * `allowed_token_ids`: a hard mask on the option ids (plain OpenAI has only `logit_bias`).
//! * `logprob_token_ids`: the pre-mask log-probability of exactly these ids, returned as
//!   `top_logprobs` entries whose token is `"token_id:<n>"` (with
//!   `return_tokens_as_token_ids: true`). At most [`crate::config::ModelConfig::max_ids_per_read`]
//!   ids per request (some deployments answer 400 above 128), so long questions are read in
//!   slices, each with the full mask.
//! * `temperature: 0`, `max_tokens: 1`: the sampled token is irrelevant; only logprobs are read.
//! * `cache_salt`: the caller's tenant salt when the service has keys or tokens, so that
//!   tenants never share prefix-cache blocks (vLLM ≥ 0.9; an older server ignores the field).
//! * Reads are not staged: vLLM shares a prompt head between requests that arrive together
//!   ([`Backend::shares_prefixes_in_flight`]), so a text-only request's reads (every
//!   question, every trie node) all go out at once.
//!
//! Servers older than `logprob_token_ids` ignore it silently and return the top-k instead,
//! so every requested id must come back: a missing one is a protocol error, never a zero.
//!
//! The token-table check and `--token-table auto` tokenize through `POST <root>/tokenize`
//! (`add_special_tokens: false`), one text per request.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::{Deserialize, Serialize};

use super::chat::ChatResponse;
use super::chat::Positions;
use super::http::{exchange, get, post, Call};
use super::window_probe::ContextWindow;
use super::{Backend, BackendError, Due, Messages, ReadReply, ReadRequest};
use crate::in_flight::{InFlight, InFlightPermit};
use crate::secret::Secret;

/// The most `top_logprobs` vLLM accepts.
const MAX_TOP_LOGPROBS: usize = 20;

/// A vLLM server serving one model.
// Derived: the key is a `Secret`, whose `Debug` is redacted.
#[derive(Debug)]
pub struct VllmBackend {
    /// Shared connection pool.
    client: crate::backend::Pool,
    /// `<base>/chat/completions`.
    url: String,
    /// `url` parsed once, not per read; `None` when it does not parse.
    parsed_url: Option<hyper::Uri>,
    /// The backend's model id.
    upstream_model: String,
    /// Bearer key for the backend.
    api_key: Option<Secret>,
    /// Most ids per read.
    max_ids_per_read: usize,
    /// Extra template arguments (e.g. `{"enable_thinking": false}`), sent when set.
    chat_template_kwargs: Option<serde_json::Value>,
    /// Its context window (`/v1/models`: the model's `max_model_len`).
    context: ContextWindow,
}

impl VllmBackend {
    /// A backend at `base_url` (ending in `/v1`).
    pub fn new(
        client: crate::backend::Pool,
        base_url: &str,
        upstream_model: String,
        api_key: Option<Secret>,
        max_ids_per_read: usize,
    ) -> Self {
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        let parsed_url = hyper::Uri::try_from(&url).ok();
        VllmBackend {
            client,
            url,
            parsed_url,
            upstream_model,
            api_key,
            max_ids_per_read: max_ids_per_read.max(1),
            chat_template_kwargs: None,
            context: ContextWindow::default(),
        }
    }

    /// Sends `chat_template_kwargs` with every read (Qwen 3 style `enable_thinking: false`).
    pub fn with_chat_template_kwargs(mut self, kwargs: Option<serde_json::Value>) -> Self {
        self.chat_template_kwargs = kwargs;
        self
    }

    /// `<root>/tokenize` (vLLM serves it beside `/v1`, not under it).
    fn tokenize_url(&self) -> String {
        let base = self.url.trim_end_matches("/chat/completions");
        format!("{}/tokenize", base.strip_suffix("/v1").unwrap_or(base))
    }

    /// A POST to the chat URL, with the key.
    fn post_chat(&self) -> Call {
        let key = self.api_key.as_ref();
        match &self.parsed_url {
            Some(url) => post(&self.client, url.clone(), key),
            // An unparseable URL is reported when the read is sent, like any send error.
            None => post(&self.client, &self.url, key),
        }
    }

    /// `POST <root>/tokenize`, one text per request (the endpoint takes one prompt), without
    /// special tokens. It runs only the tokenizer: a 366-text check of Gemma 3 takes about a
    /// second on a CPU vLLM, where `/v1/completions` with `echo` evaluated every prompt (~25 s).
    async fn tokenize_texts(
        &self,
        texts: &[String],
        slot: &Arc<InFlightPermit>,
    ) -> Result<Vec<Vec<u32>>, BackendError> {
        let url = self.tokenize_url();
        let mut out = Vec::with_capacity(texts.len());
        for text in texts {
            let body = serde_json::json!({
                "model": self.upstream_model,
                "prompt": text,
                "add_special_tokens": false,
            });
            let call = post(&self.client, &url, self.api_key.as_ref()).json(&body);
            let bytes = exchange(call, slot).await?;
            let parsed: TokenizeResponse = serde_json::from_slice(&bytes)
                .map_err(|e| BackendError::Protocol(format!("malformed /tokenize answer: {e}")))?;
            out.push(parsed.tokens);
        }
        Ok(out)
    }

    /// The request body, keys in the order the reference sends them.
    pub fn body<'a>(&'a self, request: &ReadRequest<'a>) -> ChatRequest<'a> {
        ChatRequest {
            model: &self.upstream_model,
            messages: Messages::new(request),
            options: ReadOptions {
                continue_final_message: true,
                add_generation_prompt: false,
                max_tokens: 1,
                temperature: 0,
                logprobs: true,
                top_logprobs: request.read_ids.len().min(MAX_TOP_LOGPROBS),
                logprob_token_ids: request.read_ids,
                allowed_token_ids: request.allowed_ids,
                return_tokens_as_token_ids: true,
                chat_template_kwargs: self.chat_template_kwargs.as_ref(),
                cache_salt: request.cache_salt,
            },
        }
    }

    /// The request body's bytes (those of [`Self::body`] through serde_json), in a buffer
    /// sized for them up front.
    pub fn encode(&self, request: &ReadRequest<'_>) -> Result<Vec<u8>, BackendError> {
        let body = self.body(request);
        let ids = request.allowed_ids.len() + request.read_ids.len();
        let mut out = Vec::with_capacity(body.messages.encoded_len() + 8 * ids + 512);
        body.write_json(&mut out)
            .map_err(|e| BackendError::Protocol(format!("cannot encode request: {e}")))?;
        Ok(out)
    }

    async fn send(
        &self,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let body = self.encode(&request)?;
        let call = self
            .post_chat()
            .header(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            )
            .routed(request.routing)
            .body(body);
        let bytes = exchange(call, slot).await?;
        parse_reply(&bytes, request.read_ids)
    }
}

impl Backend for VllmBackend {
    fn dialect(&self) -> &'static str {
        "vllm"
    }

    fn max_ids_per_read(&self, _ids: usize) -> usize {
        self.max_ids_per_read
    }

    fn shares_prefixes_in_flight(&self) -> bool {
        true
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
        let url = self.url.replace("/chat/completions", "/models");
        let call = get(&self.client, url, self.api_key.as_ref());
        let model = self.upstream_model.as_str();
        let max_model_len = move |models: &serde_json::Value| {
            let listed = models["data"].as_array()?;
            let entry = listed
                .iter()
                .find(|m| m["id"] == model)
                .or(listed.first())?;
            entry["max_model_len"].as_u64()
        };
        self.context.refresh(call, in_flight, max_model_len).boxed()
    }

    fn context_tokens(&self) -> Option<usize> {
        self.context.get()
    }
}

/// The request body (`Serialize` keeps field order, which the golden vectors pin).
#[derive(Debug, Serialize)]
pub struct ChatRequest<'a> {
    model: &'a str,
    messages: Messages<'a>,
    #[serde(flatten)]
    options: ReadOptions<'a>,
}

impl ChatRequest<'_> {
    /// Writes the bytes serde_json would, with the messages spliced in
    /// ([`Messages::write_json`]).
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(br#"{"model":"#);
        serde_json::to_writer(&mut *out, self.model)?;
        out.extend_from_slice(br#","messages":"#);
        self.messages.write_json(out)?;
        // The options as an object `{…}`, its brace turned into the comma that joins them.
        let at = out.len();
        serde_json::to_writer(&mut *out, &self.options)?;
        out[at] = b',';
        Ok(())
    }
}

/// Every field of the body after the messages.
#[derive(Debug, Serialize)]
struct ReadOptions<'a> {
    continue_final_message: bool,
    add_generation_prompt: bool,
    max_tokens: u32,
    temperature: u32,
    logprobs: bool,
    top_logprobs: usize,
    logprob_token_ids: &'a [u32],
    allowed_token_ids: &'a [u32],
    return_tokens_as_token_ids: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat_template_kwargs: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_salt: Option<&'a str>,
}

/// The part of vLLM's `/tokenize` answer the check reads.
#[derive(Deserialize)]
struct TokenizeResponse {
    tokens: Vec<u32>,
}

/// Reads the log-probabilities of `read_ids` out of a vLLM answer.
fn parse_reply(bytes: &[u8], read_ids: &[u32]) -> Result<ReadReply, BackendError> {
    let mut response = ChatResponse::parse(bytes)?;
    let usage = response.read_usage()?;
    let model = response.model.take();
    let top = response
        .into_first_position()
        .map(|t| t.top_logprobs.unwrap_or_default())
        .ok_or_else(|| BackendError::Protocol("no logprobs in the answer".into()))?;
    let mut logprobs = vec![f64::NAN; read_ids.len()];
    let positions = Positions::of(read_ids);
    for entry in top {
        let id = entry.id.or_else(|| entry.id_in_token());
        let Some(id) = id else { continue };
        if let Some(pos) = positions.find(id) {
            let lp = entry.logprob.unwrap_or(f64::NAN);
            if !lp.is_finite() {
                return Err(BackendError::Protocol(format!(
                    "non-finite logprob for token id {id}"
                )));
            }
            logprobs[pos] = lp;
        }
    }
    if let Some(missing) = logprobs.iter().position(|lp| lp.is_nan()) {
        return Err(BackendError::Protocol(format!(
            "requested token id {} missing from the answer",
            read_ids[missing]
        )));
    }
    Ok(ReadReply {
        logprobs,
        usage,
        model,
        pre_mask: true,
        http_requests: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_find_every_id_and_nothing_else() {
        let ids = [42u32, 7, 1000, 7, 3];
        let positions = Positions::of(&ids);
        assert_eq!(positions.find(42), Some(0));
        assert_eq!(positions.find(7), Some(1), "the first of a repeated id");
        assert_eq!(positions.find(1000), Some(2));
        assert_eq!(positions.find(3), Some(4));
        assert_eq!(positions.find(8), None);
        assert_eq!(positions.find(0), None);
        assert_eq!(positions.find(u64::MAX), None);
        assert_eq!(Positions::of(&[]).find(1), None);
    }

    #[test]
    fn replies_are_read_by_id_and_checked() {
        let ok = br#"{"model":"m","choices":[{"logprobs":{"content":[{"top_logprobs":[
            {"token":"token_id:1001","logprob":-2.0},{"token":"token_id:1000","logprob":-0.5}]}]}}],
            "usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        let reply = parse_reply(ok, &[1000, 1001]).expect("valid");
        assert_eq!(reply.logprobs, vec![-0.5, -2.0]);
        assert_eq!(reply.usage.map(|u| u.cached_tokens), Some(4));
        assert_eq!(reply.model.as_deref(), Some("m"));

        let missing = parse_reply(ok, &[1000, 1001, 1002]);
        assert!(matches!(missing, Err(BackendError::Protocol(m)) if m.contains("1002")));
        assert!(matches!(
            parse_reply(b"{", &[1]),
            Err(BackendError::Protocol(_))
        ));
        let no_logprobs = br#"{"choices":[{"logprobs":null}]}"#;
        assert!(matches!(
            parse_reply(no_logprobs, &[1]),
            Err(BackendError::Protocol(_))
        ));
        let null_lp = br#"{"choices":[{"logprobs":{"content":[{"top_logprobs":[{"token":"token_id:1","logprob":null}]}]}}]}"#;
        assert!(matches!(
            parse_reply(null_lp, &[1]),
            Err(BackendError::Protocol(_))
        ));
    }
}
