//! What running a request gives: its answers and token accounting ([`Answers`],
//! [`TokenUsage`]), or why it failed ([`PipelineError`]) and the error the caller gets for it.

use super::decode::{DecodeError, Decoded};
use crate::backend::BackendError;
use crate::error::{ApiError, Code};
use crate::models::circuit::Health;

/// Token accounting of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Prompt tokens over every upstream request.
    pub input_tokens: u64,
    /// Generated tokens (one per upstream request).
    pub output_tokens: u64,
    /// Upstream requests sent.
    pub upstream_requests: u64,
    /// Prompt tokens served from the backend's prefix cache.
    pub cached_tokens: u64,
    /// Prompt tokens the backend evaluated (by its own counters): what the request cost
    /// it, where `input_tokens` repeats every read's whole prompt.
    pub evaluated_tokens: u64,
    /// Whether some counts are estimates because the backend reported none.
    pub estimated: bool,
}

/// The answers of one request.
#[derive(Debug, Clone)]
pub struct Answers {
    /// One per question, in request order.
    pub answers: Vec<Decoded>,
    /// Token accounting.
    pub usage: TokenUsage,
    /// The model as the backend reported it (or the configured upstream id).
    pub model: String,
}

/// Why a request failed after validation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("backend answer breaks the protocol: {0}")]
    Decode(#[from] DecodeError),
    #[error("the request ran out of time")]
    Deadline,
    /// The model's token table failed its live check; retry after this many seconds.
    #[error("the model's token table does not match the serving tokenizer")]
    TableMismatch(u64),
    /// Over a token limit on an exact count (or on the estimate, when none could be had).
    #[error("the request is over a token limit")]
    TooLarge(ApiError),
    /// Every replica of the model is out (circuits open, tables mismatched); the soonest
    /// circuit lets a probe through after this many seconds.
    #[error("every replica of the model is out of service")]
    ReplicasOut(u64),
    /// A read's prompt (`tokens`) would not fit the backend's context window.
    #[error("a read of {tokens} tokens would not fit the backend's context of {window}")]
    ContextExceeded { tokens: usize, window: usize },
}

impl PipelineError {
    /// What this failure says about the backend's health, for its circuit breaker: only
    /// the backend's own 429/5xx, read timeouts and lost connections count against it.
    pub fn health(&self) -> Health {
        match self {
            PipelineError::Backend(
                BackendError::RateLimited { .. }
                | BackendError::Overloaded { .. }
                | BackendError::ServerError { .. }
                | BackendError::Timeout
                | BackendError::ConnectTimeout
                | BackendError::Unreachable,
            ) => Health::Failure,
            // For the model, no replica to read from is a backend that fails: its circuit
            // opens and its fallback serves, as with one URL.
            PipelineError::ReplicasOut(_) => Health::Failure,
            _ => Health::Neutral,
        }
    }

    /// Whether the backend answered with something that is not a valid completion
    /// (malformed, no log-probabilities, a requested id missing, numbers out of range): the
    /// backend's fault unless the request provoked it, which only another replica's answer
    /// to the same request can tell (`engine::pipeline`'s fleet). Options absent from the
    /// top-K are not garbage: they depend on the request's options.
    pub fn is_garbled(&self) -> bool {
        matches!(
            self,
            PipelineError::Backend(BackendError::Protocol(_)) | PipelineError::Decode(_)
        )
    }
}

impl TokenUsage {
    /// Adds another part's counts, each stopping at `u64::MAX` rather than wrapping (a
    /// wrapped sum would report less than was used).
    pub fn add(&mut self, other: &TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.upstream_requests = self
            .upstream_requests
            .saturating_add(other.upstream_requests);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.evaluated_tokens = self.evaluated_tokens.saturating_add(other.evaluated_tokens);
        self.estimated |= other.estimated;
    }
}

impl From<PipelineError> for ApiError {
    fn from(e: PipelineError) -> Self {
        match e {
            PipelineError::Backend(b) => b.into(),
            PipelineError::Decode(d) => crate::backend::protocol_broken(&d),
            PipelineError::TooLarge(refusal) => refusal,
            PipelineError::Deadline => ApiError::new(
                Code::DeadlineExceeded,
                "the request did not finish within its deadline",
            ),
            PipelineError::TableMismatch(retry) => ApiError::new(
                Code::TokenTableMismatch,
                "the model is disabled: its token table does not match the tokenizer the backend serves; retry later",
            )
            .retry_after(retry),
            PipelineError::ReplicasOut(retry) => ApiError::new(
                Code::CircuitOpen,
                "every replica of the model's backend is failing or out of service (circuit \
                 open, token table mismatch); retry later",
            )
            .retry_after(retry),
            PipelineError::ContextExceeded { tokens, window } => ApiError::new(
                Code::RequestTooLarge,
                format!(
                    "a read's prompt is {tokens} tokens, more than the backend's context window \
                     of {window} tokens (as the backend reports it); shorten the state, the \
                     question or its options"
                ),
            ),
        }
    }
}
