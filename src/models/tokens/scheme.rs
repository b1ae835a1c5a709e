//! Multi-token label schemes: fixed-width numerals or letters, scored by the chain rule,
//! and the prefix-free check that lets a generated sequence name at most one label.
//!
//! Tokenizers that split numbers into digits (Gemma 3, Qwen 3) have only the ten
//! single-token labels 0–9. For more options a table may also hold **multi-token label
//! schemes**, to be scored by the chain rule (the probability of a label is the product of
//! its tokens' conditional probabilities). Two kinds of scheme exist: fixed-width numerals
//! (width 2 is `"00"`…`"99"`, width 3 is `"000"`…`"254"`; at most `--max`, 255, labels per
//! scheme), the default, and letters (`"A"`…`"Z"`, `"a"`…`"z"`, width 1), written only
//! where every letter is one token after the prefix and used only by a model configured
//! with `label_scheme = "letters"` ([`TokenTable::with_label_scheme`]). Each label records
//! its text and the token ids that text adds right after the prefix (`answer=` + text,
//! without special tokens, minus the prefix's own ids).
//!
//! [`TokenTable::with_label_scheme`]: super::TokenTable::with_label_scheme

use serde::{Deserialize, Serialize};

/// The kinds of multi-token label scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemeKind {
    /// Fixed-width decimal numerals with leading zeros: width 2 is `"00"`…`"99"`.
    Numerals,
    /// Single letters, width 1 only: `"A"`…`"Z"` then `"a"`…`"z"` (52 labels). One read
    /// answers up to 52 options where every letter is one token after the prefix (Gemma 3;
    /// not Qwen 3, whose `=` merges with most letters).
    Letters,
}

/// The letters of [`SchemeKind::Letters`], in label order.
const LETTERS: &[u8; 52] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

impl SchemeKind {
    /// The scheme's name as written in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            SchemeKind::Numerals => "numerals",
            SchemeKind::Letters => "letters",
        }
    }

    /// The text of label `i` of this scheme at `width` (`i` below [`Self::max_labels`]).
    pub fn text(self, width: usize, i: usize) -> String {
        match self {
            SchemeKind::Numerals => format!("{i:0width$}"),
            SchemeKind::Letters => LETTERS
                .get(i)
                .map(|&b| char::from(b).to_string())
                .unwrap_or_default(),
        }
    }

    /// The widths a scheme of this kind may have.
    pub fn widths(self) -> std::ops::RangeInclusive<usize> {
        match self {
            SchemeKind::Numerals => 1..=MAX_NUMERAL_WIDTH,
            SchemeKind::Letters => 1..=1,
        }
    }

    /// How many labels a scheme of `width` can have at most (`10^width` numerals, 52
    /// letters).
    pub fn max_labels(self, width: usize) -> usize {
        match self {
            SchemeKind::Numerals => u32::try_from(width)
                .ok()
                .and_then(|w| 10usize.checked_pow(w))
                .unwrap_or(usize::MAX),
            SchemeKind::Letters => LETTERS.len(),
        }
    }
}

/// The widest numerals a scheme may have (`10^9` labels is far beyond any option limit).
pub const MAX_NUMERAL_WIDTH: usize = 9;

/// One multi-token label: the text written in the prompt and the ids it adds after the
/// prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiLabel {
    /// The label as it appears in the prompt (`"07"`).
    pub text: String,
    /// The token ids of `prefix + text` after the prefix's own ids, in order.
    pub ids: Vec<u32>,
}

/// A set of multi-token labels of one kind and width; option `p` uses `labels[p]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiTokenScheme {
    /// What kind of labels these are.
    pub scheme: SchemeKind,
    /// Characters per label (`2`: `"00"`…`"99"`).
    pub width: usize,
    /// Whether every label is exactly `width` tokens (one per digit), as recorded by the
    /// build; checked against `labels` on load.
    pub one_token_per_digit: bool,
    /// The labels, in option order (`"00"`, `"01"`, …).
    pub labels: Vec<MultiLabel>,
}

impl MultiTokenScheme {
    /// How many options this scheme can label.
    pub fn capacity(&self) -> usize {
        self.labels.len()
    }

    /// A short name for messages: `numerals width 2`.
    pub fn describe(&self) -> String {
        format!("{} width {}", self.scheme.as_str(), self.width)
    }

    /// Whether every label is exactly `width` tokens.
    pub fn every_label_has_width_tokens(labels: &[MultiLabel], width: usize) -> bool {
        labels.iter().all(|l| l.ids.len() == width)
    }

    /// Checks the scheme's invariants (see the module doc).
    pub fn validate(&self) -> Result<(), String> {
        let name = self.describe();
        let widths = self.scheme.widths();
        if !widths.contains(&self.width) {
            return Err(format!(
                "{name}: width must be {} to {}",
                widths.start(),
                widths.end()
            ));
        }
        if self.labels.is_empty() {
            return Err(format!("{name}: the scheme has no labels"));
        }
        if self.labels.len() > self.scheme.max_labels(self.width) {
            return Err(format!(
                "{name}: {} labels is more than the width allows",
                self.labels.len()
            ));
        }
        for (i, label) in self.labels.iter().enumerate() {
            let expected = self.scheme.text(self.width, i);
            if label.text != expected {
                return Err(format!(
                    "{name}: label {i} is {:?}, expected {expected:?}",
                    label.text
                ));
            }
            if label.ids.is_empty() {
                return Err(format!("{name}: label {:?} has no ids", label.text));
            }
        }
        if let Some(conflict) = prefix_conflict(&self.labels) {
            return Err(format!("{name}: {conflict}"));
        }
        let uniform = Self::every_label_has_width_tokens(&self.labels, self.width);
        if uniform != self.one_token_per_digit {
            return Err(format!(
                "{name}: one_token_per_digit is {}, but the labels say {uniform}",
                self.one_token_per_digit
            ));
        }
        Ok(())
    }
}

/// Two labels whose id sequences make a scheme ambiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixConflict {
    /// Both labels have exactly these ids.
    Identical {
        first: String,
        second: String,
        ids: Vec<u32>,
    },
    /// `shorter`'s ids are a proper prefix of `longer`'s.
    Prefix {
        shorter: String,
        shorter_ids: Vec<u32>,
        longer: String,
        longer_ids: Vec<u32>,
    },
}

impl std::fmt::Display for PrefixConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrefixConflict::Identical { first, second, ids } => write!(
                f,
                "labels {first:?} and {second:?} have the same ids {ids:?}"
            ),
            PrefixConflict::Prefix {
                shorter,
                shorter_ids,
                longer,
                longer_ids,
            } => write!(
                f,
                "the ids of label {shorter:?} {shorter_ids:?} are a prefix of those of \
                 label {longer:?} {longer_ids:?}, so the labels are not prefix-free"
            ),
        }
    }
}

/// The first pair of labels (in sorted id order) whose ids are identical or one a prefix of
/// the other, if any; `None` means the labels are prefix-free. Sorted lexicographically,
/// every sequence between a sequence and one it is a prefix of shares that prefix, so
/// comparing neighbours finds a conflict whenever there is one.
pub fn prefix_conflict(labels: &[MultiLabel]) -> Option<PrefixConflict> {
    let mut sorted: Vec<&MultiLabel> = labels.iter().collect();
    sorted.sort_by(|a, b| a.ids.cmp(&b.ids).then_with(|| a.text.cmp(&b.text)));
    sorted.windows(2).find_map(|w| {
        let (a, b) = (w[0], w[1]);
        if a.ids == b.ids {
            Some(PrefixConflict::Identical {
                first: a.text.clone(),
                second: b.text.clone(),
                ids: a.ids.clone(),
            })
        } else if b.ids.starts_with(&a.ids) {
            Some(PrefixConflict::Prefix {
                shorter: a.text.clone(),
                shorter_ids: a.ids.clone(),
                longer: b.text.clone(),
                longer_ids: b.ids.clone(),
            })
        } else {
            None
        }
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A label of `text` read as `ids` (the table's tests build schemes of them too).
    pub(crate) fn label(text: &str, ids: &[u32]) -> MultiLabel {
        MultiLabel {
            text: text.into(),
            ids: ids.to_vec(),
        }
    }

    #[test]
    fn prefix_free_detection_on_hand_made_ids() {
        let clean = [
            label("00", &[1, 1]),
            label("01", &[1, 2]),
            label("10", &[2, 1]),
            label("11", &[3]),
        ];
        assert_eq!(prefix_conflict(&clean), None);
        assert_eq!(prefix_conflict(&[]), None);

        // "0" = [2] is a prefix of "3" = [2, 5] and of "1" = [2, 5, 7]; the pair reported
        // is the first in sorted id order.
        let prefix = [
            label("0", &[2]),
            label("1", &[2, 5, 7]),
            label("2", &[1, 9]),
            label("3", &[2, 5]),
        ];
        match prefix_conflict(&prefix) {
            Some(PrefixConflict::Prefix {
                shorter, longer, ..
            }) => assert_eq!((shorter.as_str(), longer.as_str()), ("0", "3")),
            other => panic!("expected a prefix pair, got {other:?}"),
        }
        let message = prefix_conflict(&prefix).expect("conflict").to_string();
        assert!(
            message.contains("\"0\"") && message.contains("\"3\""),
            "{message}"
        );
        assert!(message.contains("prefix-free"), "{message}");

        let identical = [label("a", &[4, 4]), label("b", &[1]), label("c", &[4, 4])];
        match prefix_conflict(&identical) {
            Some(PrefixConflict::Identical { first, second, ids }) => {
                assert_eq!((first.as_str(), second.as_str()), ("a", "c"));
                assert_eq!(ids, [4, 4]);
            }
            other => panic!("expected an identical pair, got {other:?}"),
        }
    }
}
