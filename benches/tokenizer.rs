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

// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/live/setup/tokenizers.rs"]
mod real_tokenizers;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use real_tokenizers::{render_state, state_of_exactly, tokenizer_path};
use systemone::models::tokens::build::LoadedTokenizer;

/// The contract's default state limit.
const STATE_TOKENS: usize = 32_768;

fn tokenizer(c: &mut Criterion) {
    let path = tokenizer_path("gemma3");
    let file_bytes = std::fs::metadata(&path).expect("metadata").len();
    let tk = LoadedTokenizer::from_file(&path).expect("loads");
    let state = state_of_exactly(&tk, STATE_TOKENS);
    let rendered = render_state(&state);
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
