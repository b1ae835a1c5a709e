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

    /// The most UTF-8 bytes of a text one token can stand for: the loaded tokenizer's
    /// widest token (`None` when its steps give no bound), else
    /// [`UNTOKENIZED_WIDEST_TOKEN_BYTES`]. [`fewest_tokens_for_bytes`] turns it into a
    /// lower bound on a text's tokens.
    pub fn widest_token_bytes(&self) -> Option<usize> {
        match self {
            TokenCounter::Estimate => Some(UNTOKENIZED_WIDEST_TOKEN_BYTES),
            TokenCounter::Tokenizer(t) => t.widest_token_bytes,
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

/// The most UTF-8 bytes of a caller's text one token is taken to stand for when the
/// service has no tokenizer of the model loaded (the backend's tokenizer counts exactly,
/// and a lower bound from bytes alone saves that count for a text it already proves too
/// long).
///
/// Conservative by four times the widest real token measured: Qwen 3's widest covers 128
/// spaces (its vocabulary's longest entry, 256 bytes spelled byte-level), Gemma 3's 31, a
/// SentencePiece or byte-level vocabulary's others a few dozen; Unicode normalization can
/// make a token stand for at most 3 times its bytes of canonical text (see
/// `tokens/widest.rs`), 384 for Qwen 3. At the default `--max-state-tokens` of 32,768 a
/// state is refused on its bytes alone from 16 MiB (a 23 MB state at once).
pub const UNTOKENIZED_WIDEST_TOKEN_BYTES: usize = 512;

/// The fewest tokens a text of `bytes` UTF-8 bytes can be when no token stands for more
/// than `widest` bytes of it: `ceil(bytes / widest)`.
pub fn fewest_tokens_for_bytes(bytes: usize, widest: usize) -> usize {
    bytes.div_ceil(widest.max(1))
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
