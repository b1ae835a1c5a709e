//! End to end against a real llama.cpp `llama-server` serving Gemma 3 270M: questions with
//! more options than Gemma 3's ten single-token labels are answered with the multi-token
//! numerals (`00`…, `000`…), read as a trie, and the answer is exactly the chain rule over
//! the backend's own log-probabilities.
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: base URL of a llama-server with Gemma 3 270M, ending in `/v1`.
//!
//! Without it the tests fail with a message that says so; they never skip.

mod common;

use std::time::Instant;

use serde_json::{json, Map, Value};

use systemone::backend::llamacpp::LlamaCppBackend;
use systemone::backend::ReadRequest;
use systemone::request::prompt::plan;
use systemone::request::validate;

use common::llama::{
    answer, ask, assert_close, backend_turn, check_answer, llama_config, num, raw_logprobs,
};

fn labels(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("product {i}")).collect()
}

fn choice_of(n: usize, temperature: Option<Value>) -> Value {
    let criteria: Map<String, Value> = labels(n).into_iter().map(|l| (l, Value::Null)).collect();
    let mut body = json!({
        "state": "The customer ordered the product whose number is on the invoice: 7.",
        "questions": {"product": {
            "type": "choice",
            "instructions": "Which product did the customer order?",
            "criteria": criteria
        }}
    });
    if let Some(t) = temperature {
        body["temperature"] = t;
    }
    body
}

/// With `--cache-prompt false`, 11- and 37-option choices at T = 1: the service's
/// probabilities equal the chain-rule products computed here from the backend's own raw
/// log-probabilities (each node's prompt sent straight to llama-server, prefilled with
/// `answer=` plus the node's digits), renormalised, to 1e-6; `option_mass` is the sum of
/// the products. 11 options are 3 reads (root, `0`, `1`), 37 are 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_token_answers_are_the_chain_rule_over_the_backends_logprobs() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = common::start(llama_config(&url, &["--cache-prompt", "false"])).await;
    let direct = LlamaCppBackend::new(
        reqwest::Client::new(),
        &url,
        "gemma-3-270m".to_string(),
        None,
        false,
        None,
    );
    let client = reqwest::Client::new();
    for (n, nodes) in [(11, 3), (37, 5)] {
        let reply = ask(&service, &choice_of(n, Some(json!(1)))).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let names = labels(n);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let p = check_answer(answer(&reply.body, "product"), "choice", &names);
        assert_eq!(
            reply.body["usage"]["upstream_requests"], nodes,
            "{}",
            reply.body
        );

        let request = validate(
            choice_of(n, Some(json!(1))),
            &service.state.models,
            &service.state.limits,
        )
        .expect("valid");
        let asks = plan(&request);
        let reads = &request.rendered()[0].reads;
        assert_eq!(reads.nodes.len(), nodes);
        let mut node_lps: Vec<Vec<f64>> = Vec::new();
        for node in &reads.nodes {
            let read = ReadRequest {
                content: &asks[0][0].content,
                prefix: &node.prefill,
                allowed_ids: &node.ids,
                read_ids: &node.ids,
            };
            let body = serde_json::to_value(direct.body(&read, false)).expect("serialises");
            let response: Value = client
                .post(format!("{url}/chat/completions"))
                .json(&body)
                .send()
                .await
                .expect("llama-server answers")
                .error_for_status()
                .expect("accepted")
                .json()
                .await
                .expect("JSON");
            node_lps.push(raw_logprobs(&response, &node.ids));
        }
        // Independently of the service's trie: label i's digits, the node of each prefix.
        let width = 2;
        let products: Vec<f64> = (0..n)
            .map(|i| {
                let text = format!("{i:0width$}");
                (0..width)
                    .map(|depth| {
                        let prefill = format!("answer={}", &text[..depth]);
                        let k = reads
                            .nodes
                            .iter()
                            .position(|node| node.prefill == prefill)
                            .expect("a read for every prefix");
                        let digit = usize::from(text.as_bytes()[depth] - b'0');
                        let id = request.model().table.labels[digit].id;
                        let j = reads.nodes[k]
                            .ids
                            .iter()
                            .position(|x| *x == id)
                            .expect("the digit is in the node's mask");
                        node_lps[k][j].exp()
                    })
                    .product()
            })
            .collect();
        let mass: f64 = products.iter().sum();
        for (i, (got, want)) in p.iter().zip(products.iter().map(|x| x / mass)).enumerate() {
            assert_close(*got, want, 1e-6, &format!("{n} options: p[{i}]"));
        }
        assert_close(
            num(&answer(&reply.body, "product")["option_mass"]),
            mass.min(1.0),
            1e-6,
            &format!("{n} options: option_mass"),
        );
        eprintln!("labels: {n} options in {nodes} reads, mass {mass:.4}");
    }
    eprintln!("labels: chain rule checked in {:.2?}", started.elapsed());
}

/// A 255-option choice (numerals 000–254: 30 reads, the root first, then 29 on the prefix
/// cache) is answered with 255 probabilities that sum to 1 and name a label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_255_option_choice_is_answered() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    // The root read evaluates the whole ~10k-token prompt on 2 cores before the other 29
    // nodes reuse it from the prefix cache: allow it more than the default 30 s.
    let service = common::start(llama_config(
        &url,
        &[
            "--max-request-tokens",
            "2000000",
            "--read-timeout-secs",
            "300",
        ],
    ))
    .await;
    let reply = ask(&service, &choice_of(255, None)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let names = labels(255);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let p = check_answer(answer(&reply.body, "product"), "choice", &names);
    assert_eq!(p.len(), 255);
    let requests = reply.body["usage"]["upstream_requests"]
        .as_u64()
        .expect("n");
    assert!(
        (30..=60).contains(&requests),
        "30 node reads (+ fallbacks): {requests}"
    );
    eprintln!(
        "labels: 255 options in {requests} upstream requests, {:.2?}",
        started.elapsed()
    );
}
