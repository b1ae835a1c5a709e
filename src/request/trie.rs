//! The reads of a question. With single-token labels (every question a model's table can
//! label that way) it is one masked read, exactly the reference's. With multi-token labels
//! (`00`…`99`, `000`…`254` on a tokenizer that splits numbers into digits) it is a trie.
//!
//! The labels form a trie of token ids. Each node is one masked read: the assistant turn
//! is prefilled with the prefix (`answer=`) plus the node's label text so far (`answer=1`
//! for the second digit of `1x`), generation is masked to the node's child tokens, and
//! their pre-mask log-probabilities are read. A label's log-probability is the sum of its
//! tokens' conditional log-probabilities along its path (the chain rule); decoding then
//! renormalises over the question's labels and sums their mass, exactly as it does for
//! single-token labels. Every node depends only on the label texts, never on another
//! node's answer, so the reads could all go out together; the engine still sends the
//! root's first, alone, so the backend's prefix cache holds the prompt before the other
//! nodes arrive, unless the backend shares prefixes between requests in flight
//! (`engine/pipeline/reads.rs`).

use crate::models::tokens::{OptionLabels, TokenTable};

/// One label: its text (one character per token: a numeral) and its token ids after the
/// prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrieLabel<'a> {
    pub text: &'a str,
    pub ids: &'a [u32],
}

/// One read: the label text already generated, and the tokens that may follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The label text before this node's token (empty at the root).
    pub text: String,
    /// The distinct next tokens of the labels below this node, in first-seen order.
    pub children: Vec<u32>,
}

/// The trie of a question's labels: its nodes, and each label's path through them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trie {
    /// Root first; every node has at least one child.
    pub nodes: Vec<Node>,
    /// For label `i`: `(node, index into that node's children)` for each of its tokens.
    pub paths: Vec<Vec<(usize, usize)>>,
}

/// Why labels cannot be read as a trie.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrieError {
    #[error("label {0:?} has {1} tokens but {2} characters: its prefixes have no text")]
    Unaligned(String, usize, usize),
    #[error("label {0:?} is a prefix of label {1:?}: a read could not tell them apart")]
    NotPrefixFree(String, String),
}

impl Trie {
    /// Builds the trie of `labels`, which must be prefix-free and have one token per
    /// character (so the text of a node's prefix is the label text cut at that depth).
    pub fn build(labels: &[TrieLabel<'_>]) -> Result<Self, TrieError> {
        let mut trie = Trie {
            nodes: Vec::new(),
            paths: Vec::with_capacity(labels.len()),
        };
        // (label text prefix) → node index; the root is the empty prefix.
        let mut index: std::collections::HashMap<&str, usize> = Default::default();
        for label in labels {
            let chars: Vec<(usize, char)> = label.text.char_indices().collect();
            if chars.len() != label.ids.len() || label.ids.is_empty() {
                return Err(TrieError::Unaligned(
                    label.text.to_string(),
                    label.ids.len(),
                    chars.len(),
                ));
            }
            let mut path = Vec::with_capacity(label.ids.len());
            for (depth, id) in label.ids.iter().enumerate() {
                let prefix = &label.text[..chars[depth].0];
                let node = *index.entry(prefix).or_insert_with(|| {
                    trie.nodes.push(Node {
                        text: prefix.to_string(),
                        children: Vec::new(),
                    });
                    trie.nodes.len() - 1
                });
                let children = &mut trie.nodes[node].children;
                let child = children.iter().position(|c| c == id).unwrap_or_else(|| {
                    children.push(*id);
                    children.len() - 1
                });
                path.push((node, child));
            }
            trie.paths.push(path);
        }
        trie.check_prefix_free(labels, &index)?;
        Ok(trie)
    }

    /// No label may end where another goes on (a node is named by its text so far) or end
    /// at the same token of the same node as another: a read could not tell them apart.
    fn check_prefix_free(
        &self,
        labels: &[TrieLabel<'_>],
        nodes_by_text: &std::collections::HashMap<&str, usize>,
    ) -> Result<(), TrieError> {
        let refuse = |i: usize, j: usize| {
            TrieError::NotPrefixFree(labels[i].text.to_string(), labels[j].text.to_string())
        };
        let mut ends = std::collections::HashMap::new();
        for (i, (label, path)) in labels.iter().zip(&self.paths).enumerate() {
            if nodes_by_text.contains_key(label.text) {
                let longer = (0..labels.len())
                    .find(|j| *j != i && labels[*j].text.starts_with(label.text))
                    .unwrap_or(i);
                return Err(refuse(i, longer));
            }
            if let Some(j) = ends.insert(path[path.len() - 1], i) {
                return Err(refuse(j, i));
            }
        }
        Ok(())
    }

    /// Each label's log-probability: the sum over its path of the node reads'
    /// log-probabilities (`reads[node][child]`).
    pub fn label_logprobs(&self, reads: &[Vec<f64>]) -> Vec<f64> {
        self.paths
            .iter()
            .map(|path| path.iter().map(|(node, child)| reads[*node][*child]).sum())
            .collect()
    }
}

/// One masked read of a question (per option order): the assistant prefill and the ids
/// the generation is masked to, whose log-probabilities it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadNode {
    /// `answer=` plus the label text so far.
    pub prefill: String,
    /// The mask, which is also what is read (in slices of at most the backend's limit).
    pub ids: Vec<u32>,
}

/// Every read one question needs in one option order, and how they join into one
/// log-probability per option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPlan {
    /// Root first.
    pub nodes: Vec<ReadNode>,
    /// Multi-token labels: each option's path through `nodes`; `None` for single-token
    /// labels, where option `i` is the root's id `i`.
    paths: Option<Trie>,
}

impl ReadPlan {
    /// The reads of a question of `n` options on `table`; `None` when the table cannot
    /// label `n` options (validation refuses such a question first).
    pub fn new(table: &TokenTable, n: usize) -> Option<Self> {
        match table.labels_for(n)? {
            OptionLabels::Single(labels) => Some(ReadPlan {
                nodes: vec![ReadNode {
                    prefill: table.prefix.clone(),
                    ids: labels.iter().map(|l| l.id).collect(),
                }],
                paths: None,
            }),
            OptionLabels::Multi(labels) => {
                let labels: Vec<TrieLabel> = labels
                    .iter()
                    .map(|l| TrieLabel {
                        text: &l.text,
                        ids: &l.ids,
                    })
                    .collect();
                let trie = Trie::build(&labels).ok()?;
                let nodes = trie
                    .nodes
                    .iter()
                    .map(|node| ReadNode {
                        prefill: format!("{}{}", table.prefix, node.text),
                        ids: node.children.clone(),
                    })
                    .collect();
                Some(ReadPlan {
                    nodes,
                    paths: Some(trie),
                })
            }
        }
    }

    /// A plan that reads nothing.
    pub fn nothing() -> Self {
        ReadPlan {
            nodes: Vec::new(),
            paths: None,
        }
    }

    /// Upstream requests per option order when a read of a node with `n` ids may carry
    /// `per_read(n)` ids at most.
    pub fn requests(&self, per_read: impl Fn(usize) -> usize) -> usize {
        self.nodes
            .iter()
            .map(|n| n.ids.len().div_ceil(per_read(n.ids.len()).max(1)))
            .sum()
    }

    /// Tokens the node reads add to the prompt they share: each node's label prefix after
    /// `answer=` (one token per character; none for the root or single-token labels).
    pub fn label_prefix_tokens(&self) -> usize {
        self.paths.as_ref().map_or(0, |trie| {
            trie.nodes.iter().map(|n| n.text.chars().count()).sum()
        })
    }

    /// Whether the reads are joined by the chain rule (more than one node), so each must be
    /// a raw, pre-mask read of its node.
    pub fn chained(&self) -> bool {
        self.nodes.len() > 1
    }

    /// Each option's log-probability from the reads of every node (`reads[node]` aligned
    /// with that node's `ids`): the root's own for single-token labels, the sum along the
    /// label's path (the chain rule) for multi-token ones.
    pub fn join(&self, reads: Vec<Vec<f64>>) -> Vec<f64> {
        match &self.paths {
            None => reads.into_iter().next().unwrap_or_default(),
            Some(trie) => trie.label_logprobs(&reads),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A digit-splitting toy tokenizer: digit `d` is token `100 + d`.
    fn numerals(n: usize, width: usize) -> (Vec<String>, Vec<Vec<u32>>) {
        let texts: Vec<String> = (0..n).map(|i| format!("{i:0width$}")).collect();
        let ids = texts
            .iter()
            .map(|t| t.bytes().map(|b| 100 + u32::from(b - b'0')).collect())
            .collect();
        (texts, ids)
    }

    fn trie(n: usize, width: usize) -> Trie {
        let (texts, ids) = numerals(n, width);
        let labels: Vec<TrieLabel> = texts
            .iter()
            .zip(&ids)
            .map(|(t, i)| TrieLabel { text: t, ids: i })
            .collect();
        Trie::build(&labels).expect("builds")
    }

    #[test]
    fn node_counts_follow_the_numerals() {
        // 11 labels 00..10: the root (0, 1), then "0" (0..9) and "1" (0).
        let t = trie(11, 2);
        assert_eq!(t.nodes.len(), 3);
        assert_eq!(t.nodes[0].text, "");
        assert_eq!(t.nodes[0].children, vec![100, 101]);
        assert_eq!(t.nodes[1].text, "0");
        assert_eq!(t.nodes[1].children.len(), 10);
        assert_eq!(t.nodes[2].text, "1");
        assert_eq!(t.nodes[2].children, vec![100]);
        // 37: root + 0, 1, 2, 3 → 5 reads; 100: root + 10; 255 (width 3): 1 + 3 + 26.
        assert_eq!(trie(37, 2).nodes.len(), 5);
        assert_eq!(trie(100, 2).nodes.len(), 11);
        assert_eq!(trie(101, 3).nodes.len(), 1 + 2 + 11);
        assert_eq!(trie(255, 3).nodes.len(), 30);
        let t = trie(255, 3);
        assert_eq!(t.paths[254].len(), 3);
        let last = t.paths[254][2].0;
        assert_eq!(t.nodes[last].text, "25");
        assert_eq!(t.nodes[last].children, (100..=104).collect::<Vec<u32>>());
    }

    #[test]
    fn a_label_logprob_is_the_sum_along_its_path() {
        let t = trie(12, 2);
        // Root: P(0) = 0.6, P(1) = 0.3; node "0": P(d) = 0.1 each; node "1": 0.5, 0.25.
        let reads = vec![
            vec![0.6f64.ln(), 0.3f64.ln()],
            vec![0.1f64.ln(); 10],
            vec![0.5f64.ln(), 0.25f64.ln()],
        ];
        let lp = t.label_logprobs(&reads);
        assert_eq!(lp.len(), 12);
        assert!((lp[3].exp() - 0.06).abs() < 1e-12);
        assert!((lp[10].exp() - 0.15).abs() < 1e-12);
        assert!((lp[11].exp() - 0.075).abs() < 1e-12);
    }

    #[test]
    fn labels_that_are_prefixes_or_unaligned_are_refused() {
        let (a, b) = (vec![101u32], vec![101u32, 102]);
        let err = Trie::build(&[
            TrieLabel { text: "1", ids: &a },
            TrieLabel {
                text: "12",
                ids: &b,
            },
        ])
        .expect_err("1 is a prefix of 12");
        assert_eq!(err, TrieError::NotPrefixFree("1".into(), "12".into()));
        let same = vec![101u32, 102];
        assert!(Trie::build(&[
            TrieLabel {
                text: "12",
                ids: &b
            },
            TrieLabel {
                text: "13",
                ids: &same
            },
        ])
        .is_err());
        let err = Trie::build(&[TrieLabel {
            text: "12",
            ids: &a,
        }])
        .expect_err("1 token, 2 chars");
        assert!(matches!(err, TrieError::Unaligned(..)));
    }
}
