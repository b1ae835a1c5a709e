//! The official Cohere Python SDK (`cohere` 7.3.1, `ClientV2(base_url=…, api_key=…)`) calls
//! `rerank` on the service in front of a real llama.cpp `llama-server` serving Gemma 3 270M,
//! and parses what comes back; the scores are the noul answers `/v1/systemone` gives to the
//! same questions (docs/api/rerank.md's mapping), to `setup::SAME_READ` (two requests' reads of the
//! same prompts).
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: a llama-server with Gemma 3 270M, ending in `/v1`;
//! * `SYSTEMONE_PYTHON`: a Python with `cohere==7.3.1` installed;
//! * `SYSTEMONE_TOKENIZERS`: the real Gemma 3 `tokenizer.json` (truncation counts with it).
//!
//! Without them the test fails with a message that says so; it never skips.

use crate::support;
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::setup::assert_same_read;
use crate::setup::llama::{backend_turn, llama_config, MODEL};
use crate::setup::sdk::scenario;
use crate::setup::tokenizers::tokenizer_path;
use crate::support::Service;
use systemone::config::DEFAULT_RERANK_QUESTION;
use systemone::models::tokens::build::LoadedTokenizer;
use systemone::models::tokens::TokenCounter;

const QUERY: &str = "How do I get my money back for a double charge?";
const DOCUMENTS: [&str; 5] = [
    "Refunds for duplicate card charges are issued within five business days once you open a dispute on the billing page.",
    "Our office is closed on public holidays.",
    "Paris.",
    "To report a charge you do not recognise, open the billing page, pick the charge and press dispute; the money returns to your card.",
    "The cafeteria serves soup on Tuesdays.",
];
/// What the SDK script asks as `max_tokens_per_doc` in its `truncated` scenario.
const TRUNCATE_AT: usize = 8;

/// `(index, relevance_score)` as the SDK parsed them.
fn results(line: &Value) -> Vec<(usize, f64)> {
    line["results"]
        .as_array()
        .unwrap_or_else(|| panic!("results: {line}"))
        .iter()
        .map(|r| {
            assert_eq!(r["type"], "V2RerankResponseResultsItem", "{r}");
            let index = r["index"].as_u64().expect("index") as usize;
            (index, r["relevance_score"].as_f64().expect("score"))
        })
        .collect()
}

/// The noul answers of `/v1/systemone` for the body a rerank of `documents` maps to.
async fn nouls(service: &Service, documents: &[String]) -> Vec<f64> {
    let mut questions = Map::new();
    let mut history = Map::new();
    for (i, doc) in documents.iter().enumerate() {
        questions.insert(
            i.to_string(),
            json!({"type": "noul", "instructions": DEFAULT_RERANK_QUESTION}),
        );
        history.insert(
            i.to_string(),
            json!(format!("{{\"document\": {}}}", json!(doc))),
        );
    }
    let body = json!({"model": MODEL, "state": {"query": QUERY}, "questions": questions,
                      "history": history, "layout": "accuracy"});
    let reply = support::ask(service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    (0..documents.len())
        .map(|i| {
            reply.body["answers"][i.to_string()]["noul"]
                .as_f64()
                .expect("noul")
        })
        .collect()
}

/// Asserts the SDK's results are every document (or the best `n`), sorted by score
/// descending, each score `/v1/systemone`'s noul for that document (two requests' reads:
/// `assert_same_read`).
fn check_ranking(got: &[(usize, f64)], nouls: &[f64], n: usize) {
    assert_eq!(got.len(), n, "{got:?}");
    assert!(got.windows(2).all(|w| w[0].1 >= w[1].1), "sorted: {got:?}");
    for (index, score) in got {
        let want = nouls[*index];
        assert_same_read(
            *score,
            want,
            &format!("document {index}: rerank vs /v1/systemone noul"),
        );
    }
    let mut best: Vec<(usize, f64)> = nouls.iter().copied().enumerate().collect();
    best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let want: Vec<usize> = best.iter().take(n).map(|b| b.0).collect();
    let order: Vec<usize> = got.iter().map(|g| g.0).collect();
    assert_eq!(order, want, "the order of /v1/systemone's nouls");
}

/// Proves the official Cohere SDK's `ClientV2.rerank` works unchanged against the service
/// on Gemma 3 270M: a `V2RerankResponse` whose results are sorted by `relevance_score`,
/// `top_n` honoured, `meta.billed_units.search_units` and `meta.cached_tokens` parsed, and
/// every score equal (to `SAME_READ`) to the noul `/v1/systemone` answers
/// for the same question, state and document; with `max_tokens_per_doc` the long documents
/// are cut by the real Gemma 3 tokenizer (the scores are then the nouls of the cut
/// documents) and `meta.warnings` says which; an empty list is the SDK's
/// `UnprocessableEntityError` carrying `system_one_invalid_documents`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_cohere_sdk_reranks_with_the_nouls_of_the_same_questions() {
    let python = crate::setup::sdk::sdk_python();
    let gemma = tokenizer_path("gemma3");
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let flags = [
        "--cache-prompt",
        "false",
        "--tokenizer",
        gemma.to_str().expect("utf-8"),
    ];
    let service = support::start(llama_config(&url, &flags)).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/cohere_rerank.py");
    let env = vec![
        ("SYSTEMONE_BASE_URL", format!("http://{}", service.addr)),
        ("RERANK_MODEL", MODEL.to_string()),
        ("RERANK_QUERY", QUERY.to_string()),
        ("RERANK_DOCUMENTS", json!(DOCUMENTS).to_string()),
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("CO_API_URL", String::new()),
    ];
    let stdout = crate::setup::sdk::run_program(python, vec![script.to_string()], env).await;
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();

    let docs: Vec<String> = DOCUMENTS.iter().map(|d| d.to_string()).collect();
    let direct = nouls(&service, &docs).await;
    let all = scenario(&lines, "all");
    assert_eq!(all["type"], "V2RerankResponse", "{all}");
    assert!(
        all["id"].as_str().is_some_and(|id| id.starts_with("req_")),
        "{all}"
    );
    assert_eq!(all["search_units"], 1.0, "{all}");
    assert!(all["cached_tokens"].is_number(), "{all}");
    assert!(
        all["warnings"].is_null(),
        "nothing truncated at 4096: {all}"
    );
    check_ranking(&results(all), &direct, DOCUMENTS.len());
    check_ranking(&results(scenario(&lines, "top3")), &direct, 3);

    // max_tokens_per_doc 8, counted and cut by the real tokenizer.
    let counter =
        TokenCounter::Tokenizer(LoadedTokenizer::from_file(&gemma).expect("loads").into());
    let cut: Vec<usize> = (0..docs.len())
        .filter(|i| counter.count(&docs[*i]) > TRUNCATE_AT)
        .collect();
    assert_eq!(cut, [0, 3], "the two long documents");
    let truncated: Vec<String> = docs
        .iter()
        .map(|d| counter.truncate(d, TRUNCATE_AT).unwrap_or(d).to_string())
        .collect();
    assert!(truncated.iter().all(|d| counter.count(d) <= TRUNCATE_AT));
    assert_eq!(truncated[2], "Paris.", "a short document is kept whole");
    let short = scenario(&lines, "truncated");
    let warning = short["warnings"][0]
        .as_str()
        .unwrap_or_else(|| panic!("warnings: {short}"));
    assert!(
        warning.contains("max_tokens_per_doc = 8") && warning.contains("indexes 0, 3"),
        "{warning}"
    );
    check_ranking(
        &results(short),
        &nouls(&service, &truncated).await,
        DOCUMENTS.len(),
    );

    let invalid = scenario(&lines, "invalid");
    assert_eq!(invalid["raised"], "UnprocessableEntityError", "{invalid}");
    assert_eq!(invalid["status"], 422);
    assert_eq!(
        invalid["body"]["error"]["code"],
        "system_one_invalid_documents"
    );
    eprintln!(
        "rerank: 4 scenarios through the Cohere SDK and 2 /v1/systemone checks in {:.2?}",
        started.elapsed()
    );
}
