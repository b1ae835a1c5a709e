//! The OpenAI chat-completion wire types every dialect shares: the two messages of a read (the user message and
//! the `answer=` prefill), and the response's choices, log-probabilities and usage.

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::user_content::{EncodedContent, UserContent};
use super::{BackendError, ReadRequest, ReadUsage};

/// The two messages every dialect sends: the user message and the assistant prefill
/// (`answer=`) that the model continues. Serialises as a JSON array.
#[derive(Debug)]
pub struct Messages<'a> {
    content: &'a EncodedContent,
    prefix: &'a str,
}

impl<'a> Messages<'a> {
    /// The messages of one read.
    pub fn new(request: &ReadRequest<'a>) -> Self {
        Messages {
            content: request.content,
            prefix: request.prefix,
        }
    }

    /// Writes the same bytes as serde_json's `to_writer(self)`, splicing the content's
    /// encoding in rather than escaping it again.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(br#"[{"role":"user","content":"#);
        out.extend_from_slice(self.content.json().as_bytes());
        out.extend_from_slice(br#"},{"role":"assistant","content":"#);
        serde_json::to_writer(&mut *out, self.prefix)?;
        out.extend_from_slice(b"}]");
        Ok(())
    }

    /// Bytes the encoded messages take, about.
    pub fn encoded_len(&self) -> usize {
        self.content.json().len() + self.prefix.len() + 64
    }
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let user = UserMessage {
            role: "user",
            content: self.content,
        };
        let assistant = AssistantMessage {
            role: "assistant",
            content: self.prefix,
        };
        (user, assistant).serialize(s)
    }
}

#[derive(Debug, serde::Serialize)]
struct UserMessage<'a> {
    role: &'static str,
    content: &'a UserContent,
}

#[derive(Debug, serde::Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    content: &'a str,
}

/// A chat-completion answer: the parts every dialect reads. Token strings are borrowed
/// from the body (a read returns up to 128 top entries; none is copied).
/// The `+100` bias that makes a group of ids the top of the distribution: a mask for
/// llama-server (which adds it to the logit), the most hosted APIs accept (±100).
pub const MASK_BIAS: f64 = 100.0;

/// `logit_bias` as OpenAI writes it, `{"<id>": 100, …}`: hosted APIs require this form,
/// llama-server reads it as well as its own list of pairs, and routers that parse the body
/// as OpenAI's (vllm-router) refuse the list with a 422.
#[derive(Debug)]
pub struct BiasMap<'a>(pub &'a [u32]);

impl Serialize for BiasMap<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for id in self.0 {
            map.serialize_entry(id, &MASK_BIAS)?;
        }
        map.end()
    }
}

#[derive(Debug, Deserialize)]
pub struct ChatResponse<'a> {
    /// The model as the backend names it.
    pub model: Option<String>,
    #[serde(default, borrow)]
    pub choices: Vec<Choice<'a>>,
    pub usage: Option<WireUsage>,
    /// llama.cpp's extension: `cache_n` is its prefix-cache hit when `usage` has none.
    pub timings: Option<Timings>,
}

#[derive(Debug, Deserialize)]
pub struct Choice<'a> {
    #[serde(borrow)]
    pub logprobs: Option<ChoiceLogprobs<'a>>,
}

#[derive(Debug, Deserialize)]
pub struct ChoiceLogprobs<'a> {
    #[serde(borrow)]
    pub content: Option<Vec<TokenLogprobs<'a>>>,
}

/// One generated position: the sampled token and its alternatives.
#[derive(Debug, Deserialize)]
pub struct TokenLogprobs<'a> {
    /// The sampled token's id (llama.cpp), when the backend reports one.
    pub id: Option<u64>,
    /// The sampled token's id as a `token_id` field (some OpenAI-compatible hosts).
    pub token_id: Option<u64>,
    /// The sampled token's text (or `token_id:N`).
    #[serde(borrow)]
    pub token: Option<Cow<'a, str>>,
    /// The pre-sampling top-K (log-probabilities).
    #[serde(borrow)]
    pub top_logprobs: Option<Vec<TopLogprob<'a>>>,
    /// llama.cpp's post-sampling distribution (`post_sampling_probs`: probabilities).
    #[serde(borrow)]
    pub top_probs: Option<Vec<TopLogprob<'a>>>,
}

/// One alternative: its id (an `id` or `token_id` field, or, in vLLM's
/// `return_tokens_as_token_ids` form, a token `token_id:N`), its text, and its
/// log-probability or probability.
#[derive(Debug, Deserialize)]
pub struct TopLogprob<'a> {
    pub id: Option<u64>,
    /// The id as a `token_id` field (some OpenAI-compatible hosts name it so).
    pub token_id: Option<u64>,
    #[serde(borrow)]
    pub token: Option<Cow<'a, str>>,
    pub logprob: Option<f64>,
    pub prob: Option<f64>,
}

/// The id in a token written `token_id:N` (vLLM's `return_tokens_as_token_ids`, and
/// hosts that name tokens so): the one place that form is parsed.
pub fn token_id(token: &str) -> Option<u64> {
    token.strip_prefix("token_id:")?.parse().ok()
}

impl TopLogprob<'_> {
    /// The id its token names in the `token_id:N` form, if it is written so.
    pub fn id_in_token(&self) -> Option<u64> {
        self.token.as_deref().and_then(token_id)
    }
}

impl TokenLogprobs<'_> {
    /// The id the sampled token names in the `token_id:N` form, if it is written so.
    pub fn id_in_token(&self) -> Option<u64> {
        self.token.as_deref().and_then(token_id)
    }
}

/// Where each id of a read stands in it, found by binary search: every dialect looks up
/// the entries of an answer (up to 1,000 for llama.cpp's raw top-K) among the read's ids
/// (up to 128), and a linear scan per entry would be their product.
pub struct Positions(Vec<(u64, usize)>);

impl Positions {
    /// The positions of `read_ids`.
    pub fn of(read_ids: &[u32]) -> Self {
        let mut sorted: Vec<(u64, usize)> = read_ids
            .iter()
            .enumerate()
            .map(|(pos, id)| (u64::from(*id), pos))
            .collect();
        sorted.sort_unstable();
        Positions(sorted)
    }

    /// The position of `id` in the read (its first, should the read repeat it).
    pub fn find(&self, id: u64) -> Option<usize> {
        let first = self.0.partition_point(|(other, _)| *other < id);
        self.0
            .get(first)
            .filter(|(other, _)| *other == id)
            .map(|(_, pos)| *pos)
    }
}

#[derive(Debug, Deserialize)]
pub struct WireUsage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Deserialize)]
pub struct PromptDetails {
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct Timings {
    pub cache_n: Option<u64>,
    /// Prompt tokens evaluated (not served from the cache).
    pub prompt_n: Option<u64>,
}

impl<'a> ChatResponse<'a> {
    /// Parses an answer body; malformed JSON breaks the protocol.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, BackendError> {
        serde_json::from_slice(bytes)
            .map_err(|e| BackendError::Protocol(format!("malformed JSON: {e}")))
    }

    /// The token counts, when the backend reported usage (cached tokens from
    /// `prompt_tokens_details`, else llama.cpp's `timings.cache_n`; evaluated tokens from
    /// llama.cpp's `timings.prompt_n`, else the prompt tokens not cached); a count beyond
    /// [`ReadUsage::plausible`]'s bound breaks the protocol.
    pub fn read_usage(&self) -> Result<Option<ReadUsage>, BackendError> {
        let cache_n = self.timings.as_ref().and_then(|t| t.cache_n);
        let prompt_n = self.timings.as_ref().and_then(|t| t.prompt_n);
        self.usage
            .as_ref()
            .map(|u| {
                let prompt_tokens = u.prompt_tokens.unwrap_or(0);
                let cached_tokens = u
                    .prompt_tokens_details
                    .as_ref()
                    .and_then(|d| d.cached_tokens)
                    .or(cache_n)
                    .unwrap_or(0);
                ReadUsage {
                    prompt_tokens,
                    completion_tokens: u.completion_tokens.unwrap_or(1),
                    cached_tokens,
                    evaluated_tokens: prompt_n
                        .unwrap_or_else(|| prompt_tokens.saturating_sub(cached_tokens)),
                }
                .plausible()
            })
            .transpose()
    }

    /// The first choice's first generated position: the answer position.
    pub fn into_first_position(self) -> Option<TokenLogprobs<'a>> {
        self.choices
            .into_iter()
            .next()
            .and_then(|c| c.logprobs)
            .and_then(|l| l.content)
            .and_then(|c| c.into_iter().next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids in the order given, as strings (serde_json writes integer keys quoted).
    #[test]
    fn logit_bias_is_an_object_of_id_strings() {
        let body = serde_json::to_string(&BiasMap(&[7, 1000])).expect("serialises");
        assert_eq!(body, r#"{"7":100.0,"1000":100.0}"#);
    }

    /// Evaluated tokens come from llama.cpp's own counter when it reports one, else they
    /// are the prompt tokens not served from the cache (vLLM's `prompt_tokens_details`).
    #[test]
    fn evaluated_tokens_are_the_backends_own_count() {
        let llama = br#"{"usage": {"prompt_tokens": 100, "completion_tokens": 1},
            "timings": {"cache_n": 97, "prompt_n": 3}}"#;
        let vllm = br#"{"usage": {"prompt_tokens": 100, "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 64}}}"#;
        let usage = |b: &[u8]| {
            ChatResponse::parse(b)
                .expect("parses")
                .read_usage()
                .expect("plausible")
                .expect("usage")
        };
        let l = usage(llama);
        assert_eq!((l.cached_tokens, l.evaluated_tokens), (97, 3));
        let v = usage(vllm);
        assert_eq!((v.cached_tokens, v.evaluated_tokens), (64, 36));
    }

    /// A count no request can hold (a wrapped 2^64 − 1) breaks the protocol.
    #[test]
    fn an_implausible_count_is_a_protocol_error() {
        let wrapped =
            br#"{"usage": {"prompt_tokens": 18446744073709551615, "completion_tokens": 1}}"#;
        let read = ChatResponse::parse(wrapped).expect("parses").read_usage();
        assert!(matches!(read, Err(BackendError::Protocol(_))), "{read:?}");
    }
}
