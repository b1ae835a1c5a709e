//! Building and checking token tables from a HuggingFace `tokenizer.json`.
//!
//! The rule (technique §3): an integer `i` is a label when `prefix + str(i)` tokenizes as
//! the tokens of `prefix` plus exactly one more token; that token is the label's id. The
//! prefixed string is tokenized, never bare digits, because many tokenizers merge or split
//! digits differently after `=`. Labels are taken in ascending order, skipping integers that
//! are not single tokens, so a sparse tail is possible (GLM: 0–190, then 192, 195, …).

use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

use super::{Label, TokenTable, TokenizerSource};

/// How far `build` looks for usable integers before giving up on finding `max` labels.
pub const DEFAULT_SEARCH_LIMIT: u32 = 10_000;

/// Why a table cannot be built or does not match.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot read tokenizer {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("cannot tokenize {text:?}: {reason}")]
    Encode { text: String, reason: String },
    #[error("no integer in 0..{0} is a single token after the prefix")]
    NoLabels(u32),
}

/// A loaded tokenizer with the sha256 of the file it came from.
pub struct LoadedTokenizer {
    /// The parsed `tokenizer.json`, for encoding labels and counting tokens.
    pub tokenizer: Tokenizer,
    /// Hex sha256 of the `tokenizer.json` bytes.
    pub sha256: String,
}

impl LoadedTokenizer {
    /// Reads a `tokenizer.json`.
    pub fn from_file(path: &std::path::Path) -> Result<Self, BuildError> {
        let err = |reason: String| BuildError::Read {
            path: path.display().to_string(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        Self::from_bytes(&bytes).map_err(|e| match e {
            BuildError::Read { reason, .. } => err(reason),
            other => other,
        })
    }

    /// Parses `tokenizer.json` bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, BuildError> {
        let tokenizer = Tokenizer::from_bytes(bytes).map_err(|e| BuildError::Read {
            path: "<bytes>".into(),
            reason: e.to_string(),
        })?;
        let sha256 = Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(LoadedTokenizer { tokenizer, sha256 })
    }

    /// Token ids of `text`, without special tokens (no BOS).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, BuildError> {
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| BuildError::Encode {
                text: text.chars().take(40).collect(),
                reason: e.to_string(),
            })
    }

    /// Number of tokens in `text`, without special tokens.
    pub fn count(&self, text: &str) -> Result<usize, BuildError> {
        self.encode(text).map(|ids| ids.len())
    }
}

/// The single token `prefix + str(i)` adds to `prefix_ids`, if it adds exactly one.
fn single_token(
    tk: &LoadedTokenizer,
    prefix: &str,
    prefix_ids: &[u32],
    i: u32,
) -> Result<Option<u32>, BuildError> {
    let ids = tk.encode(&format!("{prefix}{i}"))?;
    Ok(
        (ids.len() == prefix_ids.len() + 1 && ids.starts_with(prefix_ids))
            .then(|| ids[prefix_ids.len()]),
    )
}

/// Builds a table of up to `max` labels, looking at integers below `search_limit`.
pub fn build(
    tk: &LoadedTokenizer,
    name: &str,
    tokenizer_name: &str,
    prefix: &str,
    max: usize,
    search_limit: u32,
) -> Result<TokenTable, BuildError> {
    let prefix_ids = tk.encode(prefix)?;
    let mut labels = Vec::new();
    for i in 0..search_limit {
        if labels.len() >= max {
            break;
        }
        if let Some(id) = single_token(tk, prefix, &prefix_ids, i)? {
            labels.push(Label { number: i, id });
        }
    }
    if labels.is_empty() {
        return Err(BuildError::NoLabels(search_limit));
    }
    Ok(TokenTable {
        name: name.to_string(),
        tokenizer: TokenizerSource {
            name: tokenizer_name.to_string(),
            sha256: Some(tk.sha256.clone()),
        },
        prefix: prefix.to_string(),
        prefix_ids,
        labels,
    })
}

/// Checks a table against a tokenizer: the prefix ids, every label's id, and that no usable
/// integer below the table's last label was skipped. Returns every mismatch found.
pub fn check(tk: &LoadedTokenizer, table: &TokenTable) -> Result<Vec<String>, BuildError> {
    let mut problems = Vec::new();
    if let Some(sha) = &table.tokenizer.sha256 {
        if *sha != tk.sha256 {
            problems.push(format!(
                "tokenizer sha256 is {}, the table was built from {sha}",
                tk.sha256
            ));
        }
    }
    let prefix_ids = tk.encode(&table.prefix)?;
    if prefix_ids != table.prefix_ids {
        problems.push(format!(
            "prefix {:?} tokenizes as {prefix_ids:?}, the table says {:?}",
            table.prefix, table.prefix_ids
        ));
    }
    let last = table.labels.last().map_or(0, |l| l.number);
    let mut expected = table.labels.iter().peekable();
    for i in 0..=last {
        let actual = single_token(tk, &table.prefix, &prefix_ids, i)?;
        let listed = expected.next_if(|l| l.number == i);
        match (actual, listed) {
            (Some(id), Some(l)) if id == l.id => {}
            (Some(id), Some(l)) => {
                problems.push(format!("label {i}: tokenizer id {id}, table id {}", l.id))
            }
            (None, Some(_)) => problems.push(format!(
                "label {i} is in the table but is not a single token"
            )),
            (Some(id), None) => problems.push(format!(
                "{i} is a single token (id {id}) but is missing from the table"
            )),
            (None, None) => {}
        }
    }
    Ok(problems)
}
