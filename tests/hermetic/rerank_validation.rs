//! `POST /v2/rerank` (and `/v1/rerank`) against the fake vLLM server: every rule of the
//! rerank body as one table (each field, each limit, wrong types, empty documents, `top_n`
//! and `max_tokens_per_doc` bounds, the options the service refuses), each refused row with
//! its status, code, `detail[0].loc` and the limit and value in the message, and **no chat
//! request upstream**; then what the front door does with a valid call: one noul per
//! document through the same engine (the scores equal `/v1/systemone`'s answers to the
//! same body), sorted, `top_n` honoured, batches of `--max-questions`, a batch over the
//! token limit halved, truncation reported in `meta.warnings`, both routes counted by name
//! in `/metrics`.

use crate::support;
use std::collections::HashMap;

use serde_json::{json, Value};

use crate::support::fake_vllm::FakeVllm;
use crate::support::{post, Reply, Service};

/// The default wording (`--rerank-question`).
const QUESTION: &str = systemone::config::DEFAULT_RERANK_QUESTION;

/// One row: a body, the service flags, and the refusal it must get.
struct Row {
    name: &'static str,
    body: Value,
    flags: &'static [&'static str],
    status: u16,
    code: &'static str,
    loc: Vec<&'static str>,
    mentions: Vec<&'static str>,
}

fn row(
    name: &'static str,
    body: Value,
    status: u16,
    code: &'static str,
    loc: &[&'static str],
) -> Row {
    Row {
        name,
        body,
        flags: &[],
        status,
        code,
        loc: loc.to_vec(),
        mentions: Vec::new(),
    }
}

impl Row {
    fn mentions(mut self, words: &[&'static str]) -> Self {
        self.mentions.extend(words);
        self
    }
    fn flags(mut self, flags: &'static [&'static str]) -> Self {
        self.flags = flags;
        self
    }
}

/// A valid call with three documents.
fn call() -> Value {
    json!({
        "model": "glm-5.3-flash",
        "query": "How do I get a refund for a double charge?",
        "documents": [
            "Refunds for duplicate charges are issued within five days.",
            "Our office is closed on public holidays.",
            "To report a double charge, open the billing page and click dispute.",
        ],
    })
}

/// `call()` with `field` set to `value` (or removed, for `None`).
fn with(field: &str, value: Option<Value>) -> Value {
    let mut body = call();
    let map = body.as_object_mut().expect("object");
    match value {
        Some(v) => map.insert(field.to_string(), v),
        None => map.remove(field),
    };
    body
}

/// Sends a body to `path` of `service`.
async fn rerank(service: &Service, path: &str, body: &Value) -> Reply {
    post(&service.client, &service.url(path), body).await
}

/// Every way a refused row differs from what it expects.
async fn check(row: &Row, service: &Service, fake: &FakeVllm) -> Vec<String> {
    let mut problems = Vec::new();
    let mut p = |s: String| problems.push(format!("{}: {s}", row.name));
    let before = fake.chat_requests();
    let reply = rerank(service, "/v2/rerank", &row.body).await;
    let sent = fake.chat_requests() - before;
    if reply.status != row.status || reply.body["error"]["code"] != json!(row.code) {
        p(format!(
            "expected {} {}, got {}: {}",
            row.status, row.code, reply.status, reply.text
        ));
    }
    if reply.header("x-systemone-error-code") != Some(row.code) {
        p(format!(
            "header code {:?}",
            reply.header("x-systemone-error-code")
        ));
    }
    let mut loc = vec!["body"];
    loc.extend(&row.loc);
    if row.status == 422 && reply.body["detail"][0]["loc"] != json!(loc) {
        p(format!(
            "detail[0].loc {}, expected {loc:?}",
            reply.body["detail"][0]["loc"]
        ));
    }
    for word in &row.mentions {
        if !reply.message().contains(word) {
            p(format!(
                "message {:?} does not mention {word:?}",
                reply.message()
            ));
        }
    }
    for secret in [
        "refund for a double",
        "Refunds for duplicate",
        "public holidays",
    ] {
        if reply.text.contains(secret) {
            p(format!(
                "the error echoes the caller's text: {}",
                reply.text
            ));
        }
    }
    if sent != 0 {
        p(format!("a refused call sent {sent} chat requests upstream"));
    }
    problems
}

/// Proves every rule of the rerank body refuses its row with its own code, location and
/// message (naming the field, the limit and the value sent), echoes none of the caller's
/// text, and sends nothing upstream.
#[tokio::test]
#[rustfmt::skip]
async fn every_rerank_rule_refuses_before_anything_is_sent() {
    let long_doc = json!(["x".repeat(300)]);
    let rows = vec![
        row("body is an array", json!([call()]), 422, "system_one_invalid_body", &[]).mentions(&["must be a JSON object", "an array"]),
        row("body is a string", json!("rerank"), 422, "system_one_invalid_body", &[]),
        row("model unknown", with("model", Some(json!("rerank-v3.5"))), 422, "system_one_unsupported_model", &["model"]).mentions(&["rerank-v3.5", "glm-5.3-flash"]),
        row("model a number", with("model", Some(json!(3))), 422, "system_one_unsupported_model", &["model"]).mentions(&["must be a string", "a number"]),
        row("query missing", with("query", None), 422, "system_one_invalid_query", &["query"]).mentions(&["query is required"]),
        row("query null", with("query", Some(Value::Null)), 422, "system_one_invalid_query", &["query"]).mentions(&["null"]),
        row("query a number", with("query", Some(json!(7))), 422, "system_one_invalid_query", &["query"]).mentions(&["must be a string", "a number"]),
        row("query an array", with("query", Some(json!(["a"]))), 422, "system_one_invalid_query", &["query"]).mentions(&["an array"]),
        row("query blank", with("query", Some(json!("  \n"))), 422, "system_one_invalid_query", &["query"]).mentions(&["blank"]),
        row("query over the state limit", with("query", Some(json!("q".repeat(200)))), 413, "system_one_state_too_large", &["query"]).flags(&["--max-state-tokens", "100"]).mentions(&["the query", "limit of 100"]),
        row("documents missing", with("documents", None), 422, "system_one_invalid_documents", &["documents"]).mentions(&["documents is required"]),
        row("documents null", with("documents", Some(Value::Null)), 422, "system_one_invalid_documents", &["documents"]).mentions(&["null"]),
        row("documents a string", with("documents", Some(json!("doc"))), 422, "system_one_invalid_documents", &["documents"]).mentions(&["array of strings", "a string"]),
        row("documents an object", with("documents", Some(json!({"text": "doc"}))), 422, "system_one_invalid_documents", &["documents"]).mentions(&["an object"]),
        row("documents empty", with("documents", Some(json!([]))), 422, "system_one_invalid_documents", &["documents"]).mentions(&["1 to 1000", "got 0"]),
        row("a document a number", with("documents", Some(json!(["a", 2]))), 422, "system_one_invalid_documents", &["documents", "1"]).mentions(&["must be a string", "a number"]),
        row("a document an object", with("documents", Some(json!([{"text": "a"}]))), 422, "system_one_invalid_documents", &["documents", "0"]).mentions(&["an object"]),
        row("a document null", with("documents", Some(json!(["a", "b", null]))), 422, "system_one_invalid_documents", &["documents", "2"]).mentions(&["null"]),
        row("too many documents", with("documents", Some(json!(["a", "b", "c", "d"]))), 422, "system_one_too_many_documents", &["documents"]).flags(&["--max-rerank-documents", "3"]).mentions(&["4 documents", "limit of 3"]),
        row("too many documents, default limit", with("documents", Some(json!(vec!["d"; 1001]))), 422, "system_one_too_many_documents", &["documents"]).mentions(&["1001 documents", "limit of 1000"]),
        row("one document over the request limit", with("documents", Some(long_doc)), 413, "system_one_request_too_large", &["documents", "0"]).flags(&["--max-request-tokens", "300"]).mentions(&["reading this document needs", "limit of 300"]),
        row("top_n 0", with("top_n", Some(json!(0))), 422, "system_one_bad_top_n", &["top_n"]).mentions(&["at least 1", "got 0"]),
        row("top_n negative", with("top_n", Some(json!(-2))), 422, "system_one_bad_top_n", &["top_n"]).mentions(&["got -2"]),
        row("top_n a fraction", with("top_n", Some(json!(1.5))), 422, "system_one_bad_top_n", &["top_n"]).mentions(&["got 1.5"]),
        row("top_n 2.0", with("top_n", Some(json!(2.0))), 422, "system_one_bad_top_n", &["top_n"]).mentions(&["got 2.0"]),
        row("top_n a string", with("top_n", Some(json!("2"))), 422, "system_one_bad_top_n", &["top_n"]).mentions(&["got a string"]),
        row("top_n a boolean", with("top_n", Some(json!(true))), 422, "system_one_bad_top_n", &["top_n"]).mentions(&["got a boolean"]),
        row("max_tokens_per_doc 0", with("max_tokens_per_doc", Some(json!(0))), 422, "system_one_bad_max_tokens_per_doc", &["max_tokens_per_doc"]).mentions(&["from 1 to 32768", "got 0"]),
        row("max_tokens_per_doc over the state limit", with("max_tokens_per_doc", Some(json!(32769))), 422, "system_one_bad_max_tokens_per_doc", &["max_tokens_per_doc"]).mentions(&["from 1 to 32768", "got 32769"]),
        row("max_tokens_per_doc over a configured state limit", with("max_tokens_per_doc", Some(json!(101))), 422, "system_one_bad_max_tokens_per_doc", &["max_tokens_per_doc"]).flags(&["--max-state-tokens", "100"]).mentions(&["from 1 to 100", "got 101"]),
        row("max_tokens_per_doc negative", with("max_tokens_per_doc", Some(json!(-1))), 422, "system_one_bad_max_tokens_per_doc", &["max_tokens_per_doc"]).mentions(&["got -1"]),
        row("max_tokens_per_doc a fraction", with("max_tokens_per_doc", Some(json!(10.5))), 422, "system_one_bad_max_tokens_per_doc", &["max_tokens_per_doc"]).mentions(&["got 10.5"]),
        row("max_tokens_per_doc a string", with("max_tokens_per_doc", Some(json!("4096"))), 422, "system_one_bad_max_tokens_per_doc", &["max_tokens_per_doc"]).mentions(&["got a string"]),
        row("relevant_spans enabled", with("relevant_spans", Some(json!({"mode": "enabled"}))), 422, "system_one_unsupported_rerank_option", &["relevant_spans"]).mentions(&["not supported"]),
        row("relevant_spans a string", with("relevant_spans", Some(json!("on"))), 422, "system_one_unsupported_rerank_option", &["relevant_spans"]),
        row("return_documents true", with("return_documents", Some(json!(true))), 422, "system_one_unsupported_rerank_option", &["return_documents"]),
        row("rank_fields", with("rank_fields", Some(json!(["title"]))), 422, "system_one_unsupported_rerank_option", &["rank_fields"]),
        row("query checked before documents", json!({"documents": []}), 422, "system_one_invalid_query", &["query"]),
        row("documents checked before top_n", json!({"query": "q", "documents": 1, "top_n": 0}), 422, "system_one_invalid_documents", &["documents"]),
    ];
    let fake = FakeVllm::start().await;
    let mut services: HashMap<&[&str], Service> = HashMap::new();
    let mut problems = Vec::new();
    for row in &rows {
        if !services.contains_key(row.flags) {
            let service = support::start(support::config(&fake.base_url(), row.flags)).await;
            services.insert(row.flags, service);
        }
        problems.extend(check(row, &services[row.flags], &fake).await);
    }
    assert_eq!(fake.chat_requests(), 0, "no refused row reached the backend");
    assert!(problems.is_empty(), "{} problems in {} rows:\n{}", problems.len(), rows.len(), problems.join("\n"));
}

/// The `/v1/systemone` body that asks what a rerank call asks (docs/api/rerank.md's mapping).
fn systemone_body(query: &str, documents: &[&str]) -> Value {
    let questions: serde_json::Map<String, Value> = (0..documents.len())
        .map(|i| {
            (
                i.to_string(),
                json!({"type": "noul", "instructions": QUESTION}),
            )
        })
        .collect();
    let history: serde_json::Map<String, Value> = documents
        .iter()
        .enumerate()
        .map(|(i, d)| {
            (
                i.to_string(),
                json!(format!("{{\"document\": {}}}", json!(d))),
            )
        })
        .collect();
    json!({"model": "glm-5.3-flash", "state": {"query": query}, "questions": questions,
           "history": history, "layout": "accuracy"})
}

fn results(reply: &Reply) -> Vec<(u64, f64)> {
    reply.body["results"]
        .as_array()
        .unwrap_or_else(|| panic!("results: {}", reply.text))
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().expect("index"),
                r["relevance_score"].as_f64().expect("score"),
            )
        })
        .collect()
}

/// Proves a valid call is one noul per document through the same engine: the scores are
/// exactly `/v1/systemone`'s nouls for the documented body, sorted by score descending,
/// `top_n` honoured, one upstream read per document; `/v1/rerank` answers the same body
/// the same way; both routes are counted by name in `/metrics`; Cohere's `meta` is there.
#[tokio::test]
async fn a_rerank_is_the_nouls_of_the_same_questions_sorted() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let body = call();
    let query = body["query"].as_str().expect("query").to_string();
    let docs: Vec<&str> = body["documents"]
        .as_array()
        .expect("docs")
        .iter()
        .map(|d| d.as_str().expect("str"))
        .collect();

    let before = fake.chat_requests();
    let reply = rerank(&service, "/v2/rerank", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(fake.chat_requests() - before, 3, "one read per document");
    let ranked = results(&reply);
    assert_eq!(ranked.len(), 3);
    assert!(
        ranked.windows(2).all(|w| w[0].1 >= w[1].1),
        "sorted: {ranked:?}"
    );
    let mut indexes: Vec<u64> = ranked.iter().map(|r| r.0).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, [0, 1, 2]);
    assert_eq!(
        reply.body["id"],
        json!(reply.header("x-request-id").expect("id"))
    );
    assert_eq!(reply.body["meta"]["billed_units"]["search_units"], 1);
    assert_eq!(reply.body["meta"]["api_version"]["version"], "2");
    assert!(
        reply.body["meta"]["tokens"]["input_tokens"]
            .as_u64()
            .expect("tokens")
            > 0
    );
    assert!(reply.body["meta"]["cached_tokens"].is_u64());
    assert!(
        reply.body["meta"].get("warnings").is_none(),
        "nothing truncated"
    );
    assert_eq!(reply.body["usage"]["upstream_requests"], 3);

    let direct = support::ask(&service, &systemone_body(&query, &docs)).await;
    assert_eq!(direct.status, 200, "{}", direct.text);
    for (index, score) in &ranked {
        let noul = direct.body["answers"][index.to_string()]["noul"]
            .as_f64()
            .expect("noul");
        assert_eq!(
            *score, noul,
            "document {index}: rerank {score} vs /v1/systemone {noul}"
        );
    }

    let top = rerank(&service, "/v1/rerank", &with("top_n", Some(json!(2)))).await;
    assert_eq!(top.status, 200, "{}", top.text);
    assert_eq!(
        results(&top),
        ranked[..2],
        "/v1/rerank, top_n 2: the two best, same scores"
    );
    let all = rerank(&service, "/v2/rerank", &with("top_n", Some(json!(50)))).await;
    assert_eq!(
        results(&all),
        ranked,
        "top_n over the documents returns them all"
    );

    let metrics = support::metrics(&service).await;
    for route in ["/v2/rerank", "/v1/rerank"] {
        let line =
            format!("systemone_requests_total{{code=\"\",route=\"{route}\",status=\"200\"}}");
        assert!(
            metrics.lines().any(|l| l.starts_with(&line)),
            "{line} in /metrics:\n{metrics}"
        );
    }
    assert!(!metrics.contains("refund"), "no caller text in /metrics");
}

/// Proves long lists are batched: with `--max-questions 3`, seven documents are answered
/// (one request of seven questions would be refused) with one read per document, every
/// index answered once, and the call is observed as one request of seven questions (the
/// histogram of questions per request counts calls, not batches); a batch over
/// `--max-request-tokens` is halved until each part fits (as one batch it is refused); documents over `max_tokens_per_doc` are cut (byte estimate
/// here, no tokenizer) and `meta.warnings` names their indexes, never their text.
#[tokio::test]
async fn long_lists_are_batched_and_long_documents_truncated() {
    let fake = FakeVllm::start().await;
    let service =
        support::start(support::config(&fake.base_url(), &["--max-questions", "3"])).await;
    let docs: Vec<String> = (0..7).map(|i| format!("document number {i}")).collect();
    let body = json!({"query": "which document?", "documents": docs});
    let before = fake.chat_requests();
    let reply = rerank(&service, "/v2/rerank", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(fake.chat_requests() - before, 7);
    let mut indexes: Vec<u64> = results(&reply).iter().map(|r| r.0).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, (0..7).collect::<Vec<u64>>());
    let metrics = support::metrics(&service).await;
    assert!(
        metrics.contains("systemone_questions_per_request_count 1")
            && metrics.contains("systemone_questions_per_request_sum 7"),
        "one call of seven documents:\n{metrics}"
    );

    // Halving: each read is ~730 estimated tokens (bytes); 1,600 fits two, not three.
    let tight = support::start(support::config(
        &fake.base_url(),
        &["--max-request-tokens", "1600"],
    ))
    .await;
    let three = json!({"query": "q", "documents": ["a", "b", "c"]});
    let reply = rerank(&tight, "/v2/rerank", &three).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(results(&reply).len(), 3);
    let metrics = support::metrics(&tight).await;
    assert!(
        metrics.contains("systemone_questions_per_request_count 1")
            && metrics.contains("systemone_questions_per_request_sum 3"),
        "one call of three documents:\n{metrics}"
    );
    let as_one = support::ask(&tight, &systemone_body("q", &["a", "b", "c"])).await;
    assert_eq!(
        as_one.status, 413,
        "as one request the three are over the limit: {}",
        as_one.text
    );

    // Truncation: 40 bytes kept of a 100-byte document.
    let secret = "canary-text-".repeat(9);
    let body =
        json!({"query": "q", "documents": ["short", secret, "tiny"], "max_tokens_per_doc": 40});
    let reply = rerank(&service, "/v2/rerank", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let warnings = reply.body["meta"]["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{}", reply.text);
    let warning = warnings[0].as_str().expect("string");
    assert!(
        warning.contains("max_tokens_per_doc = 40") && warning.contains("indexes 1"),
        "{warning}"
    );
    assert!(!reply.text.contains("canary-text"), "{}", reply.text);
    let heads: Vec<String> = fake
        .chat_bodies()
        .iter()
        .filter_map(|b| {
            b["messages"][0]["content"][0]["text"]
                .as_str()
                .map(str::to_string)
        })
        .filter(|t| t.contains("canary-text-"))
        .collect();
    assert_eq!(heads.len(), 1, "one read of the long document");
    let kept = "canary-text-canary-text-canary-text-cana";
    assert!(
        heads[0].ends_with(&format!("{{\"document\": \"{kept}\"}}")),
        "{}",
        heads[0]
    );
}

/// Proves the prompt layout shares the prefix: every read of one call is the history
/// layout (`docs/layouts.md`), whose cacheable head is preamble, the configured question, the
/// state `{"query": …}` and then the document; the heads of two documents agree up to the
/// document and the question part after it is the same for both.
#[tokio::test]
async fn the_documents_of_one_call_share_the_prompt_head() {
    let fake = FakeVllm::start().await;
    let flags = ["--rerank-question", "Does the document answer the query?"];
    let service = support::start(support::config(&fake.base_url(), &flags)).await;
    let body = json!({"query": "refund?", "documents": ["alpha doc", "beta doc"]});
    let reply = rerank(&service, "/v2/rerank", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let parts: Vec<(String, String)> = fake
        .chat_bodies()
        .iter()
        .map(|b| {
            let content = &b["messages"][0]["content"];
            let text = |i: usize| {
                content[i]["text"]
                    .as_str()
                    .expect("a text part")
                    .to_string()
            };
            (text(0), text(1))
        })
        .collect();
    assert_eq!(parts.len(), 2);
    let shared = "{\"state\": {\"query\": \"refund?\"}}\n\n{\"document\": \"";
    for (head, question) in &parts {
        assert!(head.starts_with(systemone::question::PREAMBLE), "{head}");
        let (lead, document) = head.split_once(shared).unwrap_or_else(|| panic!("{head}"));
        assert!(
            lead.contains("Does the document answer the query?"),
            "{lead}"
        );
        assert!(
            document == "alpha doc\"}" || document == "beta doc\"}",
            "{document}"
        );
        assert!(
            question.starts_with("{\"question\": \"Does the document answer the query?\""),
            "{question}"
        );
    }
    assert_eq!(
        parts[0].1, parts[1].1,
        "the question after the document is the same"
    );
    let common_prefix = parts[0]
        .0
        .chars()
        .zip(parts[1].0.chars())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        common_prefix >= parts[0].0.len() - "alpha doc\"}".len(),
        "shared up to the document"
    );
}
