//! The `openai` dialect's read strategies against the local llama-server (Gemma 3 270M):
//! reads per question and latency, at 4, 20 and 50 options, beside the llama.cpp dialect.
//!
//! Needs `SYSTEMONE_LLAMA_URL` (a `llama-server` base URL ending in `/v1`, e.g. from
//! `scripts/start-llama.sh 0`). Prints one markdown table on stdout, then the per-call
//! numbers; progress goes to stderr. Nothing is asserted.
//!
//! Three services run in this process (each the real app on 127.0.0.1:0, the in-flight cap
//! at its default of 16):
//! * **`llamacpp`**: `--backend llamacpp` on llama-server, numerals (4 options: one read;
//!   20: the trie `0x`,`1x` = 3 reads; 50: 6 reads), for comparison;
//! * **`openai raw_top_k`**: `--backend openai` on llama-server itself, which the probe finds
//!   reports logprobs before the bias, with a top-K of 1000: the raw read, numerals (the
//!   same reads as llama.cpp's, one request each);
//! * **`openai post_bias`**: `--backend openai` on llama-server behind a small proxy in this
//!   bench that makes it a post-bias host with a top-20 cap, as hosted APIs are
//!   (`tests/live/setup/post_bias_proxy.rs`: `post_sampling_probs: true` and a neutral sampler
//!   on every request, a 400 above 20 `top_logprobs`, `top_probs` turned into
//!   `top_logprobs`). With `--label-scheme letters` (Gemma 3's letters are single tokens),
//!   20 options are one post-bias read and 50 options the anchor merge: 3 reads of at most
//!   19 letters plus the anchor. 4 options are the digits, one read.
//!
//! Per cell, `BENCH_OPENAI_CALLS` calls (default 4) of one choice question on a state that
//! is new every call (a per-run nonce, the round and the cell), after one warm-up call; the
//! cells run round-robin so a slow moment of the machine is spread over all of them. The
//! table gives the reads per question (`usage.upstream_requests`), p50 and worst latency,
//! and how many calls answered 200 (a raw read whose top-K lacks an option is a 502; the
//! table counts them).
//!
//! `SYSTEMONE_LLAMA_URL=http://127.0.0.1:PORT/v1 cargo bench --bench openai`

// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/live/setup/post_bias_proxy.rs"]
mod post_bias_proxy;
#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use serde_json::{json, Map, Value};

use support::nearest_rank;

/// The top-K cap the post-bias proxy enforces (hosted APIs' and Ollama's).
const PROXY_CAP: u64 = 20;
/// Bound on one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Serves `app` on 127.0.0.1:0; returns its address.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// The service for `args` (after `systemone serve`), served in this process.
async fn service(args: &[&str]) -> SocketAddr {
    let all = ["systemone", "serve"].iter().chain(args);
    let config = match <systemone::cli::Cli as clap::Parser>::try_parse_from(all)
        .expect("valid flags")
        .command
    {
        systemone::cli::Command::Serve(config) => *config,
        _ => unreachable!("serve"),
    };
    let state = systemone::build_state(&config).expect("state builds");
    serve(systemone::app(state)).await
}

/// The common flags followed by `extra`.
fn with<'a>(common: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    common.iter().chain(extra).copied().collect()
}

/// One choice question of `n` options (`item 0`…) on a state made new by `salt`.
fn question(n: usize, salt: &str) -> Value {
    let criteria: Map<String, Value> = (0..n)
        .map(|i| {
            (
                format!("item {i}"),
                json!(format!("the customer means item {i}")),
            )
        })
        .collect();
    json!({
        "state": format!("Ticket {salt}. The customer writes: the invoice total is wrong and they want the item they were charged for checked."),
        "questions": {"q": {"type": "choice", "instructions": format!("Which of the {n} items is the ticket about?"), "criteria": criteria}},
    })
}

/// One measured cell: a service and an option count.
struct Cell {
    dialect: &'static str,
    labels: &'static str,
    n: usize,
    addr: SocketAddr,
    latencies: Vec<Duration>,
    reads: Vec<u64>,
    failures: Vec<String>,
}

/// Sends one call; records its latency and reads, or why it failed.
async fn call(client: &reqwest::Client, cell: &mut Cell, salt: &str, record: bool) {
    let started = Instant::now();
    let reply = client
        .post(format!("http://{}/v1/systemone", cell.addr))
        .json(&question(cell.n, salt))
        .send()
        .await;
    let elapsed = started.elapsed();
    let (status, body) = match reply {
        Ok(r) => (
            r.status().as_u16(),
            r.json::<Value>().await.unwrap_or(Value::Null),
        ),
        Err(e) => (0, json!({"error": {"code": e.to_string()}})),
    };
    eprintln!(
        "openai-bench: {} {} n={} {salt}: {status} in {:.0} ms, {} reads",
        cell.dialect,
        cell.labels,
        cell.n,
        elapsed.as_secs_f64() * 1e3,
        body["usage"]["upstream_requests"]
    );
    if !record {
        return;
    }
    if status == 200 {
        cell.latencies.push(elapsed);
        cell.reads
            .push(body["usage"]["upstream_requests"].as_u64().unwrap_or(0));
    } else {
        cell.failures.push(format!(
            "{status} {}",
            body["error"]["code"].as_str().unwrap_or("?")
        ));
    }
}

fn main() {
    let Ok(llama_url) = std::env::var("SYSTEMONE_LLAMA_URL") else {
        eprintln!("openai: set SYSTEMONE_LLAMA_URL to a llama-server base URL ending in /v1 (e.g. from scripts/start-llama.sh 0)");
        std::process::exit(2);
    };
    let llama_url = llama_url.trim_end_matches('/').to_string();
    let calls: usize = std::env::var("BENCH_OPENAI_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let rt = support::runtime("openai-bench");
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .expect("client");
        let proxy_url = post_bias_proxy::start(&llama_url, PROXY_CAP).await;
        let common = [
            "--model",
            "gemma-3-270m",
            "--token-table",
            "gemma-3",
            "--read-timeout-secs",
            "300",
            "--request-timeout-secs",
            "600",
            "--max-request-tokens",
            "10000000",
        ];
        let llamacpp = service(&with(&common, &["--backend", "llamacpp", "--backend-url", &llama_url])).await;
        let raw = service(&with(&common, &["--backend", "openai", "--backend-url", &llama_url])).await;
        let post_bias = service(&with(&common, &[
            "--backend",
            "openai",
            "--backend-url",
            &proxy_url,
            "--label-scheme",
            "letters",
        ]))
        .await;
        let mut cells: Vec<Cell> = Vec::new();
        for (dialect, labels, addr) in [
            ("llamacpp", "numerals", llamacpp),
            ("openai raw_top_k", "numerals", raw),
            ("openai post_bias", "letters", post_bias),
        ] {
            for n in [4usize, 20, 50] {
                cells.push(Cell {
                    dialect,
                    labels,
                    n,
                    addr,
                    latencies: Vec::new(),
                    reads: Vec::new(),
                    failures: Vec::new(),
                });
            }
        }
        // Every call's state is its own, so no cell reads a prompt another one cached.
        for (i, cell) in cells.iter_mut().enumerate() {
            call(&client, cell, &format!("warm-{nonce}-{i}"), false).await;
        }
        for round in 0..calls {
            for (i, cell) in cells.iter_mut().enumerate() {
                call(&client, cell, &format!("{nonce}-{round}-{i}"), true).await;
            }
        }
        println!("| dialect, strategy | labels | options | reads per question | p50 ms | worst ms | answered |");
        println!("|---|---|---|---|---|---|---|");
        for cell in &mut cells {
            cell.latencies.sort_unstable();
            let ms = |d: Option<Duration>| d.map_or("–".to_string(), |d| format!("{:.0}", d.as_secs_f64() * 1e3));
            let mut reads = cell.reads.clone();
            reads.dedup();
            let reads = reads.iter().map(u64::to_string).collect::<Vec<_>>().join("/");
            println!(
                "| {} | {} | {} | {} | {} | {} | {}/{}{} |",
                cell.dialect,
                cell.labels,
                cell.n,
                if reads.is_empty() { "–".into() } else { reads },
                ms(nearest_rank(&cell.latencies, 50.0)),
                ms(cell.latencies.last().copied()),
                cell.latencies.len(),
                calls,
                if cell.failures.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", cell.failures.join(", "))
                }
            );
        }
    });
}
