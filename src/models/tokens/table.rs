//! [`TokenTable`]: a model's single-token labels and its multi-token label schemes, loaded
//! from a file or a shipped name, checked, and written back byte for byte.
//!
//! The `multi_token` section is optional: it is written after `labels` and left out when
//! empty, so tables without it (`golden-fake`) load and re-serialize unchanged:
//!
//! ```json
//! "multi_token": [
//!   {"scheme": "numerals", "width": 2, "one_token_per_digit": true, "labels": [
//!     {"text": "00", "ids": [236771, 236771]},
//!     …
//!   ]},
//!   {"scheme": "numerals", "width": 3, "one_token_per_digit": true, "labels": [
//!     {"text": "000", "ids": [236771, 236771, 236771]},
//!     …
//!   ]}
//! ]
//! ```
//!
//! Loading a table checks what chain-rule scoring relies on: schemes in ascending width
//! (one per kind and width), each one's label texts exactly its kind's in order, every
//! label with at least one id, and the id sequences **prefix-free** (no label's ids equal
//! to or a prefix of another's in the same scheme), so a generated sequence names at most
//! one label. `one_token_per_digit` records whether every label is exactly `width` tokens
//! (true for Gemma 3 and Qwen 3); it must agree with the labels.

use serde::{Deserialize, Serialize};

use super::scheme::{MultiLabel, MultiTokenScheme, SchemeKind};
use crate::config::LabelScheme;
use crate::shipped::{self, read_path_or_shipped};

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

/// The prefix every table asks after.
pub(super) const PREFIX: &str = "answer=";

/// The name of [`TokenTable::native`]'s tables.
pub const NATIVE_TABLE: &str = "native";

/// A model's single-token labels in ascending order, and its multi-token label schemes.
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
    /// Multi-token label schemes in ascending width (empty: none; left out of the JSON).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub multi_token: Vec<MultiTokenScheme>,
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
        let out_of_order = |a: &MultiTokenScheme, b: &MultiTokenScheme| {
            a.width > b.width || (a.width == b.width && a.scheme == b.scheme)
        };
        if table
            .multi_token
            .windows(2)
            .any(|w| out_of_order(&w[0], &w[1]))
        {
            return Err(
                "multi_token schemes must be in ascending width, one per kind and width".into(),
            );
        }
        for scheme in &table.multi_token {
            scheme.validate()?;
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
        let multi = if self.multi_token.is_empty() {
            String::new()
        } else {
            let schemes: Vec<String> = self.multi_token.iter().map(scheme_json).collect();
            format!(",\n  \"multi_token\": [\n{}\n  ]", schemes.join(",\n"))
        };
        format!(
            "{head},\n  \"prefix_ids\": {},\n  \"labels\": [\n{}\n  ]{multi}\n}}\n",
            ids_json(&self.prefix_ids),
            labels.join(",\n")
        )
    }

    /// The table a model with `scheme` asks with. `Numerals` drops any letters scheme, so
    /// every prompt numbers its options; `Letters` keeps it (the narrowest labels that fit
    /// win, so letters answer 11–52 options) and refuses a table without one.
    pub fn with_label_scheme(self, scheme: LabelScheme) -> Result<Self, String> {
        let has_letters = |t: &Self| {
            t.multi_token
                .iter()
                .any(|s| s.scheme == SchemeKind::Letters && s.one_token_per_digit)
        };
        match scheme {
            LabelScheme::Numerals => return Ok(self.numerals_only()),
            LabelScheme::Letters if !has_letters(&self) => {
                return Err(format!(
                    "label_scheme letters needs a letters scheme in token table {}, which has \
                     none: `systemone tokens build` adds one only when every letter is one \
                     token after {:?} (not so for Qwen 3, whose `=` merges with most letters)",
                    self.name, self.prefix
                ))
            }
            LabelScheme::Letters => {}
        }
        Ok(self)
    }

    /// The table without any letters scheme: what a model with the default `label_scheme`
    /// asks with.
    pub fn numerals_only(mut self) -> Self {
        self.multi_token
            .retain(|s| s.scheme == SchemeKind::Numerals);
        self
    }

    /// The table of a model served by a native System One upstream, which labels the
    /// options itself: `capacity` plain numbers (ids are placeholders, never sent), so that
    /// validation counts a question's options against what the upstream takes and its
    /// tokens on the prompt a chat model would see (an estimate of the upstream's).
    pub fn native(capacity: usize) -> Self {
        let labels = (0..capacity.max(1) as u32)
            .map(|n| Label { number: n, id: n })
            .collect();
        TokenTable {
            name: NATIVE_TABLE.into(),
            tokenizer: TokenizerSource {
                name: "the native upstream's own".into(),
                sha256: None,
            },
            prefix: PREFIX.into(),
            prefix_ids: Vec::new(),
            labels,
            multi_token: Vec::new(),
        }
    }

    /// How many options one question may have on this model with single-token labels.
    pub fn capacity(&self) -> usize {
        self.labels.len()
    }

    /// The most options a multi-token scheme of this table can label (0 without any).
    pub fn capacity_multi(&self) -> usize {
        self.multi_token
            .iter()
            .map(MultiTokenScheme::capacity)
            .max()
            .unwrap_or(0)
    }

    /// The narrowest multi-token scheme with at least `n` labels, if any.
    pub fn multi_labels_for(&self, n: usize) -> Option<&MultiTokenScheme> {
        self.multi_token
            .iter()
            .filter(|s| s.capacity() >= n)
            .min_by_key(|s| s.width)
    }

    /// The labels a question of `n` options is asked with: the single-token labels when
    /// they suffice (the prompt and reads are then exactly the reference's), else the
    /// narrowest multi-token scheme whose labels are one token per character (so every
    /// trie node's prefill is the label text so far); `None` when nothing can label `n`.
    pub fn labels_for(&self, n: usize) -> Option<OptionLabels<'_>> {
        if n <= self.capacity() {
            return Some(OptionLabels::Single(&self.labels[..n]));
        }
        self.multi_token
            .iter()
            .filter(|s| s.one_token_per_digit && s.capacity() >= n)
            .min_by_key(|s| s.width)
            .map(|s| OptionLabels::Multi(&s.labels[..n]))
    }

    /// The most options a question may have on this model, with any labels.
    pub fn option_capacity(&self) -> usize {
        let multi = self.widest_scheme().map_or(0, MultiTokenScheme::capacity);
        self.capacity().max(multi)
    }

    /// The usable multi-token scheme (one token per character) with the most labels.
    pub fn widest_scheme(&self) -> Option<&MultiTokenScheme> {
        self.multi_token
            .iter()
            .filter(|s| s.one_token_per_digit)
            .max_by_key(|s| s.capacity())
    }

    /// Every multi-token label with its scheme, schemes in table order.
    pub fn multi_labels(&self) -> impl Iterator<Item = (&MultiTokenScheme, &MultiLabel)> {
        self.multi_token
            .iter()
            .flat_map(|s| s.labels.iter().map(move |l| (s, l)))
    }

    /// How many multi-token labels the table holds, over all schemes.
    pub fn multi_label_count(&self) -> usize {
        self.multi_token
            .iter()
            .map(MultiTokenScheme::capacity)
            .sum()
    }
}

/// The labels of one question's options, in option order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionLabels<'a> {
    /// One token each: the number is written as a JSON integer, read in one masked read.
    Single(&'a [Label]),
    /// Several tokens each (`"07"`): written as a JSON string, read by the chain rule.
    Multi(&'a [MultiLabel]),
}

/// Token ids as written in a table: `[1, 2]`.
fn ids_json(ids: &[u32]) -> String {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    format!("[{}]", ids.join(", "))
}

/// One scheme as written in a table: its header on one line, then one label per line.
fn scheme_json(scheme: &MultiTokenScheme) -> String {
    let labels: Vec<String> = scheme
        .labels
        .iter()
        .map(|l| {
            format!(
                "      {{\"text\": {}, \"ids\": {}}}",
                serde_json::Value::String(l.text.clone()),
                ids_json(&l.ids)
            )
        })
        .collect();
    format!(
        "    {{\"scheme\": \"{}\", \"width\": {}, \"one_token_per_digit\": {}, \"labels\": [\n{}\n    ]}}",
        scheme.scheme.as_str(),
        scheme.width,
        scheme.one_token_per_digit,
        labels.join(",\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::tokens::scheme::tests::label;

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

    /// A small table with a 2-wide numeral scheme of `n` labels, ids `[1000 + tens, 1000 + ones]`.
    fn with_scheme(n: usize) -> TokenTable {
        let mut t = TokenTable::load("golden-fake").expect("built in");
        t.labels.truncate(10);
        let labels = (0..n)
            .map(|i| {
                label(
                    &format!("{i:02}"),
                    &[1000 + (i / 10) as u32, 1000 + (i % 10) as u32],
                )
            })
            .collect();
        t.multi_token = vec![MultiTokenScheme {
            scheme: SchemeKind::Numerals,
            width: 2,
            one_token_per_digit: true,
            labels,
        }];
        t
    }

    /// [`with_scheme`]`(100)` with a letters scheme of `n` labels first, ids `3000 + i`.
    fn with_letters(n: usize) -> TokenTable {
        let mut t = with_scheme(100);
        let labels = (0..n)
            .map(|i| label(&SchemeKind::Letters.text(1, i), &[3000 + i as u32]))
            .collect();
        t.multi_token.insert(
            0,
            MultiTokenScheme {
                scheme: SchemeKind::Letters,
                width: 1,
                one_token_per_digit: true,
                labels,
            },
        );
        t
    }

    #[test]
    fn letters_answer_up_to_their_count_and_numerals_beyond() {
        let t = with_letters(52);
        assert_eq!(TokenTable::parse(&t.to_json()).expect("parses"), t);
        let texts = |n: usize| match t.labels_for(n) {
            Some(OptionLabels::Multi(l)) => l.iter().map(|l| l.text.clone()).collect(),
            other => panic!("{n}: {other:?}"),
        };
        assert!(matches!(t.labels_for(10), Some(OptionLabels::Single(_))));
        let eleven: Vec<String> = texts(11);
        assert_eq!(eleven.first().map(String::as_str), Some("A"));
        assert_eq!(eleven.last().map(String::as_str), Some("K"));
        let all: Vec<String> = texts(52);
        assert_eq!(all[25..27], ["Z".to_string(), "a".to_string()]);
        assert_eq!(all[51], "z");
        assert_eq!(texts(53)[52], "52");
        assert_eq!(t.option_capacity(), 100);
        assert_eq!(
            t.widest_scheme().map(|s| s.scheme),
            Some(SchemeKind::Numerals)
        );

        let numerals = t
            .clone()
            .with_label_scheme(LabelScheme::Numerals)
            .expect("ok");
        assert_eq!(numerals.multi_token.len(), 1);
        assert_eq!(numerals.multi_token[0].scheme, SchemeKind::Numerals);
        let letters = t.with_label_scheme(LabelScheme::Letters).expect("ok");
        assert_eq!(letters.multi_token.len(), 2);
        let err = with_scheme(100)
            .with_label_scheme(LabelScheme::Letters)
            .expect_err("no letters");
        assert!(
            err.contains("letters scheme") && err.contains("golden-fake"),
            "{err}"
        );
    }

    #[test]
    fn json_round_trip_with_and_without_the_multi_token_section() {
        let without = TokenTable::load("golden-fake").expect("built in");
        assert!(without.multi_token.is_empty());
        let text = without.to_json();
        assert!(!text.contains("multi_token"));
        assert_eq!(TokenTable::parse(&text).expect("parses"), without);

        let with = with_scheme(100);
        let text = with.to_json();
        assert!(text.contains("\"multi_token\""), "{text}");
        assert!(
            text.contains("\n      {\"text\": \"07\", \"ids\": [1000, 1007]},\n"),
            "{text}"
        );
        let back = TokenTable::parse(&text).expect("parses");
        assert_eq!(back, with);
        assert_eq!(back.to_json(), text);
        // serde's own writer gives the same table too.
        let via_serde = serde_json::to_string(&with).expect("serializes");
        assert_eq!(TokenTable::parse(&via_serde).expect("parses"), with);
    }

    #[test]
    fn golden_fake_re_serializes_byte_identical() {
        let file = shipped::TOKEN_TABLES
            .iter()
            .find(|(n, _)| *n == "golden-fake")
            .map(|(_, text)| *text)
            .expect("shipped");
        let table = TokenTable::parse(file).expect("parses");
        assert_eq!(table.to_json(), file);
    }

    #[test]
    fn multi_labels_for_picks_the_narrowest_scheme_that_fits() {
        let mut t = with_scheme(100);
        assert_eq!(t.capacity(), 10);
        assert_eq!(t.capacity_multi(), 100);
        assert_eq!(t.multi_labels_for(11).map(|s| s.width), Some(2));
        assert_eq!(t.multi_labels_for(100).map(|s| s.width), Some(2));
        assert!(t.multi_labels_for(101).is_none());
        t.multi_token.push(MultiTokenScheme {
            scheme: SchemeKind::Numerals,
            width: 3,
            one_token_per_digit: false,
            labels: (0..255)
                .map(|i| label(&format!("{i:03}"), &[2000 + i as u32]))
                .collect(),
        });
        assert_eq!(t.capacity_multi(), 255);
        assert_eq!(t.multi_label_count(), 355);
        assert_eq!(t.multi_labels_for(50).map(|s| s.width), Some(2));
        assert_eq!(t.multi_labels_for(101).map(|s| s.width), Some(3));
        assert_eq!(t.multi_labels_for(255).map(|s| s.width), Some(3));
        assert!(t.multi_labels_for(256).is_none());
        assert!(TokenTable::parse(&t.to_json()).is_ok());
        assert_eq!(
            TokenTable::load("golden-fake")
                .expect("built in")
                .capacity_multi(),
            0
        );
    }

    #[test]
    fn malformed_multi_token_sections_are_refused() {
        let refused = |t: &TokenTable, needle: &str| {
            let err = TokenTable::parse(&t.to_json()).expect_err("refused");
            assert!(err.contains(needle), "{err}");
        };
        let mut t = with_scheme(12);
        t.multi_token[0].labels[11].ids = vec![1000, 1001];
        refused(&t, "same ids");
        let mut t = with_scheme(12);
        t.multi_token[0].labels[11].ids = vec![1000];
        refused(&t, "prefix-free");
        let mut t = with_scheme(12);
        t.multi_token[0].labels[3].text = "3".into();
        refused(&t, "expected \"03\"");
        let mut t = with_scheme(12);
        t.multi_token[0].one_token_per_digit = false;
        refused(&t, "one_token_per_digit");
        let mut t = with_scheme(12);
        t.multi_token[0].labels[5].ids.clear();
        refused(&t, "no ids");
        let mut t = with_scheme(12);
        t.multi_token.push(t.multi_token[0].clone());
        refused(&t, "ascending width");
        let unknown = with_scheme(3)
            .to_json()
            .replace("\"numerals\"", "\"runes\"");
        assert!(TokenTable::parse(&unknown).is_err());
        // Letters are one character wide, and their texts are the alphabet in order.
        let mut t = with_letters(26);
        t.multi_token[0].width = 2;
        t.multi_token[0].one_token_per_digit = false;
        refused(&t, "width must be 1 to 1");
        let mut t = with_letters(26);
        t.multi_token[0].labels.swap(0, 1);
        refused(&t, "expected \"A\"");
    }
}
