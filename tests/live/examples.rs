//! The client snippets under `examples/`, exercised so they cannot rot: each runs unchanged
//! (`examples/python/*.py` with `$SYSTEMONE_PYTHON`, `examples/node/*.cjs` with node and
//! `NODE_PATH` from `$SYSTEMONE_NPM_SDK`) against the service on the fake vLLM, behind a
//! key, and prints exactly the answers the service gives the same request over plain HTTP.
//! Without `SYSTEMONE_PYTHON` or `SYSTEMONE_NPM_SDK` (exported by `scripts/test.sh`) each
//! fails at once naming the script that provides it; none skips. The registry and keys
//! files under `examples/` are exercised in the hermetic tier (`tests/hermetic/examples.rs`).

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::setup::sdk::{node, npm_sdk, run_program, sdk_python};
use crate::support;
use crate::support::fake_vllm::FakeVllm;
use crate::support::{ask_as, Reply, Service};

// ---------------------------------------------------------------------------------------
// The client snippets.
// ---------------------------------------------------------------------------------------

/// The key the snippets' service requires (`--api-keys`).
const SNIPPET_KEY: &str = "sk-examples-snippets";
/// The model the fake vLLM serves.
const SNIPPET_MODEL: &str = "glm-5.3-flash";

/// The service on the fake vLLM behind [`SNIPPET_KEY`].
async fn snippet_service() -> (FakeVllm, Service) {
    support::setup(&["--api-keys", SNIPPET_KEY]).await
}

/// The environment a snippet reads.
fn snippet_env(service: &Service) -> Vec<(&'static str, String)> {
    vec![
        ("SYSTEMONE_BASE_URL", service.url("")),
        ("SYSTEMONE_API_KEY", SNIPPET_KEY.into()),
        ("SYSTEMONE_MODEL", SNIPPET_MODEL.into()),
    ]
}

/// Runs `examples/<file>` with `program` and the snippet environment (plus `extra`).
async fn run_snippet(
    program: PathBuf,
    file: &str,
    service: &Service,
    extra: Vec<(&'static str, String)>,
) -> String {
    let mut env = snippet_env(service);
    env.extend(extra);
    run_program(program, vec![format!("examples/{file}")], env).await
}

/// A number as the snippets print it.
fn f3(v: &Value) -> String {
    format!(
        "{:.3}",
        v.as_f64().unwrap_or_else(|| panic!("a number: {v}"))
    )
}

/// `name p, name p, …` over a `{key: p}` map, each key renamed by `label`.
fn listing(probabilities: &Value, label: impl Fn(&str) -> String) -> String {
    probabilities
        .as_object()
        .expect("probabilities")
        .iter()
        .map(|(k, p)| format!("{} {}", label(k), f3(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Asserts every line of `expected` is a line of `stdout`.
fn assert_lines(stdout: &str, expected: &[String]) {
    let printed: Vec<&str> = stdout.lines().map(str::trim_end).collect();
    for line in expected {
        assert!(
            printed.contains(&line.as_str()),
            "the snippet printed no line {line:?}:\n{stdout}"
        );
    }
}

/// What the TypeSafe snippets (Python and npm) must print: the answers of `/v1/systemone`
/// to the same request over plain HTTP.
async fn typesafe_expected(service: &Service) -> Vec<String> {
    let body = json!({
        "model": SNIPPET_MODEL,
        "state": "A customer writes: I was charged twice for the same transfer on Monday.",
        "questions": {
            "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
            "team": {"type": "choice", "instructions": "Which team should handle this?",
                     "criteria": {"payments": "wrong or duplicate charges",
                                  "technical": "app and login problems", "human": null}},
            "urgency": {"type": "score", "instructions": "How urgent is it?",
                        "criteria": ["Routine", "Soon", "Immediate"]},
        },
    });
    let reply = ask_as(service, Some(SNIPPET_KEY), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let a = &reply.body["answers"];
    let legend = &a["urgency"]["legend"];
    vec![
        format!("model: {}", reply.body["model"].as_str().expect("model")),
        format!("refund: noul {}", f3(&a["refund"]["noul"])),
        format!(
            "team: choice {} ({})",
            a["team"]["choice"].as_str().expect("choice"),
            listing(&a["team"]["probabilities"], str::to_string)
        ),
        format!(
            "urgency: score {} ({})",
            f3(&a["urgency"]["score"]),
            listing(&a["urgency"]["probabilities"], |k| legend[k]
                .as_str()
                .expect("legend")
                .to_string())
        ),
    ]
}

/// `examples/python/typesafe_system_one.py` (the TypeSafe Python SDK, `typesafe-sdk`
/// 0.7.5) runs unchanged and prints the noul, choice and score the service answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typesafe_python_snippet_prints_the_answers() {
    let python = sdk_python();
    let (fake, service) = snippet_service().await;
    let stdout = run_snippet(python, "python/typesafe_system_one.py", &service, vec![]).await;
    assert_eq!(fake.chat_requests(), 3, "one read per question");
    assert_lines(&stdout, &typesafe_expected(&service).await);
}

/// `examples/node/typesafe_system_one.cjs` (the npm SDK `@typesafe-ai/sdk` 0.6.0, run with
/// node and `NODE_PATH` into `$SYSTEMONE_NPM_SDK`) prints the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typesafe_node_snippet_prints_the_answers() {
    let modules = npm_sdk().join("node_modules");
    let (fake, service) = snippet_service().await;
    let stdout = run_snippet(
        node(),
        "node/typesafe_system_one.cjs",
        &service,
        vec![("NODE_PATH", modules.display().to_string())],
    )
    .await;
    assert_eq!(fake.chat_requests(), 3, "one read per question");
    assert_lines(&stdout, &typesafe_expected(&service).await);
}

/// `examples/python/openai_decisions.py` (`openai` 3.51.0, `client.decisions.create`)
/// prints the predicate, choice and score `/v1/decisions` answers to the same body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_decisions_snippet_prints_the_answers() {
    let python = sdk_python();
    let (_fake, service) = snippet_service().await;
    let stdout = run_snippet(python, "python/openai_decisions.py", &service, vec![]).await;
    let body = json!({
        "model": SNIPPET_MODEL,
        "input": "I was charged twice; please refund the extra charge.",
        "questions": [
            {"type": "predicate", "name": "refund", "instructions": "Does the customer ask for a refund?"},
            {"type": "choice", "name": "team", "instructions": "Which team should handle this?",
             "choices": [{"value": "billing", "description": "charges and refunds"}, {"value": "bug"}, {"value": "other"}]},
            {"type": "score", "name": "urgency", "instructions": "How urgent is it?",
             "levels": [{"label": "routine"}, {"label": "soon", "description": "within a day"}, {"label": "now"}]},
        ],
    });
    let reply = post_as(&service, "/v1/decisions", &body).await;
    let a = reply.body["answers"].as_array().expect("answers");
    let list = |answer: &Value, key: &str| {
        answer["probabilities"]
            .as_array()
            .expect("probabilities")
            .iter()
            .map(|p| {
                format!(
                    "{} {}",
                    p[key].as_str().expect("label"),
                    f3(&p["probability"])
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let expected = vec![
        format!("model: {}", reply.body["model"].as_str().expect("model")),
        format!("refund: predicate {}", f3(&a[0]["probability"])),
        format!(
            "team: choice {} ({})",
            a[1]["choice"].as_str().expect("choice"),
            list(&a[1], "value")
        ),
        format!(
            "urgency: score {} ({})",
            f3(&a[2]["score"]),
            list(&a[2], "label")
        ),
    ];
    assert_lines(&stdout, &expected);
}

/// `examples/python/cohere_rerank.py` (`cohere` 7.3.1, `ClientV2.rerank`) prints the two
/// best documents in `/v2/rerank`'s order with their scores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cohere_rerank_snippet_prints_the_ranking() {
    let python = sdk_python();
    let (_fake, service) = snippet_service().await;
    let stdout = run_snippet(python, "python/cohere_rerank.py", &service, vec![]).await;
    let documents = [
        "Refunds take five days to reach your card.",
        "We are closed on Sundays.",
        "Open a dispute in the app to get your money back.",
    ];
    let body = json!({"model": SNIPPET_MODEL, "query": "How do I get a refund?",
                      "documents": documents, "top_n": 2});
    let reply = post_as(&service, "/v2/rerank", &body).await;
    let results = reply.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    let expected: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(rank, r)| {
            let index = r["index"].as_u64().expect("index");
            let doc = documents[usize::try_from(index).expect("index")];
            format!(
                "{}. document {index} ({}): {doc}",
                rank + 1,
                f3(&r["relevance_score"])
            )
        })
        .collect();
    assert_lines(&stdout, &expected);
}

/// POSTs `body` to `path` with the snippets' key; asserts a 200.
async fn post_as(service: &Service, path: &str, body: &Value) -> Reply {
    let response = service
        .client
        .post(service.url(path))
        .bearer_auth(SNIPPET_KEY)
        .json(body)
        .send()
        .await
        .expect("service answers");
    let reply = Reply::read(response).await;
    assert_eq!(reply.status, 200, "{path}: {}", reply.text);
    reply
}

// ---------------------------------------------------------------------------------------
// The book's Python snippets.
// ---------------------------------------------------------------------------------------

/// The ```` ```python ```` blocks of the README and of every page under `docs/` (the built
/// book under `docs/book/` left out), each with the page it is on.
fn book_python_blocks() -> Vec<(PathBuf, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read docs/") {
            let path = entry.expect("entry").path();
            if path.is_dir() && !path.ends_with("book") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut blocks = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("read a page");
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim_start() == "```python" {
                let code: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
                blocks.push((page.clone(), code.join("\n")));
            }
        }
    }
    blocks
}

/// Every Python snippet of the README and the book runs with the official SDKs against the
/// service (on the fake vLLM, behind a key) and prints something: the page's base URL, key
/// and model are replaced by the test service's, nothing else. A snippet whose SDK call or
/// field access no longer matches the service fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_python_snippet_of_the_book_runs_against_the_service() {
    let python = sdk_python();
    let (_fake, service) = snippet_service().await;
    let base = service.url("");
    let base = base.trim_end_matches('/');
    let blocks = book_python_blocks();
    assert!(
        blocks.len() >= 3,
        "the book's Python snippets: {}",
        blocks.len()
    );
    for (page, code) in blocks {
        let code = code
            .replace("http://localhost:8080", base)
            .replace("http://127.0.0.1:8080", base)
            .replace("\"sk-...\"", &format!("\"{SNIPPET_KEY}\""))
            .replace("\"gemma-3-270m\"", &format!("\"{SNIPPET_MODEL}\""));
        let env = vec![
            ("TYPESAFE_BASE_URL", base.to_string()),
            ("TYPESAFE_API_KEY", SNIPPET_KEY.to_string()),
            ("TYPESAFE_DEFAULT_MODEL", SNIPPET_MODEL.to_string()),
        ];
        let stdout = run_program(python.clone(), vec!["-c".into(), code], env).await;
        assert!(
            !stdout.trim().is_empty(),
            "{}: the snippet printed nothing",
            page.display()
        );
    }
}
