//! A read that times out mid-prompt ends its upstream request at a real llama-server, which
//! then stops evaluating the prompt and frees its slot (issue 29, item 1): the service closes
//! the connection at once, llama-server notices the close and cancels the task at its next
//! batch boundary, and `/slots` shows the slot idle with only part of the prompt evaluated.
//!
//! Two facts of llama-server shape the test (read in its `server-context.cpp` and
//! `server-queue.cpp`, and measured; see docs/benchmarks.md):
//! * Its HTTP thread looks for a closed connection only when its 1 s wait for results times
//!   out (`HTTP_POLLING_SECONDS`), and every result sent for any task (a `/slots` answer
//!   included) restarts that wait. Polling `/slots` faster than once a second therefore hides
//!   the close: the prompt then runs to its end. The test polls every 1.5 s.
//! * A cancel takes effect between batches, so `scripts/start-llama.sh` runs `-b 256 -ub 256`
//!   (no slower here than 2048 / 512) and the slot is free about a second after the close.
//!
//! Needs `SYSTEMONE_LLAMA_URL` as exported by `scripts/test.sh` (fails, never skips).

use crate::support;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::setup::llama::{ask, backend_turn, llama_config, llama_root};

/// Slower than llama-server's 1 s disconnect check (see the module docs).
const SLOTS_POLL: Duration = Duration::from_millis(1500);
/// Enough polls for the whole prompt to have been evaluated had it not been cancelled.
const MAX_POLLS: usize = 80;

/// A state of about 11,000 tokens (~30 s of prompt evaluation here) that no earlier prompt
/// shares a prefix with, so llama-server's prompt cache cannot shorten it.
fn long_state() -> String {
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!(
        "Ticket {nonce}. {}",
        "The customer writes that the parcel arrived late and the box was crushed. ".repeat(700)
    )
}

async fn get_json(url: &str) -> Value {
    reqwest::get(url)
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .expect("JSON")
}

/// The number of tokens llama-server makes of `text` (`POST /tokenize`).
async fn token_count(root: &str, text: &str) -> u64 {
    let tokens: Value = reqwest::Client::new()
        .post(format!("{root}/tokenize"))
        .json(&json!({"content": text}))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("POST /tokenize")
        .json()
        .await
        .expect("JSON");
    tokens["tokens"].as_array().expect("tokens").len() as u64
}

/// The single slot of the shared llama-server (`-np 1`).
async fn slot(root: &str) -> Value {
    let slots = get_json(&format!("{root}/slots")).await;
    slots[0].clone()
}

/// Polls `/slots` every [`SLOTS_POLL`] until the slot is idle; returns it and the time taken.
async fn wait_until_idle(root: &str) -> (Value, Duration) {
    let started = Instant::now();
    for _ in 0..MAX_POLLS {
        tokio::time::sleep(SLOTS_POLL).await;
        let slot = slot(root).await;
        if slot["is_processing"] == json!(false) {
            return (slot, started.elapsed());
        }
    }
    panic!(
        "llama-server's slot was still processing {} s after the service's 504",
        started.elapsed().as_secs()
    );
}

/// The service times the read out after 2 s (504), and llama-server's slot goes idle having
/// evaluated only part of the prompt: a new task ran (its id is past the one before the
/// request) and the slot holds fewer tokens than the state alone has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_timed_out_mid_prompt_frees_the_llama_server_slot() {
    let (url, _turn) = backend_turn().await;
    let root = llama_root(&url);
    let state = long_state();
    let state_tokens = token_count(&root, &state).await;
    let task_before = slot(&root).await["id_task"].as_i64().unwrap_or(-1);
    let service = support::start(llama_config(&url, &["--read-timeout-secs", "2"])).await;

    let reply = ask(
        &service,
        &json!({
            "state": state,
            "questions": {"team": {"type": "choice", "criteria": {"billing": null, "shipping": null, "sales": null}}}
        }),
    )
    .await;
    assert_eq!(reply.status, 504, "{}", reply.body);
    assert_eq!(
        reply.header("x-systemone-error-code"),
        Some("system_one_upstream_timeout"),
        "{}",
        reply.body
    );

    let (idle, waited) = wait_until_idle(&root).await;
    let task = idle["id_task"].as_i64().expect("id_task");
    let evaluated = idle["n_prompt_tokens"].as_u64().expect("n_prompt_tokens");
    eprintln!(
        "slot idle within {:.1} s of the 504 (polled every {:.1} s), {evaluated} of more than \
         {state_tokens} prompt tokens evaluated",
        waited.as_secs_f64(),
        SLOTS_POLL.as_secs_f64()
    );
    assert!(
        task > task_before,
        "no new task ran at llama-server (slot: {idle})"
    );
    assert!(
        evaluated < state_tokens,
        "the slot went idle after evaluating {evaluated} tokens, not fewer than the state's \
         {state_tokens}: the prompt ran to its end instead of being cancelled (slot: {idle})"
    );
}
