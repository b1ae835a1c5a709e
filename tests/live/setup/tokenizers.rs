//! The real tokenizers and states of an exact token count.
//!
//! The `tokenizer.json` files come from `SYSTEMONE_TOKENIZERS` (default
//! `~/.cache/systemone/tokenizers`, filled by `scripts/fetch-tokenizers.sh`); a missing one
//! fails, never skips. Shared by the tests and `benches/tokenizer.rs`.

use std::path::PathBuf;

use serde_json::Value;
use systemone::json::to_python;
use systemone::models::tokens::build::LoadedTokenizer;

/// Where the real tokenizer `name` is (fails, never skips, when it is missing).
pub fn tokenizer_path(name: &str) -> PathBuf {
    let dir = std::env::var("SYSTEMONE_TOKENIZERS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/systemone/tokenizers")
        });
    let path = dir.join(name).join("tokenizer.json");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-tokenizers.sh",
        path.display()
    );
    path
}

/// A string state as the prompt renders it (JSON, quotes included).
pub fn render_state(state: &str) -> String {
    to_python(&Value::String(state.to_string())).expect("a string renders")
}

/// Tokens of a string state as the prompt renders it.
pub fn state_tokens(tk: &LoadedTokenizer, state: &str) -> usize {
    tk.count(&render_state(state)).expect("counts")
}

/// Short pieces that usually add one token each.
pub const PIECES: [&str; 8] = [" a", ".", " I", " x", "!", ",", " the", "?"];

/// A string state whose JSON rendering is exactly `target` tokens: a sentence repeated
/// (the most repetitions that stay within `target`), then padded one piece at a time.
pub fn state_of_exactly(tk: &LoadedTokenizer, target: usize) -> String {
    const SENTENCE: &str =
        "The customer says the invoice for March is wrong and asks for a refund. ";
    let text = |k: usize| SENTENCE.repeat(k).trim_end().to_string();
    let (mut lo, mut hi) = (1usize, target);
    assert!(state_tokens(tk, &text(lo)) <= target);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if state_tokens(tk, &text(mid)) <= target {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut state = text(lo);
    for _ in 0..1_000 {
        let count = state_tokens(tk, &state);
        if count == target {
            return state;
        }
        let piece = PIECES
            .iter()
            .find(|p| {
                let grown = state_tokens(tk, &format!("{state}{p}"));
                grown > count && grown <= target
            })
            .unwrap_or_else(|| panic!("no piece grows {count} tokens towards {target}"));
        state.push_str(piece);
    }
    panic!("could not reach {target} tokens");
}

/// `state` plus one piece that adds exactly one token to its rendering.
pub fn one_token_more(tk: &LoadedTokenizer, state: &str) -> String {
    let count = state_tokens(tk, state);
    PIECES
        .iter()
        .map(|p| format!("{state}{p}"))
        .find(|s| state_tokens(tk, s) == count + 1)
        .expect("some piece adds exactly one token")
}
