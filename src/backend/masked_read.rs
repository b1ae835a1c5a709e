//! One masked read: what the engine asks a backend ([`ReadRequest`]) and what comes back
//! ([`ReadReply`], with the [`ReadUsage`] the backend reported).

use super::user_content::EncodedContent;
use super::BackendError;

/// The most tokens of one kind one upstream request may report. A read's prompt fits its
/// model's context window (10^7 tokens at the very most today), and a native upstream's
/// reply sums the reads of one request (its questions × orders × slices, each one such
/// prompt); 2^40 (≈ 1.1 × 10^12) is orders of magnitude above both, so a count beyond it is
/// not a count (2^64 − 1 was seen) and is refused as a broken protocol instead of being
/// summed. At 2^40 a request, a key's daily sums (which saturate) stay exact for millions of
/// requests.
pub(super) const MAX_REPORTED_TOKENS: u64 = 1 << 40;

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
    /// The request's routing key and the headers it goes in, when the model sends one
    /// (the same for every read of a request).
    pub routing: Option<&'a super::Routing>,
    /// The caller's tenant salt (`http/auth/salt.rs`), for a dialect whose host keeps one
    /// prefix cache for all: vLLM sends it as `cache_salt`; the others do not send it.
    pub cache_salt: Option<&'a str>,
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

impl ReadUsage {
    /// The usage, when every count is at most `MAX_REPORTED_TOKENS` (2^40); else a protocol
    /// error naming the count (a number, never upstream text).
    pub fn plausible(self) -> Result<Self, BackendError> {
        let counts = [
            ("prompt tokens", self.prompt_tokens),
            ("completion tokens", self.completion_tokens),
            ("cached tokens", self.cached_tokens),
            ("evaluated tokens", self.evaluated_tokens),
        ];
        match counts.iter().find(|(_, n)| *n > MAX_REPORTED_TOKENS) {
            None => Ok(self),
            Some((what, n)) => Err(BackendError::Protocol(format!(
                "the usage reports {n} {what}, more than {MAX_REPORTED_TOKENS} (2^40) any one \
                 request can take"
            ))),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_beyond_the_bound_is_a_protocol_error() {
        let usage = ReadUsage {
            prompt_tokens: MAX_REPORTED_TOKENS,
            completion_tokens: 1,
            cached_tokens: 0,
            evaluated_tokens: MAX_REPORTED_TOKENS,
        };
        assert_eq!(usage.plausible().ok(), Some(usage));
        let wrapped = ReadUsage {
            cached_tokens: u64::MAX,
            ..usage
        };
        match wrapped.plausible() {
            Err(BackendError::Protocol(why)) => {
                assert!(why.contains("18446744073709551615 cached tokens"), "{why}")
            }
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }
}
