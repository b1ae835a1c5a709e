//! Backends: one small object-safe trait, one file per wire dialect.
//!
//! A backend turns one masked read (a user message, the option ids to allow, the ids to
//! read) into the pre-mask log-probabilities of exactly those ids, or a [`BackendError`]
//! that says which contract outcome applies. Each dialect's doc comment lists how it
//! differs from plain OpenAI and refuses what it cannot honour.
//!
//! This file holds the [`Backend`] trait; the read's types are in `masked_read.rs`, its
//! failures in `failure.rs`, the user message in `user_content.rs`, the chat wire types in
//! `chat.rs`, what a probe found in `host_report.rs`, upkeep timing in `due.rs`, the routing key
//! a read carries for a router in front of replicas in `routing_key.rs`, the host's context
//! window as the upkeep reads it in `window_probe.rs`.

mod http;
pub use http::set_log_error_text;
pub mod pool;
pub use pool::Pool;
pub mod chat;
mod due;
mod failure;
pub mod host_report;
pub mod llamacpp;
mod masked_read;
pub mod openai;
mod routing_key;
pub mod systemone;
mod user_content;
pub mod vllm;
pub mod window_probe;

pub use chat::Messages;
pub use due::Due;
pub use failure::{protocol_broken, BackendError};
pub use host_report::HostReport;
pub use masked_read::{ReadReply, ReadRequest, ReadUsage};
pub use routing_key::Routing;
pub use user_content::{EncodedContent, Part, UserContent};

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::in_flight::{InFlight, InFlightPermit};

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
    /// other's prefix blocks: docs/benchmarks.md).
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
