//! The token-table labelling rule on a synthetic tokenizer, built in the test: a sparse tail
//! of single-token integers is followed up to 255 labels. The tables built from the real
//! tokenizers are checked in the live tier (`tests/live/token_tables.rs`).

use serde_json::{json, Map};
use systemone::models::tokens::build::{build, check, LoadedTokenizer};

/// A synthetic tokenizer whose single-token integers are 0..=190, then 192, 195, 198, …
/// (every third). Digit runs are split off by the `Digits` pre-tokenizer; a run that is in
/// the vocabulary is one token (`ignore_merges`), any other falls apart into single digits.
fn synthetic_tokenizer() -> (LoadedTokenizer, Vec<u32>) {
    let mut singles: Vec<u32> = (0..=190).collect();
    singles.extend((192..=600).step_by(3));
    let mut vocab = Map::new();
    let tokens = ["answer=".to_string()]
        .into_iter()
        .chain("abcdefghijklmnopqrstuvwxyz=".chars().map(String::from))
        .chain(singles.iter().map(u32::to_string));
    for token in tokens {
        let id = vocab.len();
        vocab.entry(token).or_insert(json!(id));
    }
    let file = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Digits", "individual_digits": false},
        "post_processor": null, "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
                  "vocab": vocab, "merges": []}
    });
    let tk = LoadedTokenizer::from_bytes(file.to_string().as_bytes())
        .expect("synthetic tokenizer loads");
    (tk, singles)
}

/// With single-token integers that stop at 190 and resume at 192, 195, …, the table takes
/// 0–190 and then the sparse tail, 255 labels in all, each with its own vocabulary id.
#[test]
fn a_sparse_tail_is_followed_up_to_255_labels() {
    let (tk, singles) = synthetic_tokenizer();
    // 190 is a token, 191 is not: "answer=191" is the prefix and 3 digits.
    assert_eq!(tk.encode("answer=190").expect("encodes").len(), 2);
    assert_eq!(tk.encode("answer=191").expect("encodes").len(), 4);
    let table = build(&tk, "synthetic", "synthetic", "answer=", 255, 10_000).expect("builds");
    assert_eq!(table.capacity(), 255);
    let numbers: Vec<u32> = table.labels.iter().map(|l| l.number).collect();
    assert_eq!(numbers, singles[..255].to_vec());
    assert_eq!(numbers[190], 190);
    assert_eq!(numbers[191], 192);
    assert_eq!(numbers[192], 195);
    assert_eq!(numbers[254], 381);
    for label in &table.labels {
        assert_eq!(
            tk.encode(&format!("answer={}", label.number))
                .expect("encodes")
                .last(),
            Some(&label.id)
        );
    }
    assert!(check(&tk, &table).expect("checks").is_empty());
    // A table that skipped a usable integer is caught.
    let mut gap = table.clone();
    gap.labels.remove(100);
    assert!(check(&tk, &gap)
        .expect("checks")
        .iter()
        .any(|p| p.contains("missing")));
}
