//! `GET /openapi.json` (issue 17): the description is valid OpenAPI 3.1 by a real validator
//! (`openapi-spec-validator`), names exactly the routes the service answers, and the real
//! answers of every route (200s and refusals, on the fake vLLM) match the schema it gives
//! for their status; then Schemathesis, reading the description, fuzzes the service on the
//! fake backend for a bounded number of cases: no 5xx, every status and body as described.
//!
//! Needs `SYSTEMONE_PYTHON`: a Python with `openapi-spec-validator` and `schemathesis`
//! installed (`scripts/test.sh` installs them into `.venv`). Without it the tests fail with
//! a message that says so; they never skip.

use crate::support;
use serde_json::{json, Value};

use crate::support::fake_vllm::FakeVllm;
use crate::support::{post, Reply, Service};

/// Every route, as (method, path): what the description must hold, no more, no less.
const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/systemone"),
    ("post", "/v1/decisions"),
    ("post", "/v2/rerank"),
    ("post", "/v1/rerank"),
    ("get", "/v1/models"),
    ("get", "/v1/usage"),
    ("get", "/v1/ledger/decisions"),
    ("get", "/v1/ledger/decisions/{request_id}"),
    ("post", "/v1/ledger/decisions/{request_id}/outcomes"),
    ("get", "/v1/calibration"),
    ("get", "/v1/calibration/charts"),
    ("post", "/v1/files"),
    ("get", "/v1/files"),
    ("get", "/v1/files/{file_id}"),
    ("delete", "/v1/files/{file_id}"),
    ("get", "/v1/files/{file_id}/content"),
    ("post", "/v1/batches"),
    ("get", "/v1/batches"),
    ("get", "/v1/batches/{batch_id}"),
    ("post", "/v1/batches/{batch_id}/cancel"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/playground"),
    ("get", "/calibration"),
    ("get", "/"),
];

async fn description(service: &Service) -> Value {
    let reply = service
        .client
        .get(service.url("/openapi.json"))
        .send()
        .await
        .expect("service answers");
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.headers()["content-type"], "application/json");
    reply.json().await.expect("JSON")
}

fn python() -> std::path::PathBuf {
    crate::setup::sdk::sdk_python()
}

/// Proves the served description is OpenAPI 3.1 that a real validator accepts, that it
/// describes exactly [`ROUTES`], and that each described operation is answered by the
/// router (never the router's 404 or a 405), while a path it does not describe is a 404.
#[tokio::test]
async fn the_description_is_valid_and_names_every_route() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let doc = description(&service).await;
    assert_eq!(doc["openapi"], "3.1.0");
    let file = support::temp_file("openapi.json", &doc.to_string());
    let out = crate::setup::sdk::run_program(
        python(),
        vec![
            "-m".into(),
            "openapi_spec_validator".into(),
            file.to_str().expect("utf-8").into(),
        ],
        vec![],
    )
    .await;
    assert!(out.contains("OK"), "openapi-spec-validator: {out}");

    let mut described: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            described.push((method.clone(), path.clone()));
        }
    }
    let mut want: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    described.sort();
    want.sort();
    assert_eq!(described, want, "the description names exactly the routes");
    for (method, path) in ROUTES {
        let request = match *method {
            "post" => service.client.post(service.url(path)).json(&json!({})),
            "delete" => service.client.delete(service.url(path)),
            _ => service.client.get(service.url(path)),
        };
        let response = request.send().await.expect("answers");
        let status = response.status().as_u16();
        // The ledger's routes answer 404 with codes of their own (the ledger is off here,
        // and `{request_id}` names no record): only the router's own 404 means unrouted.
        let code = response
            .headers()
            .get("x-systemone-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(
            !(status == 404 && code == "system_one_not_found") && status != 405,
            "{method} {path} is described but answered {status} {code}"
        );
    }
    let unknown = service
        .client
        .get(service.url("/v1/nothing"))
        .send()
        .await
        .expect("answers");
    assert_eq!(unknown.status(), 404);
}

/// Checks every `(method, path, reply)` against the schema the description gives that
/// operation for the reply's status, with jsonschema's Draft 2020-12 validator
/// (`tests/tools/validate_responses.py`); fails listing every answer off its schema.
async fn check_against(doc: &Value, answers: &[(&str, &str, Reply)]) {
    let answers: Vec<Value> = answers
        .iter()
        .map(|(method, path, r)| json!({"method": method, "path": path, "status": r.status, "body": r.body}))
        .collect();
    let file = support::temp_file(
        "answers.json",
        &json!({"description": doc, "answers": answers}).to_string(),
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/tools/validate_responses.py"
    );
    let out = crate::setup::sdk::run_program(
        python(),
        vec![script.into(), file.to_str().expect("utf-8").into()],
        vec![],
    )
    .await;
    assert!(
        out.contains(&format!("{} answers checked, 0 problems", answers.len())),
        "{out}"
    );
}

async fn get(service: &Service, path: &str) -> Reply {
    Reply::read(
        service
            .client
            .get(service.url(path))
            .send()
            .await
            .expect("answers"),
    )
    .await
}

/// Proves real answers match the description: a `/v1/systemone` answer with a choice, a
/// noul and a score (with `option_mass`) and one with a calibration-free 1-option choice
/// (no `option_mass`); `/v1/decisions`' predicate, typed choice and score; `/v2/rerank`
/// and `/v1/rerank` (with truncation warnings); `/v1/models`, `/healthz`, `/readyz`; and
/// the refusals: a 422 with `detail`, a 413, a 400 on `/v1/decisions` with `param`, a
/// 401 and a 403 in both shapes.
#[tokio::test]
async fn real_answers_match_their_schemas() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(
        &fake.base_url(),
        &["--max-state-tokens", "50"],
    ))
    .await;
    let doc = description(&service).await;
    let mut answers: Vec<(&str, &str, Reply)> = Vec::new();
    let mut check = |method: &'static str, path: &'static str, reply: Reply, status: u16| {
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.text);
        answers.push((method, path, reply));
    };

    let systemone = json!({"state": {"ticket": "charged twice"}, "questions": {
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "bug": null}},
        "refund": {"type": "noul", "instructions": "Refund?"},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", {"label": "high"}]},
        "only": {"type": "choice", "instructions": "One way", "criteria": {"yes": null}}}});
    check(
        "post",
        "/v1/systemone",
        support::ask(&service, &systemone).await,
        200,
    );
    let mut bad = systemone.clone();
    bad["permutations"] = json!(9);
    check(
        "post",
        "/v1/systemone",
        support::ask(&service, &bad).await,
        422,
    );
    let long = json!({"state": "word ".repeat(40), "questions": {"q": {"type": "noul", "instructions": "?"}}});
    check(
        "post",
        "/v1/systemone",
        support::ask(&service, &long).await,
        413,
    );

    let decision = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "charged twice"}]}],
        "questions": [
            {"type": "predicate", "name": "refund", "instructions": "Refund?"},
            {"type": "choice", "instructions": "Escalate?", "choices": [{"value": true}, {"value": "later"}]},
            {"type": "score", "name": "urgency", "instructions": "How urgent?", "levels": [{"label": "low"}, {"label": "high", "description": "today"}]}]});
    let url = service.url("/v1/decisions");
    check(
        "post",
        "/v1/decisions",
        post(&service.client, &url, &decision).await,
        200,
    );
    let one_choice = json!({"input": "x", "questions": [{"type": "choice", "instructions": "?", "choices": [{"value": "a"}]}]});
    check(
        "post",
        "/v1/decisions",
        post(&service.client, &url, &one_choice).await,
        400,
    );

    let rerank = json!({"query": "refund?", "documents": ["refunds take five days", "closed on sundays ".repeat(5)], "max_tokens_per_doc": 20});
    for path in ["/v2/rerank", "/v1/rerank"] {
        check(
            "post",
            path,
            post(&service.client, &service.url(path), &rerank).await,
            200,
        );
    }
    check(
        "post",
        "/v2/rerank",
        post(
            &service.client,
            &service.url("/v2/rerank"),
            &json!({"query": "q"}),
        )
        .await,
        422,
    );
    check("get", "/v1/models", get(&service, "/v1/models").await, 200);
    check("get", "/v1/usage", get(&service, "/v1/usage").await, 200);
    check(
        "get",
        "/v1/usage",
        get(&service, "/v1/usage?from=yesterday").await,
        422,
    );
    check("get", "/healthz", get(&service, "/healthz").await, 200);
    let ready = get(&service, "/readyz").await;
    let ready_status = ready.status;
    check("get", "/readyz", ready, ready_status);

    let keyed = support::start(support::config(
        &fake.base_url(),
        &["--api-keys", "sk-openapi-test"],
    ))
    .await;
    check(
        "post",
        "/v1/systemone",
        support::ask_as(&keyed, Some("sk-wrong"), &systemone).await,
        401,
    );
    check(
        "post",
        "/v1/systemone",
        support::ask_as(&keyed, None, &systemone).await,
        403,
    );
    let no_key = post(&keyed.client, &keyed.url("/v1/decisions"), &decision).await;
    assert!(no_key.body["error"]["param"].is_null(), "{}", no_key.text);
    check("post", "/v1/decisions", no_key, 403);
    check("get", "/v1/models", get(&keyed, "/v1/models").await, 403);

    // The ledger's routes, on a service with one (an SQLite file), and off.
    let db = support::ledger::LedgerDb::new(support::ledger::Backend::Sqlite).await;
    let flags = db.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let ledgered =
        support::ledger::start_with_ledger(support::config(&fake.base_url(), &flags)).await;
    let id = support::ask(&ledgered, &systemone).await;
    let id = id.header("x-request-id").expect("a request id").to_owned();
    let page = get(&ledgered, "/v1/ledger/decisions?question=team&label=bug").await;
    check("get", "/v1/ledger/decisions", page, 200);
    let bad_query = get(&ledgered, "/v1/ledger/decisions?limit=0").await;
    check("get", "/v1/ledger/decisions", bad_query, 422);
    let off = get(&service, "/v1/ledger/decisions").await;
    check("get", "/v1/ledger/decisions", off, 404);
    let one = get(&ledgered, &format!("/v1/ledger/decisions/{id}")).await;
    check("get", "/v1/ledger/decisions/{request_id}", one, 200);
    let outcomes = ledgered.url(&format!("/v1/ledger/decisions/{id}/outcomes"));
    let outcome = json!({"question": "team", "outcome": "bug", "note": "checked"});
    let path = "/v1/ledger/decisions/{request_id}/outcomes";
    check(
        "post",
        path,
        post(&ledgered.client, &outcomes, &outcome).await,
        201,
    );
    check(
        "post",
        path,
        post(&ledgered.client, &outcomes, &outcome).await,
        409,
    );
    let wrong = json!({"question": "refund", "outcome": 3});
    check(
        "post",
        path,
        post(&ledgered.client, &outcomes, &wrong).await,
        422,
    );
    // The calibration watch's figures and charts, over the answer and its outcome.
    for path in ["/v1/calibration", "/v1/calibration/charts"] {
        check(
            "get",
            path,
            get(&ledgered, &format!("{path}?window=hour")).await,
            200,
        );
        check(
            "get",
            path,
            get(&ledgered, &format!("{path}?window=year")).await,
            422,
        );
    }
    check_against(&doc, &answers).await;
}

/// Proves a property-based fuzzer reading the description (Schemathesis, positive and
/// negative cases, a fixed seed and a bounded number of examples per operation) finds no
/// 5xx, no undocumented status, no wrong content type and no body off its schema, against
/// the service on the fake backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_nothing_off_the_description() {
    let fake = FakeVllm::start().await;
    // With a ledger (an SQLite file), so its routes are fuzzed past `system_one_ledger_off`.
    let db = support::ledger::LedgerDb::new(support::ledger::Backend::Sqlite).await;
    let flags = db.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let service =
        support::ledger::start_with_ledger(support::config(&fake.base_url(), &flags)).await;
    let schemathesis = python().with_file_name("schemathesis");
    let root = format!("http://{}", service.addr);
    let args: Vec<String> = [
        "run",
        &format!("{root}/openapi.json"),
        "--checks",
        "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        "--max-examples",
        "40",
        "--seed",
        "17",
        "--generation-database",
        "none",
        "--workers",
        "2",
        "--no-color",
        "--request-timeout",
        "30",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let env = vec![("NO_PROXY", "127.0.0.1,localhost".to_string())];
    let out = crate::setup::sdk::run_program(schemathesis, args, env).await;
    assert!(out.contains("passed"), "schemathesis:\n{out}");
    let summary: Vec<&str> = out.lines().rev().take(12).collect();
    eprintln!(
        "schemathesis, last lines:\n{}",
        summary.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    assert!(
        fake.chat_requests() > 0,
        "some fuzzed request reached the backend:\n{out}"
    );
}
