//! One masked read: what the engine asks a backend ([`ReadRequest`]) and what comes back
//! ([`ReadReply`], with the [`ReadUsage`] the backend reported).

use super::user_content::EncodedContent;

/// One upstream request: a masked single-token completion.
#[derive(Debug, Clone, Copy)]
pub struct ReadRequest<'a> {
    /// The user message, encoded once for every read of it.
    pub content: &'a EncodedContent,
    /// The assistant prefill (`answer=`).
    pub prefix: &'a str,
    /// Every option id of the question: the mask.
    pub allowed_ids: &'a [u32],
    /// The ids whose log-probabilities this read returns (a slice of `allowed_ids`).
    pub read_ids: &'a [u32],
    /// Whether this read is one node of a multi-token label trie, whose log-probabilities
    /// are added along each label's path (the chain rule): that is exact only for raw,
    /// pre-mask conditionals, so a dialect that could return the masked distribution
    /// instead must read raw here.
    pub chained: bool,
}

/// Token counts one upstream request reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// Prompt tokens the backend evaluated rather than served from its prefix cache, by its
    /// own counter where it has one (llama-server's `timings.prompt_n`), else
    /// `prompt_tokens − cached_tokens`.
    pub evaluated_tokens: u64,
}

/// What one read returned.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadReply {
    /// Pre-mask log-probability of each id of `read_ids`, in that order; all finite.
    pub logprobs: Vec<f64>,
    /// Usage as the backend reported it; `None` when it reported none.
    pub usage: Option<ReadUsage>,
    /// The model name the backend reported.
    pub model: Option<String>,
    /// Whether `logprobs` are pre-mask (their mass is the option mass); false when they are
    /// the masked distribution itself, so the option mass is unknown.
    pub pre_mask: bool,
    /// HTTP requests this read took (a dialect may need a second one).
    pub http_requests: u64,
}
