//! [`LabelTexts`]: the text of every label token, for hosts that return token text only
//! and for the probe.

use std::collections::HashMap;

/// The text of every label token the token table names, for hosts that return token text
/// only, and the single-token labels the bias probe uses.
#[derive(Debug, Clone, Default)]
pub struct LabelTexts {
    /// The prefill (`answer=`).
    pub(super) prefix: String,
    /// Single-token labels: `(id, text)`, in table order.
    pub(super) singles: Vec<(u32, String)>,
    /// Every label token's text; an id two labels give different texts is left out.
    pub(super) by_id: HashMap<u32, String>,
}

impl LabelTexts {
    /// From the prefix, the single-token labels and the tokens of the multi-token labels
    /// (each `(id, text)`: one character per token).
    pub fn new(
        prefix: String,
        singles: Vec<(u32, String)>,
        multi: impl IntoIterator<Item = (u32, String)>,
    ) -> Self {
        let mut by_id: HashMap<u32, String> = HashMap::new();
        let mut ambiguous = Vec::new();
        for (id, text) in singles.iter().cloned().chain(multi) {
            match by_id.get(&id) {
                Some(seen) if *seen != text => ambiguous.push(id),
                Some(_) => {}
                None => {
                    by_id.insert(id, text);
                }
            }
        }
        for id in ambiguous {
            by_id.remove(&id);
        }
        LabelTexts {
            prefix,
            singles,
            by_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_texts_drop_ids_two_labels_disagree_on() {
        let labels = LabelTexts::new(
            "answer=".into(),
            vec![(10, "0".into()), (11, "1".into())],
            [(10, "0".into()), (11, "7".into()), (12, "2".into())],
        );
        assert_eq!(labels.by_id.get(&10).map(String::as_str), Some("0"));
        assert_eq!(labels.by_id.get(&11), None, "ambiguous");
        assert_eq!(labels.by_id.get(&12).map(String::as_str), Some("2"));
    }
}
