//! Reads that cannot fit the backend's context window are refused before any is sent: a
//! 413 that names the window and the prompt's size, not one upstream 400 per read (a
//! 255-option question is 30 reads of one prompt).

use std::borrow::Cow;
use std::sync::Arc;

use super::pipeline::PipelineError;
use crate::backend::EncodedContent;
use crate::limits::InFlight;
use crate::models::Model;
use crate::request::prompt::Ask;

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
    in_flight: &InFlight,
    asks: &[Vec<Ask>],
) -> Result<(), PipelineError> {
    let Some(window) = model.backend.context_tokens() else {
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
        if let Some(tokens) = count(model, in_flight, ask.content.text()).await {
            if tokens > room {
                let tokens = tokens + AROUND_MESSAGE;
                return Err(PipelineError::ContextExceeded { tokens, window });
            }
        }
    }
    Ok(())
}

/// The message's tokens: by the configured tokenizer, else by the backend's (one tokenize
/// request under an in-flight slot); `None` when the backend cannot say now (the read then
/// goes out, and the backend decides).
async fn count(model: &Model, in_flight: &InFlight, text: Cow<'_, str>) -> Option<usize> {
    if model.counter.is_exact() {
        return Some(model.counter.count(&text));
    }
    let texts = [text.into_owned()];
    let permit = in_flight.acquire().await;
    match model.backend.tokenize(&texts, permit).await {
        Ok(ids) => ids.first().map(Vec::len),
        Err(e) => {
            tracing::debug!(error = %e, "a long prompt could not be counted by the backend");
            None
        }
    }
}
