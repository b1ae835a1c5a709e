//! The cost of exact token counting with a real tokenizer (`--tokenizer`):
//!
//! * `load`: [`LoadedTokenizer::from_file`] on the Gemma 3 `tokenizer.json` (33 MB), what
//!   the service pays once per model at startup;
//! * `count_state`: [`LoadedTokenizer::count`] on the JSON rendering of a string state of
//!   exactly 32,768 tokens (the contract's default state limit), what a request at the
//!   limit pays in validation.
//!
//! The tokenizer comes from `SYSTEMONE_TOKENIZERS` (default `~/.cache/systemone/tokenizers`,
//! filled by `scripts/fetch-tokenizers.sh`); the benchmark panics when it is missing. The
//! measured sizes (file bytes, state bytes and tokens) are printed before the timings.
//!
//! `cargo bench --bench tokenizer`

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::Value;

use systemone::json::to_python;
use systemone::tokens::build::LoadedTokenizer;

/// The contract's default state limit.
const STATE_TOKENS: usize = 32_768;

fn tokenizer_path(name: &str) -> PathBuf {
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

/// The JSON rendering of a string state, as the prompt embeds it (quotes included).
fn render(state: &str) -> String {
    to_python(&Value::String(state.to_string())).expect("a string renders")
}

fn tokens(tk: &LoadedTokenizer, state: &str) -> usize {
    tk.count(&render(state)).expect("counts")
}

/// A string state whose rendering is exactly `target` tokens: a sentence repeated as often
/// as fits, then padded with short pieces.
fn state_of_exactly(tk: &LoadedTokenizer, target: usize) -> String {
    const SENTENCE: &str =
        "The customer says the invoice for March is wrong and asks for a refund. ";
    const PIECES: [&str; 8] = [" a", ".", " I", " x", "!", ",", " the", "?"];
    let text = |k: usize| SENTENCE.repeat(k).trim_end().to_string();
    let (mut lo, mut hi) = (1usize, target);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if tokens(tk, &text(mid)) <= target {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut state = text(lo);
    loop {
        let count = tokens(tk, &state);
        if count == target {
            return state;
        }
        let piece = PIECES
            .iter()
            .find(|p| {
                let grown = tokens(tk, &format!("{state}{p}"));
                grown > count && grown <= target
            })
            .expect("some piece grows the state towards the target");
        state.push_str(piece);
    }
}

fn tokenizer(c: &mut Criterion) {
    let path = tokenizer_path("gemma3");
    let file_bytes = std::fs::metadata(&path).expect("metadata").len();
    let tk = LoadedTokenizer::from_file(&path).expect("loads");
    let state = state_of_exactly(&tk, STATE_TOKENS);
    let rendered = render(&state);
    let counted = tk.count(&rendered).expect("counts");
    assert_eq!(counted, STATE_TOKENS);
    println!(
        "gemma3 tokenizer.json: {file_bytes} bytes; state: {} chars, rendering {} bytes, {counted} tokens",
        state.chars().count(),
        rendered.len()
    );

    let mut group = c.benchmark_group("tokenizer");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(25));
    group.throughput(Throughput::Bytes(file_bytes));
    group.bench_function("load/gemma3", |b| {
        b.iter(|| LoadedTokenizer::from_file(black_box(&path)).expect("loads"))
    });
    group.finish();

    let mut group = c.benchmark_group("tokenizer");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(counted as u64));
    group.bench_function("count_state/gemma3/32768", |b| {
        b.iter(|| tk.count(black_box(&rendered)).expect("counts"))
    });
    group.finish();
}

criterion_group!(benches, tokenizer);
criterion_main!(benches);
