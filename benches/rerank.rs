//! `/v2/rerank` throughput against a real llama.cpp backend (Gemma 3 270M), the local
//! default: documents per second and the median (nearest rank) time per call for 10 and
//! 100 documents of ~200 tokens against a ~20-token query, and the prompt and cached
//! tokens the backend reported per call.
//!
//! Needs `SYSTEMONE_LLAMA_URL` (a `llama-server` base URL ending in `/v1`, e.g. from
//! `scripts/start-llama.sh 0`, which starts it with one slot, `--swa-full` and
//! `--cache-ram 512`). Prints a markdown table on stdout; progress on stderr. Nothing is
//! asserted.
//!
//! The service runs as a child (`systemone serve --backend llamacpp --model gemma-3-270m
//! --token-table gemma-3`, the prompt cache on, no `--tokenizer`: the byte estimate, as
//! `scripts/run-local.sh` serves it) with generous timeouts. Every call has a new query
//! and new documents (a per-run nonce and the call number lead both), so no call reuses
//! another's prompt beyond the preamble and the configured question; within a call the
//! documents share the prefix up to the document (preamble, question, `{"state": {"query":
//! …}}`), which is what `cached_tokens` shows. 100 documents are two engine requests (64 +
//! 36, `--max-questions`); the first goes alone. One 2-document call warms the service
//! first (its first request waits for the live token-table check).
//!
//! `BENCH_RERANK_CALLS` (default 3) calls per size; `BENCH_RERANK_SIZES` (default `10,100`).
//! A few minutes on 2 idle cores (100 documents are ~250 evaluated tokens each); much
//! longer when another process shares the cores.
//!
//! `SYSTEMONE_LLAMA_URL=http://127.0.0.1:PORT/v1 cargo bench --bench rerank`

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use support::{ms, nearest_rank, serve_command, ServiceGuard};

/// Sentences the documents are made of (~16 Gemma 3 tokens each).
const SENTENCES: [&str; 10] = [
    "The billing team reviews every disputed card charge within two business days of the report.",
    "Customers who were charged twice receive the duplicate amount back on the original card.",
    "Our warehouse in Rotterdam ships orders placed before noon on the same working day.",
    "A subscription can be paused for up to three months from the account settings page.",
    "Invoices are issued in the currency of the country where the account was opened.",
    "Support is available by chat from eight in the morning until eight in the evening.",
    "Gift cards cannot be exchanged for cash and expire two years after they were bought.",
    "The mobile app shows every payment, refund and pending charge of the last twelve months.",
    "Late payments add a reminder fee after the second notice has been sent by email.",
    "Business accounts may add up to twenty users, each with their own spending limit.",
];

/// A ~190-token document (Gemma 3's tokenizer): its number and the run's nonce, then eleven sentences in an order
/// of its own.
fn document(nonce: u64, call: usize, i: usize) -> String {
    let mut text = format!("Note {nonce}-{call}-{i}.");
    for k in 0..11 {
        text.push(' ');
        text.push_str(SENTENCES[(i * 3 + k * 7) % SENTENCES.len()]);
    }
    text
}

/// A ~20-token query (Gemma 3 splits the digits), new for each call.
fn query(nonce: u64, call: usize) -> String {
    format!(
        "Case {}-{call}: how can a customer get money back after a double charge?",
        nonce % 1000
    )
}

/// One call's numbers.
struct Sample {
    wall: Duration,
    input_tokens: u64,
    cached_tokens: u64,
    upstream_requests: u64,
}

async fn call(client: &reqwest::Client, url: &str, query: &str, documents: &[String]) -> Sample {
    let body = json!({"model": "gemma-3-270m", "query": query, "documents": documents});
    let started = Instant::now();
    let response = client
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("the service answers");
    let status = response.status();
    let reply: Value = response.json().await.expect("a JSON body");
    let wall = started.elapsed();
    assert!(status.is_success(), "rerank failed ({status}): {reply}");
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    Sample {
        wall,
        input_tokens: n(&reply["meta"]["tokens"]["input_tokens"]),
        cached_tokens: n(&reply["meta"]["cached_tokens"]),
        upstream_requests: n(&reply["usage"]["upstream_requests"]),
    }
}

fn median<T: Copy + Ord>(mut v: Vec<T>) -> T {
    v.sort();
    nearest_rank(&v, 50.0).expect("a sample")
}

fn start(llama_url: &str) -> (ServiceGuard, String) {
    let flags = [
        "--backend",
        "llamacpp",
        "--backend-url",
        llama_url,
        "--model",
        "gemma-3-270m",
        "--token-table",
        "gemma-3",
        "--read-timeout-secs",
        "300",
        "--request-timeout-secs",
        "900",
    ];
    let (guard, addr) = support::start_service(serve_command(&flags), |line, listening| {
        if listening && !line.contains(" INFO ") {
            eprintln!("service: {line}");
        }
    });
    (guard, format!("http://{addr}/v2/rerank"))
}

fn main() {
    let llama_url = std::env::var("SYSTEMONE_LLAMA_URL").expect(
        "SYSTEMONE_LLAMA_URL: a llama-server base URL ending in /v1 (scripts/start-llama.sh 0)",
    );
    let calls: usize = std::env::var("BENCH_RERANK_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let sizes: Vec<usize> = std::env::var("BENCH_RERANK_SIZES")
        .unwrap_or_else(|_| "10,100".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (_guard, url) = start(&llama_url);
    let client = support::load_client(4, Duration::from_secs(1800));
    let runtime = support::runtime("rerank-bench");
    let mut rows = Vec::new();
    runtime.block_on(async {
        let warm: Vec<String> = (0..2).map(|i| document(nonce, 0, i)).collect();
        call(&client, &url, &query(nonce, 0), &warm).await;
        let mut next = 1;
        for &n in &sizes {
            let mut samples = Vec::new();
            for _ in 0..calls {
                let docs: Vec<String> = (0..n).map(|i| document(nonce, next, i)).collect();
                let s = call(&client, &url, &query(nonce, next), &docs).await;
                eprintln!(
                    "rerank: {n} documents in {:.0} ms, {} reads, {} prompt tokens, {} cached",
                    ms(s.wall),
                    s.upstream_requests,
                    s.input_tokens,
                    s.cached_tokens
                );
                samples.push(s);
                next += 1;
            }
            rows.push((n, samples));
        }
    });
    println!("| documents | calls | p50 per call | documents/s | reads per call | prompt tokens per call | cached tokens per call | cached share |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (n, samples) in &rows {
        let wall = median(samples.iter().map(|s| s.wall).collect());
        let input = median(samples.iter().map(|s| s.input_tokens).collect());
        let cached = median(samples.iter().map(|s| s.cached_tokens).collect());
        let reads = median(samples.iter().map(|s| s.upstream_requests).collect());
        println!(
            "| {n} | {} | {:.2} s | {:.1} | {reads} | {input} | {cached} | {:.0}% |",
            samples.len(),
            wall.as_secs_f64(),
            *n as f64 / wall.as_secs_f64(),
            100.0 * cached as f64 / input.max(1) as f64
        );
    }
}
