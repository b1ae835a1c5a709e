//! The official OpenAI Python SDK (`openai` 3.51.0, `OpenAI(base_url=…/v1)`) calls
//! `client.decisions.create` on the service in front of a real llama.cpp `llama-server`
//! serving Gemma 3 270M, and parses what comes back; every probability is what
//! `/v1/systemone` answers for the same questions (docs/api/decisions.md's mapping), to
//! `setup::SAME_READ` (two requests' reads of the same prompts).
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: a llama-server with Gemma 3 270M, ending in `/v1`;
//! * `SYSTEMONE_PYTHON`: a Python with `openai==3.51.0` installed.
//!
//! Without them the test fails with a message that says so; it never skips.

use crate::support;
use std::time::Instant;

use serde_json::{json, Value};

use crate::setup::assert_same_read;
use crate::setup::llama::{backend_turn, llama_config, MODEL};
use crate::setup::sdk::scenario;
use crate::support::Service;

/// The SDK script's questions (`tests/sdk/openai_decisions.py`) as `/v1/systemone` asks
/// them: question `i` is `"i"`, a predicate a noul, boolean values the labels `true` and
/// `false`, a score's levels the label or `{label, description}`.
fn systemone_questions() -> Value {
    json!({
        "0": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "1": {"type": "choice", "instructions": "Which team should handle this ticket?",
              "criteria": {"billing": "charges, invoices and refunds", "bug": null, "other": "anything else"}},
        "2": {"type": "choice", "instructions": "Should a human look at this today?",
              "criteria": {"true": null, "false": null}},
        "3": {"type": "score", "instructions": "How urgent is this ticket?",
              "criteria": ["routine", {"label": "soon", "description": "within a day"}, "immediate"]},
        "4": {"type": "noul", "instructions": "Is the customer angry?"},
    })
}

const INPUT: &str =
    "Customer: I was charged twice for my March invoice and I want the extra charge refunded today.";

/// The messages input of the `messages` scenario, as the state it becomes.
fn messages_state() -> Value {
    json!([
        {"role": "system", "content": "Tickets come from the support inbox."},
        {"role": "user", "content": ["Please look at my account.", {"plan": "pro", "open_invoices": 2}]},
    ])
}

/// `/v1/systemone`'s answers for `state` and `questions`.
async fn systemone(service: &Service, state: Value, questions: Value) -> Value {
    let reply = support::ask(
        service,
        &json!({"model": MODEL, "state": state, "questions": questions}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["answers"].clone()
}

/// `/v1/decisions`' number `a` is `/v1/systemone`'s `b`: two requests' reads of the same
/// prompt (`assert_same_read`).
fn close(a: &Value, b: &Value, what: &str) {
    let (a, b) = (
        a.as_f64().unwrap_or_else(|| panic!("{what}: {a}")),
        b.as_f64().unwrap_or_else(|| panic!("{what}: {b}")),
    );
    assert_same_read(a, b, &format!("{what}: decisions vs /v1/systemone"));
}

/// The probabilities of a parsed choice or score answer, in order.
fn listed(answer: &Value) -> Vec<Value> {
    answer["probabilities"]
        .as_array()
        .unwrap_or_else(|| panic!("probabilities: {answer}"))
        .iter()
        .map(|p| p["probability"].clone())
        .collect()
}

/// Checks the `decide` scenario's parsed `Decision` against `/v1/systemone`'s answers.
fn check_decide(decide: &Value, direct: &Value) {
    assert_eq!(decide["class"], "Decision", "{decide}");
    assert_eq!(decide["model"], MODEL);
    let answers = decide["answers"].as_array().expect("answers");
    let kinds: Vec<(&str, &str)> = answers
        .iter()
        .map(|a| {
            (
                a["class"].as_str().unwrap_or(""),
                a["type"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("AnswerAnswerResourcePredicate", "predicate"),
            ("AnswerAnswerResourceChoice", "choice"),
            ("AnswerAnswerResourceChoice", "choice"),
            ("AnswerAnswerResourceScore", "score"),
            ("AnswerAnswerResourcePredicate", "predicate"),
        ],
        "answers in question order, each parsed to its class"
    );
    let names: Vec<&Value> = answers.iter().map(|a| &a["name"]).collect();
    assert_eq!(
        names,
        [
            &json!("refund"),
            &json!("team"),
            &json!("escalate"),
            &json!("urgency"),
            &Value::Null
        ]
    );
    close(&answers[0]["probability"], &direct["0"]["noul"], "refund");
    close(
        &answers[4]["probability"],
        &direct["4"]["noul"],
        "unnamed predicate",
    );

    let team = &answers[1];
    let values: Vec<&Value> = team["probabilities"]
        .as_array()
        .expect("list")
        .iter()
        .map(|p| &p["value"])
        .collect();
    assert_eq!(values, [&json!("billing"), &json!("bug"), &json!("other")]);
    for (got, label) in listed(team).iter().zip(["billing", "bug", "other"]) {
        close(got, &direct["1"]["probabilities"][label], label);
    }
    assert_eq!(
        team["choice"], direct["1"]["choice"],
        "the most probable value"
    );
    close(
        &team["confidence"],
        &direct["1"]["confidence"],
        "team confidence",
    );

    let escalate = &answers[2];
    for (p, want) in escalate["probabilities"]
        .as_array()
        .expect("list")
        .iter()
        .zip([true, false])
    {
        assert_eq!(
            p["value"],
            json!(want),
            "a boolean value stays a boolean: {p}"
        );
        assert_eq!(p["value_is_bool"], true, "the SDK parsed a bool: {p}");
    }
    for (got, label) in listed(escalate).iter().zip(["true", "false"]) {
        close(got, &direct["2"]["probabilities"][label], label);
    }
    let want_choice = direct["2"]["choice"] == "true";
    assert_eq!(escalate["choice"], json!(want_choice), "typed choice");

    let urgency = &answers[3];
    let levels: Vec<(Value, Value)> = urgency["probabilities"]
        .as_array()
        .expect("list")
        .iter()
        .map(|p| (p["value"].clone(), p["label"].clone()))
        .collect();
    assert_eq!(
        levels,
        [
            (json!(0), json!("routine")),
            (json!(1), json!("soon")),
            (json!(2), json!("immediate"))
        ]
    );
    for (k, got) in listed(urgency).iter().enumerate() {
        close(got, &direct["3"]["probabilities"][k.to_string()], "level");
    }
    close(&urgency["score"], &direct["3"]["score"], "score");

    let usage = &decide["usage"];
    let (input, output) = (
        usage["input_tokens"].as_u64().expect("in"),
        usage["output_tokens"].as_u64().expect("out"),
    );
    assert!(input > 0 && output > 0, "{usage}");
    assert_eq!(usage["total_tokens"].as_u64(), Some(input + output));
    assert_eq!(usage["reasoning_tokens"], 0);
    assert!(usage["cached_tokens"].is_u64(), "{usage}");
}

/// Proves the official OpenAI SDK's `client.decisions.create` works unchanged against the
/// service on Gemma 3 270M: a `Decision` whose answers come in question order, each parsed to
/// its class with its name (null when unnamed); a boolean-valued choice comes back with
/// Python booleans; a score's levels carry their integer value and label; every probability,
/// choice, score and confidence equals (to `SAME_READ`) what `/v1/systemone`
/// answers for the same questions; a messages input (system text, user text and JSON parts)
/// is the documented state; a one-choice choice is the SDK's `BadRequestError` with `param`
/// naming the question's choices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_sdk_decides_with_the_answers_of_the_same_questions() {
    let python = crate::setup::sdk::sdk_python();
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = support::start(llama_config(&url, &["--cache-prompt", "false"])).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/openai_decisions.py");
    let env = vec![
        ("SYSTEMONE_BASE_URL", format!("http://{}", service.addr)),
        ("DECISIONS_MODEL", MODEL.to_string()),
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("OPENAI_BASE_URL", String::new()),
    ];
    let stdout = crate::setup::sdk::run_program(python, vec![script.to_string()], env).await;
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();

    let direct = systemone(&service, json!(INPUT), systemone_questions()).await;
    check_decide(scenario(&lines, "decide"), &direct);

    let messages = scenario(&lines, "messages");
    let first = json!({"0": systemone_questions()["0"].clone()});
    let direct = systemone(&service, messages_state(), first).await;
    close(
        &messages["answers"][0]["probability"],
        &direct["0"]["noul"],
        "messages input",
    );

    let invalid = scenario(&lines, "invalid");
    assert_eq!(invalid["raised"], "BadRequestError", "{invalid}");
    assert_eq!(invalid["status"], 400);
    assert_eq!(invalid["param"], "questions[0].choices");
    assert_eq!(invalid["code"], "system_one_invalid_criteria");
    assert_eq!(invalid["type"], "invalid_request_error");
    eprintln!(
        "decisions: 3 scenarios through the OpenAI SDK and 2 /v1/systemone checks in {:.2?}",
        started.elapsed()
    );
}
