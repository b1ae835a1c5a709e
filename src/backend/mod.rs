//! Backends: one small object-safe trait, one file per wire dialect.
//!
//! A backend turns one masked read (a user message, the option ids to allow, the ids to
//! read) into the pre-mask log-probabilities of exactly those ids, or a [`BackendError`]
//! that says which contract outcome applies. Each dialect's doc comment lists how it
//! differs from plain OpenAI and refuses what it cannot honour.

mod http;
pub use http::set_log_error_text;
pub mod pool;
pub use pool::Pool;
pub mod chat;
pub mod context;
pub mod host_report;
pub mod llamacpp;
pub mod openai;
pub mod systemone;
pub mod vllm;

pub use chat::{EncodedContent, Messages, Part, UserContent};
pub use host_report::HostReport;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::error::{ApiError, Code, MAX_RETRY_AFTER_SECS};
use crate::limits::{InFlight, InFlightPermit};

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

/// How a read failed, in terms of the contract's outcomes. Details for the log stay here;
/// the caller only ever sees the mapped code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// The backend said 429.
    #[error("backend rate limited the request")]
    RateLimited { retry_after: Option<u64> },
    /// The backend said 503.
    #[error("backend is overloaded")]
    Overloaded { retry_after: Option<u64> },
    /// The backend refused the request with another 4xx.
    #[error("backend rejected the request with status {status}")]
    Rejected { status: u16 },
    /// The backend answered 5xx (other than 503).
    #[error("backend failed with status {status}")]
    ServerError { status: u16 },
    /// No connection could be made.
    #[error("backend is unreachable")]
    Unreachable,
    /// The read ran out of time.
    #[error("backend read timed out")]
    Timeout,
    /// The answer breaks the protocol (malformed, no logprobs, a requested id missing,
    /// non-finite numbers). The text is for the log only.
    #[error("backend answer breaks the protocol: {0}")]
    Protocol(String),
    /// Options were absent from the backend's top-K log-probabilities, so the masked
    /// distribution cannot be read exactly (an absent option is not probability 0).
    #[error("{missing} of {options} options missing from the backend's top-{top_k} logprobs")]
    Missing {
        missing: usize,
        options: usize,
        top_k: usize,
    },
    /// A native upstream's answer breaks the contract's types: the field (named by question
    /// position, never by the caller's ids) and what is wrong with it, in this service's
    /// words, so the caller may see it.
    #[error("the native upstream's answer breaks the contract: {0}")]
    Contract(String),
    /// The backend cannot be read exactly at all (its probe found what is missing): the
    /// model stays disabled. The text names what is missing, never the backend's own words.
    #[error("the backend cannot be served: {0}")]
    Unsupported(String),
}

/// When a piece of background upkeep (a host probe, a token-table check) wants to run
/// again, as the attempt that just finished decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// After this long (the attempt concluded, or a verdict stands).
    In(std::time::Duration),
    /// The attempt could not conclude and nothing stands yet: soon, with backoff.
    Retry,
    /// Nothing more to keep.
    Never,
}

/// A chat-completion backend in one dialect, serving one upstream model through masked
/// reads. (A native System One upstream answers whole requests instead and is no
/// `Backend`: [`systemone::SystemOneBackend`].)
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// The dialect's name, for logs and metrics.
    fn dialect(&self) -> &'static str;
    /// Most ids one read of a node with `ids` options may ask for; longer nodes are read
    /// in slices (each with the full mask).
    fn max_ids_per_read(&self, ids: usize) -> usize;
    /// Whether reads that share a prompt head may all go out at once: the backend shares
    /// the head between requests that arrive together, so seating it with one read first
    /// would only add a round trip. vLLM's scheduler does (a step writes every new token's
    /// keys and values before any attention reads them, so requests of one step hit each
    /// other's prefix blocks; measured: the same prompt tokens computed either way).
    /// llama-server does not: one slot evaluates one prompt at a time and reuses only what
    /// its cache held before, so a staged request seats the head first.
    fn shares_prefixes_in_flight(&self) -> bool {
        false
    }
    /// Sends one read. The permit is held until the read completes.
    fn read<'a>(
        &'a self,
        request: ReadRequest<'a>,
        permit: InFlightPermit,
    ) -> BoxFuture<'a, Result<ReadReply, BackendError>>;
    /// Tokenizes each text with the serving tokenizer (special tokens as the backend adds
    /// them), for the live token-table check, `--token-table auto` and context counts. The
    /// permit is held until every text is tokenized (vLLM and llama-server take one text
    /// per HTTP request).
    fn tokenize<'a>(
        &'a self,
        texts: &'a [String],
        permit: InFlightPermit,
    ) -> BoxFuture<'a, Result<Vec<Vec<u32>>, BackendError>>;
    /// Whether the chat template must be refused (it opens a reasoning block before the
    /// answer position): the tag it opens, checked with the live token-table check. A
    /// dialect that asks its backend holds the permit until the answer is in; one that
    /// cannot ask releases it at once.
    fn refuses_template<'a>(
        &'a self,
        prefix: &'a str,
        permit: InFlightPermit,
    ) -> BoxFuture<'a, Result<Option<String>, BackendError>> {
        let _ = (prefix, permit);
        futures::future::ready(Ok(None)).boxed()
    }
    /// Background upkeep of what the dialect must find out about its host (the `openai`
    /// dialect's probe, and its re-probe of a refusal): runs what is due now, each upstream
    /// request under a permit of `in_flight`, and says when to come back. Only the model's
    /// upkeep task calls it; requests never wait on it. Dialects that know their host keep
    /// nothing ([`Due::Never`]).
    fn upkeep<'a>(&'a self, in_flight: &'a InFlight) -> BoxFuture<'a, Due> {
        let _ = in_flight;
        futures::future::ready(Due::Never).boxed()
    }
    /// Whether reads may go out, from what the upkeep last found (an error refuses the
    /// request; `Unsupported`: the model stays disabled). Before the upkeep's first attempt
    /// has finished this waits for it, bounded by the probe's timeout; it never sends
    /// anything itself. Dialects that know their host are always ready.
    fn prepare(&self) -> BoxFuture<'_, Result<(), BackendError>> {
        futures::future::ready(Ok(())).boxed()
    }
    /// The backend's context window in tokens, once its upkeep has read it (`None`:
    /// unknown, reads are not checked against it).
    fn context_tokens(&self) -> Option<usize> {
        None
    }
    /// What [`Backend::upkeep`] found, for `/readyz` and the metrics; `None` for dialects
    /// that find nothing out.
    fn host_report(&self) -> Option<HostReport> {
        None
    }
}

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        let retry = |s: Option<u64>| s.unwrap_or(1).clamp(1, MAX_RETRY_AFTER_SECS);
        match e {
            BackendError::RateLimited { retry_after } => ApiError::new(
                Code::UpstreamRateLimited,
                "the backend is rate limiting; retry later",
            )
            .retry_after(retry(retry_after)),
            BackendError::Overloaded { retry_after } => ApiError::new(
                Code::UpstreamOverloaded,
                "the backend is overloaded; retry later",
            )
            .retry_after(retry(retry_after)),
            BackendError::Rejected { status } if status == 401 || status == 403 => ApiError::new(
                Code::UpstreamError,
                "the backend refused this service's credentials",
            ),
            BackendError::Rejected { status } => ApiError::new(
                Code::UpstreamRejected,
                format!("the backend rejected the request with status {status}"),
            ),
            BackendError::ServerError { status } => ApiError::new(
                Code::UpstreamError,
                format!("the backend failed with status {status}"),
            ),
            BackendError::Unreachable => ApiError::new(
                Code::UpstreamUnavailable,
                "the backend is unreachable; retry later",
            )
            .retry_after(5),
            BackendError::Timeout => ApiError::new(
                Code::UpstreamTimeout,
                "a backend read did not finish within the read timeout",
            ),
            BackendError::Missing {
                missing,
                options,
                top_k,
            } => missing_options(missing, options, top_k),
            BackendError::Unsupported(what) => ApiError::new(
                Code::BackendUnsupported,
                format!("the model is disabled: {what}"),
            )
            .retry_after(MAX_RETRY_AFTER_SECS),
            BackendError::Protocol(detail) => protocol_broken(&detail),
            BackendError::Contract(what) => {
                tracing::warn!(reason = %what, "native upstream answer breaks the contract");
                ApiError::new(
                    Code::UpstreamProtocol,
                    format!("the upstream's answer broke the contract: {what}"),
                )
            }
        }
    }
}

/// The 502 for options absent from the backend's top-K (logged with the counts).
fn missing_options(missing: usize, options: usize, top_k: usize) -> ApiError {
    tracing::warn!(
        missing,
        options,
        top_k,
        "options missing from the backend's top-K"
    );
    ApiError::new(
        Code::UpstreamProtocol,
        format!(
            "{missing} of the {options} options were not among the backend's top-{top_k} log-probabilities, so their masked distribution cannot be read exactly"
        ),
    )
}

/// The 502 for a backend answer that breaks the protocol: the detail goes to the log
/// (with the request id), never to the caller.
pub fn protocol_broken(detail: &dyn std::fmt::Display) -> ApiError {
    tracing::warn!(reason = %detail, "backend answer breaks the protocol");
    ApiError::new(
        Code::UpstreamProtocol,
        "the backend's answer broke the protocol (see the service log for this request id)",
    )
}
