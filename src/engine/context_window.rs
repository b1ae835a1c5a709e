//! Exact token counts before any read is sent, where the byte bound cannot settle them:
//!
//! * [`fits`]: reads that cannot fit the backend's context window are refused, a 413 that
//!   names the window and the prompt's size, not one upstream 400 per read (a 255-option
//!   question is 30 reads of one prompt);
//! * [`settle_limits`]: a request the byte estimate put over a token limit at validation
//!   ([`ValidRequest::recount`]) is counted exactly, and refused only on that count.
//!
//! Both count with the configured tokenizer, else with the backend's own (`POST /tokenize`,
//! under one in-flight slot, within the request's deadline); a request the byte bound
//! settles pays nothing. What is sent to be counted is bounded: a text whose bytes alone
//! prove it over its limit was refused at validation, so a counted text is at most the limit
//! times the widest token's bytes (16 MiB for a state at the default limits), and the body's
//! share of the memory budget stays held while it is counted (`http/doors/handler.rs`).

use std::sync::Arc;

use super::answers::PipelineError;
use crate::backend::{Backend, EncodedContent};
use crate::in_flight::InFlight;
use crate::models::Model;
use crate::request::prompt::Ask;
use crate::request::validate::{
    check_on_estimate, check_token_counts, piece_texts, Counted, PieceTokens,
};
use crate::request::ValidRequest;

/// Tokens a read adds around its user message: the chat template's turn markers, the
/// `answer=` prefill with a multi-token label's leading tokens, and the one generated
/// token. A generous allowance.
pub const AROUND_MESSAGE: usize = 32;

/// Whether every read of `asks` fits `model`'s context window (unknown window: yes). A
/// message's UTF-8 bytes bound its tokens from above, so most prompts are settled by their
/// length alone; a longer one is counted once, with the configured tokenizer or else the
/// backend's own. Images are not counted (their tokens depend on the model).
pub async fn fits(
    model: &Model,
    backend: &dyn Backend,
    in_flight: &InFlight,
    asks: &[Vec<Ask>],
) -> Result<(), PipelineError> {
    let Some(window) = backend.context_tokens() else {
        return Ok(());
    };
    let room = window.saturating_sub(AROUND_MESSAGE);
    let mut counted: Vec<&Arc<EncodedContent>> = Vec::new();
    for ask in asks.iter().flatten() {
        let content = &ask.content;
        if content.text_len() <= room || counted.iter().any(|c| Arc::ptr_eq(c, content)) {
            continue;
        }
        counted.push(content);
        let texts = [ask.content.text().into_owned()];
        if let Some(&tokens) = count(model, in_flight, &texts)
            .await
            .as_ref()
            .and_then(|c| c.first())
        {
            if tokens > room {
                let tokens = tokens + AROUND_MESSAGE;
                return Err(PipelineError::ContextExceeded { tokens, window });
            }
        }
    }
    Ok(())
}

/// Settles the token limits the byte estimate put `req` over at validation: its pieces
/// (preamble, state, question objects, histories) are counted by the backend's tokenizer
/// and the limits checked on that count. When the backend cannot count them now, the
/// request is refused on the estimate, and the message says why.
pub async fn settle_limits(req: &ValidRequest, in_flight: &InFlight) -> Result<(), PipelineError> {
    let Some(recount) = req.recount() else {
        return Ok(());
    };
    let texts: Vec<String> = piece_texts(req)
        .into_iter()
        .map(|t| t.into_owned())
        .collect();
    let checked = match count(req.model(), in_flight, &texts).await {
        Some(counts) => {
            let tokens = PieceTokens::from_counts(req, &counts);
            check_token_counts(req, &tokens, recount.limits, Counted::Backend)
        }
        None => check_on_estimate(req, recount.limits),
    };
    checked.map_err(PipelineError::TooLarge)
}

/// Each text's tokens: by the configured tokenizer, else by the backend's (one tokenize
/// call under an in-flight slot); `None` when the backend cannot say now, or the model
/// forwards to a native upstream (which has no tokenizer to ask).
async fn count(model: &Model, in_flight: &InFlight, texts: &[String]) -> Option<Vec<usize>> {
    if model.counter.is_exact() {
        return Some(texts.iter().map(|t| model.counter.count(t)).collect());
    }
    let backend = model.serving.reads()?;
    let permit = in_flight.acquire().await;
    match backend.tokenize(texts, permit).await {
        Ok(ids) if ids.len() == texts.len() => Some(ids.iter().map(Vec::len).collect()),
        Ok(_) => {
            tracing::debug!("the backend's tokenizer answered for other texts than asked");
            None
        }
        Err(e) => {
            tracing::debug!(error = %e, "a long prompt could not be counted by the backend");
            None
        }
    }
}
