//! Batch jobs end to end with the official OpenAI Python SDK (`openai` 3.51.0) against the
//! service on a real llama-server (Gemma 3 270M): `client.files.create(purpose="batch")`,
//! `client.batches.create/retrieve/list/cancel` and `client.files.content` work unchanged, and
//! each answered line's body is what `/v1/systemone` answers the same body online.
//!
//! Needs `SYSTEMONE_LLAMA_URL` and `SYSTEMONE_PYTHON` as `scripts/test.sh` exports them.

use serde_json::{json, Value};

use crate::setup::llama::{backend_turn, llama_config};
use crate::setup::sdk::{json_lines, scenario};
use crate::support;

/// Line `i`'s body: a noul and a choice about one of two tickets.
fn body(i: usize) -> Value {
    let ticket = [
        "I was charged twice for my March invoice.",
        "The app crashes when I log in.",
    ];
    json!({
        "state": format!("Customer: {}", ticket[i % 2]),
        "questions": {
            "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
            "team": {"type": "choice", "instructions": "Which team handles it?",
                     "criteria": {"billing": "charges and invoices", "bug": "defects", "other": null}},
        }
    })
}

/// How far a line's probability may sit from the same body asked online on llama-server.
/// Measured: the same body asked twice online agrees exactly, but a batch's lines (one state's
/// lines run one after another) read up to 0.014 away from it, the same for every line of
/// one state, and two lines of one state 0.008 apart: llama-server reuses a slot's cached
/// prefix differently. Why exactly is not established; the hermetic tier compares a line
/// with its online answer byte for byte on a deterministic backend.
const BATCHED_READ: f64 = 0.03;

/// A line's answers are the online answers: the same questions, types, temperatures and
/// choices, every probability within [`BATCHED_READ`].
fn same_answers(line: &Value, online: &Value, i: usize) {
    let (line, online) = (
        line.as_object().expect("answers"),
        online.as_object().expect("answers"),
    );
    assert_eq!(
        line.keys().collect::<Vec<_>>(),
        online.keys().collect::<Vec<_>>(),
        "line t{i}"
    );
    for (id, got) in line {
        let want = &online[id];
        for field in ["type", "temperature", "choice"] {
            assert_eq!(got.get(field), want.get(field), "line t{i} {id} {field}");
        }
        let numbers = |a: &Value| -> Vec<f64> {
            let mut v: Vec<f64> = a["probabilities"].as_object().map_or(Vec::new(), |p| {
                p.values()
                    .map(|x| x.as_f64().expect("a probability"))
                    .collect()
            });
            v.extend(a.get("noul").and_then(Value::as_f64));
            v
        };
        let (g, w) = (numbers(got), numbers(want));
        assert!(
            !g.is_empty() && g.len() == w.len(),
            "line t{i} {id}: {got} vs {want}"
        );
        for (g, w) in g.iter().zip(&w) {
            assert!(
                (g - w).abs() <= BATCHED_READ,
                "line t{i} {id}: {got} vs {want}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_sdk_runs_a_batch_whose_lines_are_the_online_answers() {
    let python = crate::setup::sdk::sdk_python();
    let (url, _turn) = backend_turn().await;
    let dir = support::temp_file("keep", "");
    let dir = dir
        .parent()
        .expect("a folder")
        .to_str()
        .expect("utf-8")
        .to_string();
    // One line at a time, and the online answers asked before the batches start: llama-server
    // batches whatever reads are in flight together, which moves the last digits of a read
    // (a line beside a second batch's line differed from its online answer by up to 0.014).
    let service = support::start(llama_config(
        &url,
        &["--state-dir", &dir, "--batch-concurrency", "1"],
    ))
    .await;
    let mut online = Vec::new();
    for i in 0..4 {
        online.push(support::ask(&service, &body(i)).await.body["answers"].clone());
    }
    let mut file: String = (0..4)
        .map(|i| json!({"custom_id": format!("t{i}"), "method": "POST", "url": "/v1/systemone", "body": body(i)}).to_string() + "\n")
        .collect();
    file.push_str(&json!({"custom_id": "bad", "method": "POST", "url": "/v1/systemone", "body": {"state": "x", "questions": {}}}).to_string());
    let path = support::temp_file("lines.jsonl", &file);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/openai_batches.py");
    let env = vec![
        ("SYSTEMONE_BASE_URL", format!("http://{}", service.addr)),
        ("BATCH_FILE", path.display().to_string()),
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("OPENAI_BASE_URL", String::new()),
    ];
    let stdout = crate::setup::sdk::run_program(python, vec![script.to_string()], env).await;
    let lines = json_lines(&stdout);
    let uploaded = scenario(&lines, "file");
    assert_eq!(
        (uploaded["cls"].as_str(), uploaded["purpose"].as_str()),
        (Some("FileObject"), Some("batch"))
    );
    let batch = scenario(&lines, "batch");
    assert_eq!(batch["cls"], "Batch");
    assert_eq!(batch["status"], "completed", "{batch}");
    assert_eq!(
        batch["counts"],
        json!({"total": 5, "completed": 4, "failed": 1})
    );
    let output = scenario(&lines, "output");
    let answered = output["output"].as_array().expect("lines");
    assert_eq!(answered.len(), 4);
    for line in answered {
        let i: usize = line["custom_id"].as_str().expect("id")[1..]
            .parse()
            .expect("t<i>");
        let online = support::ask(&service, &body(i)).await;
        assert_eq!(line["response"]["status_code"], 200);
        same_answers(
            &line["response"]["body"]["answers"],
            &online.body["answers"],
            i,
        );
    }
    assert_eq!(output["errors"][0]["custom_id"], "bad");
    assert_eq!(output["errors"][0]["response"]["status_code"], 422);
    assert_eq!(scenario(&lines, "listed")["ids"][0], batch["id"]);
    let cancel = scenario(&lines, "cancel");
    assert!(
        ["cancelled", "completed"].contains(&cancel["status"].as_str().unwrap_or("")),
        "{cancel}"
    );
}
