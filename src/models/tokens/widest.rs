//! The most UTF-8 bytes of a caller's text one token of a loaded tokenizer can stand for,
//! so a text's bytes alone bound its tokens from below (`ceil(bytes / widest)`): a state
//! that bound puts over a limit is refused without tokenizing it.
//!
//! A token's text in the vocabulary is never shorter in UTF-8 than the normalized text it
//! covers: a byte-level token spells each byte as one character, a SentencePiece token
//! spells a space as the 3-byte `▁`, a byte-fallback token one byte as `<0x41>`, an added
//! token is its own text. Three steps could still make one token stand for more of the
//! caller's text, and each is checked: the normalizer (it may shrink the text), the
//! pre-tokenizer (it may drop whitespace), and the model's unknown token (fused, it may
//! swallow any run of text). A tokenizer doing any of that in a way not bounded here gets
//! no width, and with it no refusal on bytes: it counts exactly anyway.

use serde_json::Value;
use tokenizers::models::ModelWrapper;
use tokenizers::Tokenizer;

/// Bytes a single character may take in UTF-8: an unknown character that is its own token
/// covers at most this.
const MAX_CHAR_BYTES: usize = 4;

/// The most bytes of a caller's text one token of `tokenizer` can stand for, or `None`
/// when its steps cannot bound it (see the module doc).
pub(super) fn widest_token_bytes(tokenizer: &Tokenizer) -> Option<usize> {
    let pre_tokenizer = tokenizer
        .get_pre_tokenizer()
        .map(serde_json::to_value)
        .transpose()
        .ok()?;
    let normalizer = tokenizer
        .get_normalizer()
        .map(serde_json::to_value)
        .transpose()
        .ok()?;
    if !pre_tokenizer.as_ref().is_none_or(keeps_every_byte) {
        return None;
    }
    let byte_level = [&pre_tokenizer, &normalizer]
        .into_iter()
        .flatten()
        .any(has_byte_level);
    if !unknowns_are_bounded(tokenizer.get_model(), byte_level) {
        return None;
    }
    let shrink = normalizer.as_ref().map_or(Some(1), shrink_factor)?;
    let longest = tokenizer.get_vocab(true).keys().map(String::len).max()?;
    Some(longest.max(MAX_CHAR_BYTES).saturating_mul(shrink))
}

/// How many times fewer bytes a normalizer can make of a text, at most, or `None` when
/// that has no bound known here (whitespace collapsing, stripping, SentencePiece's
/// precompiled maps, lowercasing).
///
/// Canonical forms (NFC, NFD) fall by at most 3: composition folds a Hangul L+V+T (three
/// 3-byte jamo) into one 3-byte syllable, and a singleton such as the Kelvin sign (3
/// bytes) becomes `K` (1). Compatibility forms (NFKC, NFKD) fall by at most 4: a 4-byte
/// mathematical letter becomes one ASCII byte. A string `Replace` whose replacement is no
/// shorter than its pattern (Gemma's space to `▁`), `Prepend` and `ByteLevel` only grow it.
fn shrink_factor(normalizer: &Value) -> Option<usize> {
    match normalizer.get("type")?.as_str()? {
        "NFC" | "NFD" => Some(3),
        "NFKC" | "NFKD" => Some(4),
        "Prepend" | "ByteLevel" => Some(1),
        "Replace" => {
            let pattern = normalizer.get("pattern")?.get("String")?.as_str()?;
            let content = normalizer.get("content")?.as_str()?;
            (content.len() >= pattern.len()).then_some(1)
        }
        "Sequence" => normalizer
            .get("normalizers")?
            .as_array()?
            .iter()
            .try_fold(1usize, |f, n| Some(f.saturating_mul(shrink_factor(n)?))),
        _ => None,
    }
}

/// Whether a pre-tokenizer only splits its text (or respells it, growing it), dropping
/// none of it: `Whitespace`, `WhitespaceSplit`, BERT's and a `Removed` split drop the
/// delimiters, so a long run of spaces could be no tokens at all.
fn keeps_every_byte(pre_tokenizer: &Value) -> bool {
    let Some(kind) = pre_tokenizer.get("type").and_then(Value::as_str) else {
        return false;
    };
    match kind {
        "ByteLevel" | "Metaspace" | "Digits" | "UnicodeScripts" | "FixedLength" => true,
        "Split" | "Punctuation" => {
            pre_tokenizer.get("behavior").and_then(Value::as_str) != Some("Removed")
        }
        "Sequence" => pre_tokenizer
            .get("pretokenizers")
            .and_then(Value::as_array)
            .is_some_and(|all| all.iter().all(keeps_every_byte)),
        _ => false,
    }
}

/// Whether a step (or a sequence holding it) is byte-level: every byte then has a token.
fn has_byte_level(step: &Value) -> bool {
    if step.get("type").and_then(Value::as_str) == Some("ByteLevel") {
        return true;
    }
    ["pretokenizers", "normalizers"]
        .iter()
        .filter_map(|key| step.get(key).and_then(Value::as_array))
        .flatten()
        .any(has_byte_level)
}

/// Whether text the vocabulary lacks still costs a token per character at least: a BPE
/// model whose every byte has a token (byte-level, or byte fallback), or whose unknown
/// token stands for one character at a time (not fused). Other models (WordPiece's or
/// Unigram's unknown word, WordLevel's) can spend one token on a long run.
fn unknowns_are_bounded(model: &ModelWrapper, byte_level: bool) -> bool {
    match model {
        ModelWrapper::BPE(bpe) => {
            byte_level || bpe.byte_fallback || (bpe.unk_token.is_some() && !bpe.fuse_unk)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::build::LoadedTokenizer;
    use super::super::count::{fewest_tokens_for_bytes, UNTOKENIZED_WIDEST_TOKEN_BYTES};

    /// The real `tokenizer.json` files `scripts/fetch-tokenizers.sh` fetches, where present
    /// (`SYSTEMONE_TOKENIZERS`, else its default cache); none is fetched here.
    fn real_tokenizers() -> Vec<(String, LoadedTokenizer)> {
        let dir = std::env::var("SYSTEMONE_TOKENIZERS").map_or_else(
            |_| {
                PathBuf::from(std::env::var("HOME").unwrap_or_default())
                    .join(".cache/systemone/tokenizers")
            },
            PathBuf::from,
        );
        ["gemma3", "qwen3"]
            .iter()
            .filter_map(|name| {
                let path = dir.join(name).join("tokenizer.json");
                let loaded = LoadedTokenizer::from_file(&path).ok()?;
                Some((name.to_string(), loaded))
            })
            .collect()
    }

    /// Texts that make tokens as wide as they get: runs of spaces, dashes and newlines, a
    /// repeated word, Hangul as jamo (which NFC folds 3:1), fullwidth and Kelvin signs.
    fn wide_texts() -> Vec<String> {
        vec![
            " ".repeat(4096),
            "-".repeat(4096),
            "\n".repeat(4096),
            "=".repeat(4096),
            "the ".repeat(1024),
            "\u{1100}\u{1161}\u{11A8}".repeat(512),
            "\u{212A}".repeat(1024),
            "\u{FF21}".repeat(1024),
            "{\"key\": \"value\", \"n\": 12345678}".repeat(128),
        ]
    }

    /// On the real tokenizers, every wide text has at least the tokens its bytes allow,
    /// by the tokenizer's own widest token and by the constant used when none is loaded:
    /// the bound refuses nothing an exact count would pass.
    #[test]
    fn the_bytes_bound_real_tokenizers_from_below() {
        let tokenizers = real_tokenizers();
        if tokenizers.is_empty() {
            eprintln!("no real tokenizer.json found (scripts/fetch-tokenizers.sh): skipped");
        }
        for (name, tk) in &tokenizers {
            let widest = tk
                .widest_token_bytes
                .expect("a byte-level or byte-fallback BPE");
            assert!(widest >= 4, "{name}: {widest}");
            for text in wide_texts() {
                let count = tk.count(&text).expect("counts");
                for bound in [widest, UNTOKENIZED_WIDEST_TOKEN_BYTES] {
                    let fewest = fewest_tokens_for_bytes(text.len(), bound);
                    assert!(
                        count >= fewest,
                        "{name}: {count} < {fewest} ({bound} bytes a token)"
                    );
                }
            }
        }
    }
}
