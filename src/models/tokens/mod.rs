//! Token tables: which integers are single-token option labels for a model, and their ids.
//!
//! The whole technique rests on one fact: `answer=` + `str(i)` is the tokens of `answer=`
//! plus exactly one more token, whose id the service masks to and reads. A table is data
//! (`token-tables/<name>.json`), built from the model's real tokenizer; the tables shipped
//! in the repository are also compiled into the binary so a name alone finds them.

use serde::{Deserialize, Serialize};

use crate::shipped::{self, read_path_or_shipped};

pub mod build;
pub mod verify;

use std::sync::Arc;

use build::LoadedTokenizer;

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

/// One usable label: the integer written in the prompt and its token id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    /// The option number as it appears in the prompt (`"number": 7`).
    pub number: u32,
    /// The token id of `str(number)` right after the prefix.
    pub id: u32,
}

/// Where a table came from, so it can be checked against the tokenizer that serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenizerSource {
    /// Human-readable tokenizer name.
    pub name: String,
    /// sha256 of the `tokenizer.json` the table was built from (null for toy tokenizers).
    pub sha256: Option<String>,
}

/// A model's single-token labels in ascending order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenTable {
    /// The table's name (`gemma-3`, `golden-fake`).
    pub name: String,
    /// The tokenizer it was built from.
    pub tokenizer: TokenizerSource,
    /// The assistant prefill the labels follow (`answer=`).
    pub prefix: String,
    /// Token ids of the prefix alone, for the runtime check.
    pub prefix_ids: Vec<u32>,
    /// Usable labels, ascending; option `p` of a question uses `labels[p]`.
    pub labels: Vec<Label>,
}

/// Why a table could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("token table {0}")]
    NotFound(String),
    #[error("token table {path}: {reason}")]
    Invalid { path: String, reason: String },
}

impl TokenTable {
    /// Loads a table from a file path, or by the name of a built-in table.
    pub fn load(path_or_name: &str) -> Result<Self, TableError> {
        let text = read_path_or_shipped(path_or_name, shipped::TOKEN_TABLES)
            .map_err(TableError::NotFound)?;
        Self::parse(&text).map_err(|reason| TableError::Invalid {
            path: path_or_name.to_string(),
            reason,
        })
    }

    /// Parses and checks a table's JSON text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let table: TokenTable = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if table.labels.is_empty() {
            return Err("the table has no labels".into());
        }
        if table.labels.windows(2).any(|w| w[0].number >= w[1].number) {
            return Err("label numbers must be strictly ascending".into());
        }
        Ok(table)
    }

    /// The table as written to `token-tables/`: one label per line, so diffs stay readable.
    pub fn to_json(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|l| format!("    {{\"number\": {}, \"id\": {}}}", l.number, l.id))
            .collect();
        let head = serde_json::json!({
            "name": self.name,
            "tokenizer": {"name": self.tokenizer.name, "sha256": self.tokenizer.sha256},
            "prefix": self.prefix,
        });
        let head = serde_json::to_string_pretty(&head).unwrap_or_default();
        let head = head.trim_end().trim_end_matches('}').trim_end();
        format!(
            "{head},\n  \"prefix_ids\": {},\n  \"labels\": [\n{}\n  ]\n}}\n",
            serde_json::to_string(&self.prefix_ids).unwrap_or_default(),
            labels.join(",\n")
        )
    }

    /// How many options one question may have on this model.
    pub fn capacity(&self) -> usize {
        self.labels.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_golden_table_has_191_contiguous_labels() {
        let t = TokenTable::load("golden-fake").expect("built in");
        assert_eq!(t.capacity(), 191);
        assert!(t.labels.iter().all(|l| l.id == 1000 + l.number));
        assert_eq!(t.labels[190].number, 190);
    }

    #[test]
    fn unknown_names_and_bad_tables_are_refused() {
        assert!(matches!(
            TokenTable::load("no-such-table"),
            Err(TableError::NotFound(_))
        ));
        let bad = r#"{"name":"x","tokenizer":{"name":"t","sha256":null},"prefix":"answer=","prefix_ids":[],"labels":[{"number":2,"id":1},{"number":1,"id":2}]}"#;
        assert!(TokenTable::parse(bad).is_err());
    }
}
