//! A batch against the same lines sent online: the real `systemone` binary in front of the
//! fake vLLM server (answering at once, from its own runtime in this process), with its
//! ledger on (the shipping default) and `--state-dir` for the batch store.
//!
//! * **online**: the file's bodies posted to `/v1/systemone` by `c` concurrent loops, for
//!   `c` in 16, 32, 64, 128 (each body once; lines per second over the whole set);
//! * **batch**: the same lines uploaded as one file, a batch created, and the batch polled
//!   every 10 ms until `completed`: lines per second from the create to the end (the upload
//!   is timed apart).
//!
//! The lines are 2,000 states × 5 one-question bodies (a 4-option choice), shuffled.
//! Each with `--batch-share` 0.5 (the default: batch lines hold at most half the in-flight cap)
//! and 1 (all of it, as with no online traffic), one service each.
//! `cargo bench --bench batches`; `BATCH_BENCH_LINES` (default 10,000), `BATCH_BENCH_RUNS`
//! (runs of each, alternating, default 2; the best of each is reported),
//! `BATCH_BENCH_LEVELS` (the client concurrencies, `16,32,64,128`; empty: no online runs),
//! `BATCH_BENCH_SHARES` (`0.5,1`), and `BATCH_BENCH_OLD_BINARY`: another build of the
//! service, measured beside this one run for run (each run both builds in turn).

// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_server.rs"]
mod fake_server;
// Shared with the tests; this bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/support/fake_vllm.rs"]
mod fake_vllm;
#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_vllm::FakeVllm;
use serde_json::{json, Value};
use support::{built_binary, load_client, start_on_fake};

const LEVELS: &str = "16,32,64,128";
const BOUNDARY: &str = "batchbenchboundary";

/// A comma-separated list from `name` (empty: none), else `default`'s.
fn env_list(name: &str, default: &str) -> Vec<String> {
    let text = std::env::var(name).unwrap_or_else(|_| default.to_string());
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Line `i`'s body: state `i / 5` of a shuffled order, one 4-option choice.
fn body(i: usize, lines: usize) -> Value {
    let state = (i * 7919) % lines / 5;
    json!({
        "state": format!("Ticket {state}: the customer writes that the invoice of March was charged twice."),
        "questions": {"team": {"type": "choice", "instructions": "Which team handles it?",
            "criteria": {"billing": "money", "tech": "bugs", "sales": "plans", "other": null}}}
    })
}

/// Posts every body once from `concurrency` loops; lines per second.
async fn online(addr: SocketAddr, bodies: Arc<Vec<String>>, concurrency: usize) -> f64 {
    let client = load_client(concurrency, Duration::from_secs(60));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, bodies, next) = (client.clone(), bodies.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else { break };
                    let reply = client
                        .post(format!("http://{addr}/v1/systemone"))
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await
                        .expect("the service answers");
                    assert!(reply.status().is_success(), "{}", reply.status());
                    reply.bytes().await.expect("a body");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a loop");
    }
    bodies.len() as f64 / started.elapsed().as_secs_f64()
}

/// Uploads the file and runs it as a batch; (upload seconds, lines per second of the run).
async fn batch(addr: SocketAddr, file: &[u8], lines: usize) -> (f64, f64) {
    let client = load_client(4, Duration::from_secs(600));
    let mut form = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"lines.jsonl\"\r\n\r\n").into_bytes();
    form.extend_from_slice(file);
    form.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    let uploading = Instant::now();
    let uploaded: Value = client
        .post(format!("http://{addr}/v1/files"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(form)
        .send()
        .await
        .expect("upload")
        .json()
        .await
        .expect("a file");
    let upload_secs = uploading.elapsed().as_secs_f64();
    let started = Instant::now();
    let created: Value = client
        .post(format!("http://{addr}/v1/batches"))
        .json(&json!({"input_file_id": uploaded["id"], "endpoint": "/v1/systemone", "completion_window": "24h"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("a batch");
    let id = created["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"));
    loop {
        let now: Value = client
            .get(format!("http://{addr}/v1/batches/{id}"))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("a batch");
        if now["status"] == "completed" {
            assert_eq!(
                now["request_counts"]["completed"].as_u64(),
                Some(lines as u64),
                "{now}"
            );
            break;
        }
        assert!(
            ["in_progress", "finalizing"].contains(&now["status"].as_str().unwrap_or("")),
            "{now}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (upload_secs, lines as f64 / started.elapsed().as_secs_f64())
}

/// What one build measured: the best online rate per level, the best batch rate, the
/// fastest upload.
struct Measured {
    online: Vec<f64>,
    batch: f64,
    upload: f64,
}

/// One service per build (each with `--batch-share share`), measured in turn within each of
/// `runs` runs, so a build's runs and another's meet the same load: the best of each.
fn measure(
    binaries: &[PathBuf],
    fake: &FakeVllm,
    share: &str,
    (lines, runs, levels): (usize, usize, &[usize]),
) -> Vec<Measured> {
    let services: Vec<_> = binaries
        .iter()
        .enumerate()
        .map(|(n, binary)| {
            let dir = std::env::temp_dir().join(format!(
                "systemone-batch-bench-{}-{share}-{n}",
                std::process::id()
            ));
            let dir_flag = dir.to_str().expect("utf-8").to_string();
            let flags = [
                "--max-concurrent-requests",
                "1024",
                "--state-dir",
                &dir_flag,
                "--batch-share",
                share,
            ];
            let (guard, addr) = start_on_fake(binary, &fake.base_url(), &flags);
            (guard, addr, dir)
        })
        .collect();
    let bodies: Vec<String> = (0..lines).map(|i| body(i, lines).to_string()).collect();
    let file: String = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| format!("{{\"custom_id\":\"l{i}\",\"method\":\"POST\",\"url\":\"/v1/systemone\",\"body\":{b}}}\n"))
        .collect();
    let bodies = Arc::new(bodies);
    let rt = support::runtime("load");
    let mut measured: Vec<Measured> = binaries
        .iter()
        .map(|_| Measured {
            online: vec![0.0; levels.len()],
            batch: 0.0,
            upload: f64::MAX,
        })
        .collect();
    for _ in 0..runs {
        for ((_, addr, _), m) in services.iter().zip(&mut measured) {
            for (i, c) in levels.iter().enumerate() {
                m.online[i] = m.online[i].max(rt.block_on(online(*addr, bodies.clone(), *c)));
            }
            let (up, rate) = rt.block_on(batch(*addr, file.as_bytes(), lines));
            m.batch = m.batch.max(rate);
            m.upload = m.upload.min(up);
        }
    }
    for (guard, _, dir) in services {
        drop(guard);
        let _ = std::fs::remove_dir_all(&dir);
    }
    measured
}

fn main() {
    let lines = env_usize("BATCH_BENCH_LINES", 10_000);
    let runs = env_usize("BATCH_BENCH_RUNS", 2);
    let levels: Vec<usize> = env_list("BATCH_BENCH_LEVELS", LEVELS)
        .iter()
        .map(|l| l.parse().expect("BATCH_BENCH_LEVELS: numbers"))
        .collect();
    let mut builds = vec![("this", built_binary().to_path_buf())];
    if let Ok(old) = std::env::var("BATCH_BENCH_OLD_BINARY") {
        builds.push(("old", PathBuf::from(old)));
    }
    let fake_rt = support::runtime("fake-vllm");
    let fake = fake_rt.block_on(FakeVllm::start());
    fake.set_keep_bodies(false);
    println!(
        "{lines} lines, best of {runs} runs each, {} CPUs\n",
        support::cpus()
    );
    println!("| build | --batch-share | mode | client concurrency | lines/s | x best online |");
    println!("|---|---:|---|---:|---:|---:|");
    let binaries: Vec<PathBuf> = builds.iter().map(|(_, b)| b.clone()).collect();
    for share in env_list("BATCH_BENCH_SHARES", "0.5,1") {
        let measured = measure(&binaries, &fake, &share, (lines, runs, &levels));
        for ((build, _), m) in builds.iter().zip(measured) {
            let best = m.online.iter().cloned().fold(0.0, f64::max);
            for (i, c) in levels.iter().enumerate() {
                println!(
                    "| {build} | {share} | online | {c} | {:.0} | {:.2} |",
                    m.online[i],
                    m.online[i] / best
                );
            }
            println!(
                "| {build} | {share} | batch | - | {:.0} | {:.2} |",
                m.batch,
                m.batch / best
            );
            let upload = m.upload;
            println!("| {build} | {share} | (upload of the file) | - | {upload:.2} s | |");
        }
    }
}
