//! What the gateway adds to each request, without any I/O:
//!
//! * `authenticate`: hashing the bearer and comparing it in constant time with every
//!   configured digest, for an open service and for 1 and 1,000 configured keys (the
//!   comparison scans all of them whether or not one matches);
//! * `limits`: one request and its questions counted against a key with requests and
//!   questions per minute and a daily cap (governor GCRA plus the daily counter);
//! * `metrics`: the counters and histograms one answered request records;
//! * `identify`: a key against a signed token (ES256, from a JWKS already cached, sent again
//!   as clients do: the verified-token cache answers), side by side: what a token caller
//!   adds to each request's CPU (issue 40's goal: <= 10 us); and a token seen for the first
//!   time, whose ES256 signature is checked (what a caller's first request, or one after
//!   the 60 s cache, costs).
//!
//! `cargo bench --bench gateway`

use std::hint::black_box;
use std::time::Duration;

use axum::http::HeaderValue;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

use systemone::http::auth::Keys;
use systemone::metrics::Metrics;
use systemone::secret::Secret;

#[path = "support/mod.rs"]
mod support;

fn keys(n: usize) -> Keys {
    if n == 0 {
        return Keys::open();
    }
    let list: Vec<String> = (0..n).map(|i| format!("sk-bench-key-{i:06}")).collect();
    Keys::load(None, Some(&Secret::new(list.join(",")))).expect("keys")
}

fn limited_key() -> Keys {
    let dir = std::env::temp_dir().join(format!("systemone-bench-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let path = dir.join("keys.toml");
    let hex: String = systemone::http::auth::digest("sk-limited")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(
        &path,
        format!(
            "[[key]]\nname = \"limited\"\nsha256 = \"{hex}\"\nrequests_per_minute = 1000000000\nquestions_per_minute = 1000000000\ndaily_questions = 9000000000000000000\n"
        ),
    )
    .expect("write");
    Keys::load(Some(&path), None).expect("keys")
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("authenticate");
    for n in [0usize, 1, 1000] {
        let keys = keys(n);
        let last = HeaderValue::from_str(&format!("Bearer sk-bench-key-{:06}", n.max(1) - 1))
            .expect("header");
        let wrong = HeaderValue::from_static("Bearer sk-not-configured");
        group.bench_with_input(BenchmarkId::new("right key", n), &n, |b, _| {
            b.iter(|| black_box(keys.authenticate(Some(black_box(&last))).is_ok()))
        });
        group.bench_with_input(BenchmarkId::new("wrong key", n), &n, |b, _| {
            b.iter(|| black_box(keys.authenticate(Some(black_box(&wrong))).is_ok()))
        });
    }
    group.finish();

    let keys = limited_key();
    let bearer = HeaderValue::from_static("Bearer sk-limited");
    let caller = keys.authenticate(Some(&bearer)).expect("caller");
    c.bench_function("limits/request + 3 questions", |b| {
        b.iter(|| {
            caller.admit_request().expect("admitted");
            caller
                .admit_questions_at(black_box(3), 0)
                .expect("admitted");
        })
    });

    bench_tokens(c);

    let metrics = Metrics::new();
    c.bench_function("metrics/one request", |b| {
        b.iter(|| {
            metrics.count_key_request(black_box("limited"));
            metrics.observe_upstream("vllm", Duration::from_millis(12), "2xx");
            metrics.count_request("/v1/systemone", 200, "", Duration::from_millis(40));
        })
    });
}

/// `identify` for a key and for a token whose key is cached, in one keys file: the token
/// sent again (the verified-token cache answers) and a token seen for the first time (its
/// signature checked).
fn bench_tokens(c: &mut Criterion) {
    let tokens = support::tokens::BenchTokens::new();
    let keys = Keys::load(Some(&tokens.keys_file), None).expect("keys");
    let token = tokens.token("user-42@example.com");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let with_token = HeaderValue::from_str(&format!("Bearer {token}")).expect("header");
    let with_key =
        HeaderValue::from_str(&format!("Bearer {}", support::tokens::KEY)).expect("header");
    runtime.block_on(async {
        keys.identify(Some(&with_token))
            .await
            .expect("the token verifies");
    });
    let mut group = c.benchmark_group("identify");
    group.bench_function("key", |b| {
        b.iter(|| {
            runtime
                .block_on(keys.identify(Some(black_box(&with_key))))
                .is_ok()
        })
    });
    group.bench_function("token (ES256, cached JWKS)", |b| {
        b.iter(|| {
            runtime
                .block_on(keys.identify(Some(black_box(&with_token))))
                .is_ok()
        })
    });
    let mut fresh = 0u64;
    group.bench_function("token seen first (ES256 signature checked)", |b| {
        b.iter_batched(
            || {
                fresh += 1;
                HeaderValue::from_str(&format!(
                    "Bearer {}",
                    tokens.token(&format!("user-{fresh}"))
                ))
                .expect("header")
            },
            |header| {
                runtime
                    .block_on(keys.identify(Some(black_box(&header))))
                    .is_ok()
            },
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
