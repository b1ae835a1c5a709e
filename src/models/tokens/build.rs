//! Building and checking token tables from a HuggingFace `tokenizer.json`.
//!
//! The rule (`docs/token-tables.md`): an integer `i` is a label when `prefix + str(i)` tokenizes as
//! the tokens of `prefix` plus exactly one more token; that token is the label's id. The
//! prefixed string is tokenized, never bare digits, because many tokenizers merge or split
//! digits differently after `=`. Labels are taken in ascending order, skipping integers that
//! are not single tokens, so a sparse tail is possible (GLM: 0–190, then 192, 195, …).
//!
//! Multi-token numeral schemes (see the [module doc](super)) are built the same way: each
//! label's text is tokenized after the prefix (`answer=07`, no special tokens), the result
//! must start with the prefix's own ids, and the rest are the label's ids. A scheme whose
//! id sequences are not prefix-free, or where a label merges with the prefix, is refused
//! with an error that names the labels, since chain-rule scoring could not tell its labels
//! apart.

use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

use super::{
    prefix_conflict, Label, MultiLabel, MultiTokenScheme, SchemeKind, TokenTable, TokenizerSource,
    MAX_NUMERAL_WIDTH,
};

/// How far `build` looks for usable integers before giving up on finding `max` labels.
pub const DEFAULT_SEARCH_LIMIT: u32 = 10_000;

/// The widths of the fixed-width numeral schemes [`build`] writes: `00`…`99` and
/// `000`…`254` (with the default `max` of 255).
pub const DEFAULT_NUMERAL_WIDTHS: [usize; 2] = [2, 3];

/// Why a table cannot be built or does not match.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot read tokenizer {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("cannot tokenize {text:?}: {reason}")]
    Encode { text: String, reason: String },
    #[error("no integer in 0..{0} is a single token after the prefix")]
    NoLabels(u32),
    #[error("multi-token scheme {scheme} is unusable for this tokenizer: {reason}")]
    Scheme { scheme: String, reason: String },
    #[error("numeral widths {0:?}: each must be 1 to {MAX_NUMERAL_WIDTH}, strictly ascending")]
    Widths(Vec<usize>),
}

/// A loaded tokenizer with the sha256 of the file it came from.
pub struct LoadedTokenizer {
    /// The parsed `tokenizer.json`, for encoding labels and counting tokens.
    pub tokenizer: Tokenizer,
    /// Hex sha256 of the `tokenizer.json` bytes.
    pub sha256: String,
    /// The most bytes of a text one of its tokens stands for, when its steps bound it
    /// ([`super::widest`]): a text's bytes over it bound the text's tokens from below.
    pub widest_token_bytes: Option<usize>,
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
        let widest_token_bytes = super::widest::widest_token_bytes(&tokenizer);
        Ok(LoadedTokenizer {
            tokenizer,
            sha256,
            widest_token_bytes,
        })
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

    /// The byte length of the longest head of `text` that is `max` tokens or fewer, cut
    /// where a token starts. The head is counted again because a cut can change how its
    /// end tokenizes; the cut moves back a token at a time until the head fits.
    pub fn head_within(&self, text: &str, max: usize) -> Result<usize, BuildError> {
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| BuildError::Encode {
                text: text.chars().take(40).collect(),
                reason: e.to_string(),
            })?;
        let offsets = encoding.get_offsets();
        let mut keep = max.min(offsets.len());
        loop {
            let cut = offsets.get(keep).map_or(text.len(), |o| o.0);
            if keep == 0 || (text.is_char_boundary(cut) && self.count(&text[..cut])? <= max) {
                return Ok(if text.is_char_boundary(cut) { cut } else { 0 });
            }
            keep -= 1;
        }
    }
}

/// The single token `prefix + str(i)` adds to `prefix_ids`, if it adds exactly one.
fn single_token(
    tk: &LoadedTokenizer,
    prefix: &str,
    prefix_ids: &[u32],
    i: u32,
) -> Result<Option<u32>, BuildError> {
    Ok(single_id(&tk.encode(&format!("{prefix}{i}"))?, prefix_ids))
}

/// The one id `ids` (the tokens of `prefix + label`) adds to `prefix_ids`, if it adds
/// exactly one: the rule of a single-token label.
pub fn single_id(ids: &[u32], prefix_ids: &[u32]) -> Option<u32> {
    (ids.len() == prefix_ids.len() + 1 && ids.starts_with(prefix_ids))
        .then(|| ids[prefix_ids.len()])
}

/// What [`build_with`] builds besides the single-token labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildOptions {
    /// Most labels to collect: single-token, and per multi-token scheme.
    pub max: usize,
    /// Integers below this are tried as single-token labels.
    pub search_limit: u32,
    /// Widths of the fixed-width numeral schemes (strictly ascending; empty for none).
    pub numeral_widths: Vec<usize>,
    /// Add the letters scheme when every letter is one token after the prefix.
    pub letters: bool,
}

impl Default for BuildOptions {
    /// 255 labels, integers below [`DEFAULT_SEARCH_LIMIT`], [`DEFAULT_NUMERAL_WIDTHS`], and
    /// letters where the tokenizer allows them.
    fn default() -> Self {
        BuildOptions {
            max: 255,
            search_limit: DEFAULT_SEARCH_LIMIT,
            numeral_widths: DEFAULT_NUMERAL_WIDTHS.to_vec(),
            letters: true,
        }
    }
}

/// Builds a table of up to `max` single-token labels, looking at integers below
/// `search_limit`, with the default multi-token schemes of [`BuildOptions`].
pub fn build(
    tk: &LoadedTokenizer,
    name: &str,
    tokenizer_name: &str,
    prefix: &str,
    max: usize,
    search_limit: u32,
) -> Result<TokenTable, BuildError> {
    let options = BuildOptions {
        max,
        search_limit,
        ..BuildOptions::default()
    };
    build_with(tk, name, tokenizer_name, prefix, &options)
}

/// [`build`] with the given options. The letters scheme, when asked for, is left out
/// silently where the tokenizer cannot have one (see [`letters_scheme`] for why).
pub fn build_with(
    tk: &LoadedTokenizer,
    name: &str,
    tokenizer_name: &str,
    prefix: &str,
    options: &BuildOptions,
) -> Result<TokenTable, BuildError> {
    let source = TokenizerSource {
        name: tokenizer_name.to_string(),
        sha256: Some(tk.sha256.clone()),
    };
    build_from(|text| tk.encode(text), name, source, prefix, options)
}

/// The rules of [`build_with`] over any tokenizer: `encode` tokenizes a text without
/// special tokens (a `tokenizer.json`, or the serving backend's tokenizer through the
/// texts [`super::live`] fetched).
pub fn build_from(
    mut encode: impl FnMut(&str) -> Result<Vec<u32>, BuildError>,
    name: &str,
    tokenizer: TokenizerSource,
    prefix: &str,
    options: &BuildOptions,
) -> Result<TokenTable, BuildError> {
    let prefix_ids = encode(prefix)?;
    let mut labels = Vec::new();
    for i in 0..options.search_limit {
        if labels.len() >= options.max {
            break;
        }
        if let Some(id) = single_id(&encode(&format!("{prefix}{i}"))?, &prefix_ids) {
            labels.push(Label { number: i, id });
        }
    }
    if labels.is_empty() {
        return Err(BuildError::NoLabels(options.search_limit));
    }
    let letters = options
        .letters
        .then(|| letters_scheme(&mut encode, prefix, &prefix_ids, options.max).ok())
        .flatten();
    let numerals = numeral_schemes(
        &mut encode,
        prefix,
        &prefix_ids,
        &options.numeral_widths,
        options.max,
    )?;
    Ok(TokenTable {
        name: name.to_string(),
        tokenizer,
        prefix: prefix.to_string(),
        prefix_ids,
        labels,
        multi_token: letters.into_iter().chain(numerals).collect(),
    })
}

/// Builds numeral schemes of the given `widths` (strictly ascending, 1 to
/// [`MAX_NUMERAL_WIDTH`]), each of `min(10^width, max)` labels, with `encode` (which must
/// tokenize without special tokens, as the table's prefix ids were). Refuses a scheme whose
/// label merges with the prefix, or whose id sequences are not prefix-free.
pub fn numeral_schemes(
    mut encode: impl FnMut(&str) -> Result<Vec<u32>, BuildError>,
    prefix: &str,
    prefix_ids: &[u32],
    widths: &[usize],
    max: usize,
) -> Result<Vec<MultiTokenScheme>, BuildError> {
    let in_range = widths.iter().all(|w| (1..=MAX_NUMERAL_WIDTH).contains(w));
    if !in_range || widths.windows(2).any(|w| w[0] >= w[1]) {
        return Err(BuildError::Widths(widths.to_vec()));
    }
    let kind = SchemeKind::Numerals;
    let mut schemes = Vec::with_capacity(widths.len());
    for &width in widths {
        let count = kind.max_labels(width).min(max);
        if count > 0 {
            schemes.push(scheme(&mut encode, prefix, prefix_ids, kind, width, count)?);
        }
    }
    Ok(schemes)
}

/// The letters scheme (`A`…`Z`, `a`…`z`, at most `max`), refused like a numeral scheme when
/// a letter merges with the prefix (Qwen 3's `=A` is one token) or is not one token.
pub fn letters_scheme(
    mut encode: impl FnMut(&str) -> Result<Vec<u32>, BuildError>,
    prefix: &str,
    prefix_ids: &[u32],
    max: usize,
) -> Result<MultiTokenScheme, BuildError> {
    let kind = SchemeKind::Letters;
    let count = kind.max_labels(1).min(max);
    let built = scheme(&mut encode, prefix, prefix_ids, kind, 1, count)?;
    if !built.one_token_per_digit {
        let long: Vec<&str> = built
            .labels
            .iter()
            .filter(|l| l.ids.len() != 1)
            .map(|l| l.text.as_str())
            .collect();
        return Err(BuildError::Scheme {
            scheme: built.describe(),
            reason: format!("letters {long:?} are more than one token after {prefix:?}"),
        });
    }
    Ok(built)
}

/// One scheme of `count` labels of `kind` at `width`: each label's text tokenized after the
/// prefix, the prefix's own ids stripped; refused when a label merges with the prefix or
/// the sequences are not prefix-free.
fn scheme(
    encode: &mut impl FnMut(&str) -> Result<Vec<u32>, BuildError>,
    prefix: &str,
    prefix_ids: &[u32],
    kind: SchemeKind,
    width: usize,
    count: usize,
) -> Result<MultiTokenScheme, BuildError> {
    let refuse = |reason: String| BuildError::Scheme {
        scheme: format!("{} width {width}", kind.as_str()),
        reason,
    };
    let mut labels = Vec::with_capacity(count);
    for i in 0..count {
        let text = kind.text(width, i);
        let full = format!("{prefix}{text}");
        let ids = encode(&full)?;
        let rest = match ids.strip_prefix(prefix_ids) {
            Some(rest) if !rest.is_empty() => rest.to_vec(),
            _ => {
                return Err(refuse(format!(
                    "{full:?} tokenizes as {ids:?}, which is not the prefix's own ids \
                     {prefix_ids:?} followed by the label's"
                )))
            }
        };
        labels.push(MultiLabel { text, ids: rest });
    }
    if let Some(conflict) = prefix_conflict(&labels) {
        return Err(refuse(conflict.to_string()));
    }
    let scheme = MultiTokenScheme {
        scheme: kind,
        width,
        one_token_per_digit: MultiTokenScheme::every_label_has_width_tokens(&labels, width),
        labels,
    };
    scheme.validate().map_err(refuse)?;
    Ok(scheme)
}

/// Checks a table against a tokenizer: the prefix ids, every label's id, that no usable
/// integer below the table's last label was skipped, and every multi-token label's ids.
/// Returns every mismatch found.
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
    problems.extend(check_multi(|text| tk.encode(text), table, &prefix_ids)?);
    Ok(problems)
}

/// Re-encodes every multi-token label of `table` (`prefix + text`) with `encode` and
/// reports each one whose ids after `prefix_ids` (the tokenizer's own ids for the prefix)
/// differ from the table's: its text, the table's ids and the tokenizer's.
pub fn check_multi(
    mut encode: impl FnMut(&str) -> Result<Vec<u32>, BuildError>,
    table: &TokenTable,
    prefix_ids: &[u32],
) -> Result<Vec<String>, BuildError> {
    let mut problems = Vec::new();
    for (scheme, label) in table.multi_labels() {
        let full = format!("{}{}", table.prefix, label.text);
        let ids = encode(&full)?;
        match ids.strip_prefix(prefix_ids) {
            Some(rest) if rest == label.ids.as_slice() => {}
            Some(rest) => problems.push(format!(
                "multi-token label {:?} ({}): table ids {:?}, tokenizer ids {rest:?}",
                label.text,
                scheme.describe(),
                label.ids
            )),
            None => problems.push(format!(
                "multi-token label {:?} ({}): table ids {:?}, but {full:?} tokenizes as \
                 {ids:?}, which does not start with the prefix ids {prefix_ids:?}",
                label.text,
                scheme.describe(),
                label.ids
            )),
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "answer=";
    const PREFIX_IDS: [u32; 2] = [500, 61];

    /// A digit-splitting encoder: the prefix's ids, then `100 + d` for each digit `d`.
    fn split(text: &str) -> Result<Vec<u32>, BuildError> {
        let rest = text.strip_prefix(PREFIX).expect("prefixed");
        let mut ids = PREFIX_IDS.to_vec();
        ids.extend(rest.bytes().map(|b| 100 + u32::from(b - b'0')));
        Ok(ids)
    }

    #[test]
    fn numeral_schemes_of_a_digit_splitting_encoder() {
        let schemes = numeral_schemes(split, PREFIX, &PREFIX_IDS, &[2, 3], 255).expect("builds");
        assert_eq!(schemes.len(), 2);
        let (two, three) = (&schemes[0], &schemes[1]);
        assert_eq!((two.width, two.capacity()), (2, 100));
        assert_eq!((three.width, three.capacity()), (3, 255));
        assert!(two.one_token_per_digit && three.one_token_per_digit);
        assert_eq!(two.labels[7].text, "07");
        assert_eq!(two.labels[7].ids, [100, 107]);
        assert_eq!(three.labels[254].text, "254");
        assert_eq!(three.labels[254].ids, [102, 105, 104]);
        assert_eq!(
            numeral_schemes(split, PREFIX, &PREFIX_IDS, &[3], 40).expect("builds")[0].capacity(),
            40
        );
        assert!(numeral_schemes(split, PREFIX, &PREFIX_IDS, &[], 255)
            .expect("none")
            .is_empty());
        for widths in [&[3, 2][..], &[2, 2], &[0], &[10]] {
            assert!(
                matches!(
                    numeral_schemes(split, PREFIX, &PREFIX_IDS, widths, 255),
                    Err(BuildError::Widths(_))
                ),
                "{widths:?}"
            );
        }
    }

    #[test]
    fn a_scheme_that_is_not_prefix_free_is_refused_naming_both_labels() {
        // "answer=42" stops after the 4: its ids are a prefix of every "4x".
        let short = |text: &str| {
            let mut ids = split(text)?;
            if text == "answer=42" {
                ids.pop();
            }
            Ok(ids)
        };
        let err = numeral_schemes(short, PREFIX, &PREFIX_IDS, &[2], 255)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("numerals width 2"), "{err}");
        assert!(err.contains("\"42\"") && err.contains("\"40\""), "{err}");
        assert!(err.contains("prefix-free"), "{err}");

        // "answer=13" tokenizes like "answer=31".
        let same = |text: &str| {
            split(if text == "answer=13" {
                "answer=31"
            } else {
                text
            })
        };
        let err = numeral_schemes(same, PREFIX, &PREFIX_IDS, &[2], 255)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("\"13\"") && err.contains("\"31\""), "{err}");
        assert!(err.contains("same ids"), "{err}");
    }

    #[test]
    fn a_label_that_merges_with_the_prefix_is_refused() {
        // "=0" is one token: "answer=05" does not start with the prefix's ids.
        let merged = |text: &str| {
            let mut ids = split(text)?;
            if ids[2] == 100 {
                ids.splice(1..3, [900]);
            }
            Ok(ids)
        };
        let err = numeral_schemes(merged, PREFIX, &PREFIX_IDS, &[2], 255)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("numerals width 2"), "{err}");
        assert!(err.contains("answer=00"), "{err}");
        assert!(err.contains("[500, 900, 100]"), "{err}");
    }

    #[test]
    fn check_multi_reports_each_changed_label() {
        let mut table = TokenTable::load("golden-fake").expect("built in");
        table.multi_token =
            numeral_schemes(split, PREFIX, &PREFIX_IDS, &[2, 3], 255).expect("builds");
        assert!(check_multi(split, &table, &PREFIX_IDS)
            .expect("checks")
            .is_empty());
        table.multi_token[0].labels[7].ids[1] = 999;
        table.multi_token[1].labels[200].ids = vec![1];
        let problems = check_multi(split, &table, &PREFIX_IDS).expect("checks");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("\"07\""), "{problems:?}");
        assert!(problems[0].contains("[100, 999]"), "{problems:?}");
        assert!(problems[0].contains("[100, 107]"), "{problems:?}");
        assert!(problems[1].contains("\"200\""), "{problems:?}");
    }
}
