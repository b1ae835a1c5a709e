//! `--token-table auto`: a token table built from the tokenizer the backend serves.
//!
//! vLLM and llama-server both tokenize on request (`POST /tokenize`), so a model needs no
//! `tokenizer.json` and no `systemone tokens build` run: the service asks the backend for
//! the tokens of every text [`build_from`] would encode (the prefix, `prefix + i` for the
//! integers it tries, every letter and numeral label), then runs exactly those rules over
//! the answers. The table equals what `tokens build` writes from the same tokenizer's file.
//!
//! The integers are fetched in ascending batches until `max` single-token labels are found
//! or the search limit is reached, as the rules look at them; a digit-splitting tokenizer
//! (Gemma, Qwen) has only `0`–`9`, so the search runs to the limit: ~10,400 texts, sent
//! [`PARALLEL`] batches at a time, each batch holding one in-flight slot.

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt};

use super::build::{build_from, single_id, BuildError, BuildOptions};
use super::{SchemeKind, TokenTable, TokenizerSource, MAX_NUMERAL_WIDTH};
use crate::backend::{Backend, BackendError};
use crate::in_flight::InFlight;

/// Texts per tokenize call (one in-flight slot each).
const BATCH: usize = 256;
/// Tokenize calls at once: the search costs ~40 calls, a few seconds on a local backend.
const PARALLEL: usize = 4;

/// Why a live build did not produce a table.
#[derive(Debug, thiserror::Error)]
pub enum LiveBuildError {
    /// The backend did not answer (a cold or busy backend): try again later.
    #[error("the backend's tokenizer did not answer: {0}")]
    Backend(#[from] BackendError),
    /// The serving tokenizer cannot label options by the rules (the reason says why).
    #[error("{0}")]
    Refused(#[from] BuildError),
}

/// Builds a table named `name` from the backend's tokenizer with the rules of
/// [`build_from`]; `tokenizer_name` says where it came from (no file, so no sha256).
pub async fn build_live(
    backend: &dyn Backend,
    in_flight: &InFlight,
    name: &str,
    tokenizer_name: &str,
    prefix: &str,
    options: &BuildOptions,
) -> Result<TokenTable, LiveBuildError> {
    let mut known = HashMap::new();
    fetch(
        backend,
        in_flight,
        scheme_texts(prefix, options),
        &mut known,
    )
    .await?;
    let prefix_ids = known.get(prefix).cloned().unwrap_or_default();
    let (mut found, mut next) = (0, 0);
    while found < options.max && next < options.search_limit {
        let end = next.saturating_add(BATCH as u32).min(options.search_limit);
        let texts: Vec<String> = (next..end).map(|i| format!("{prefix}{i}")).collect();
        fetch(backend, in_flight, texts.clone(), &mut known).await?;
        found += texts
            .iter()
            .filter(|t| single_id(&known[*t], &prefix_ids).is_some())
            .count();
        next = end;
    }
    let encode = |text: &str| {
        known.get(text).cloned().ok_or_else(|| BuildError::Encode {
            text: text.chars().take(40).collect(),
            reason: "the backend was not asked for it".into(),
        })
    };
    let source = TokenizerSource {
        name: tokenizer_name.to_string(),
        sha256: None,
    };
    Ok(build_from(encode, name, source, prefix, options)?)
}

/// The prefix and every letter and numeral label text the options ask for, after it.
fn scheme_texts(prefix: &str, options: &BuildOptions) -> Vec<String> {
    let letters = options.letters.then_some((SchemeKind::Letters, 1));
    let numerals = options
        .numeral_widths
        .iter()
        .filter(|w| (1..=MAX_NUMERAL_WIDTH).contains(*w))
        .map(|w| (SchemeKind::Numerals, *w));
    let labels = letters
        .into_iter()
        .chain(numerals)
        .flat_map(|(kind, width)| {
            let count = kind.max_labels(width).min(options.max);
            (0..count).map(move |i| format!("{prefix}{}", kind.text(width, i)))
        });
    std::iter::once(prefix.to_string()).chain(labels).collect()
}

/// Tokenizes `texts` through the backend into `known`, [`PARALLEL`] batches at a time.
async fn fetch(
    backend: &dyn Backend,
    in_flight: &InFlight,
    texts: Vec<String>,
    known: &mut HashMap<String, Vec<u32>>,
) -> Result<(), BackendError> {
    let batches: Vec<Vec<String>> = texts.chunks(BATCH).map(<[String]>::to_vec).collect();
    let answers: Vec<(Vec<String>, Vec<Vec<u32>>)> = futures::stream::iter(batches)
        .map(|batch| async move {
            let permit = in_flight.acquire().await;
            let ids = backend.tokenize(&batch, permit).await?;
            if ids.len() != batch.len() {
                return Err(BackendError::Protocol(format!(
                    "asked to tokenize {} texts, got {}",
                    batch.len(),
                    ids.len()
                )));
            }
            Ok((batch, ids))
        })
        .buffered(PARALLEL)
        .try_collect()
        .await?;
    for (batch, ids) in answers {
        known.extend(batch.into_iter().zip(ids));
    }
    Ok(())
}
