//! Token counting for the contract's limits: the model's real tokenizer when configured,
//! else a byte estimate that is never under the real count.

use std::sync::Arc;

use super::build::LoadedTokenizer;

/// Counts tokens for the contract's limits: with the model's real tokenizer when one is
/// configured (loaded once at startup), else with [`estimate_tokens`].
#[derive(Clone, Default)]
pub enum TokenCounter {
    /// No tokenizer configured: one token per UTF-8 byte (an upper bound).
    #[default]
    Estimate,
    /// The model's own tokenizer.
    Tokenizer(Arc<LoadedTokenizer>),
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenCounter::Estimate => f.write_str("Estimate"),
            TokenCounter::Tokenizer(t) => write!(f, "Tokenizer(sha256 {})", t.sha256),
        }
    }
}

impl TokenCounter {
    /// Tokens in `text` (no special tokens).
    pub fn count(&self, text: &str) -> usize {
        match self {
            TokenCounter::Estimate => estimate_tokens(text),
            TokenCounter::Tokenizer(t) => t.count(text).unwrap_or_else(|_| estimate_tokens(text)),
        }
    }

    /// Whether counts are exact rather than estimated.
    pub fn is_exact(&self) -> bool {
        matches!(self, TokenCounter::Tokenizer(_))
    }

    /// The longest head of `text` that [`count`](Self::count) puts at `max` tokens or fewer,
    /// cut where a token starts (the real tokenizer's offsets; for the estimate, `max` bytes
    /// back to a character boundary), or `None` when the whole text is within `max`. What
    /// `/v2/rerank` does to a document over `max_tokens_per_doc`.
    pub fn truncate<'t>(&self, text: &'t str, max: usize) -> Option<&'t str> {
        if self.count(text) <= max {
            return None;
        }
        let cut = match self {
            TokenCounter::Estimate => floor_char_boundary(text, max),
            TokenCounter::Tokenizer(t) => t
                .head_within(text, max)
                .unwrap_or_else(|_| floor_char_boundary(text, max)),
        };
        Some(&text[..cut])
    }
}

/// The largest character boundary of `text` at or below byte `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Estimated token count of a text, used for the contract's token limits while no real
/// tokenizer is configured. It is the UTF-8 byte count: an upper bound for byte-level BPE
/// and SentencePiece-with-byte-fallback tokenizers (every token covers at least one byte),
/// so nothing over a limit gets through, but ordinary English text is over-counted about
/// four times and may be refused below the real limit.
pub fn estimate_tokens(text: &str) -> usize {
    estimate_tokens_for_bytes(text.len())
}

/// [`estimate_tokens`] for a text of `bytes` UTF-8 bytes.
pub fn estimate_tokens_for_bytes(bytes: usize) -> usize {
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_truncates_to_bytes_at_a_character_boundary() {
        let counter = TokenCounter::Estimate;
        assert_eq!(counter.truncate("short", 5), None);
        assert_eq!(counter.truncate("longer text", 6), Some("longer"));
        // "é" is two bytes: a cut inside it moves back before it.
        assert_eq!(counter.truncate("aé b", 2), Some("a"));
        assert_eq!(counter.truncate("é", 1), Some(""));
    }
}
