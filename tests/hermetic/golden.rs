//! The golden vectors: all 35 cases captured from the reference library
//! (`tests/golden/reference-cases.jsonl`, format in `tests/golden/README.md`).
//!
//! For every case this proves, at the library level:
//! * the state serialises to the reference's `state_json` byte for byte;
//! * every upstream body (question → order → slice of ≤128 ids) equals the recorded one as
//!   JSON, key order included, and every user text part has the recorded sha256 and length;
//! * the pipeline, replaying the recorded answers through the real vLLM dialect over HTTP,
//!   sends exactly the recorded multiset of bodies and returns the recorded answers with the
//!   default temperature and with temperature 1 (relative 1e-12), with the same usage;
//! * the fake server's own log-probability formula reproduces the recorded answers.
//!
//! Then, over HTTP, every case the public contract accepts gives the same answers, and the
//! cases it rejects (a state of `""`, `42`, `false`; an `https` image; 192 options) are refused.

use crate::support;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::setup::ids_of;
use crate::support::fake_vllm::{render_toy_prompt, toy_logprobs, FakeVllm};
use crate::support::sha256_hex;
use systemone::backend::vllm::VllmBackend;
use systemone::backend::ReadRequest;
use systemone::backend::UserContent;
use systemone::calibration::DEFAULT_FORMULA;
use systemone::config::{Layout, UpstreamSettings};
use systemone::engine::decode::{decode, OrderRead};
use systemone::engine::{Answers, Pipeline};
use systemone::json::to_python;
use systemone::models::tokens::TokenTable;
use systemone::models::{upkeep, Model};
use systemone::question::lower_choice;
use systemone::request::prompt::plan;
use systemone::request::{History, ReferenceError, ValidRequest};

const CASES: &str = include_str!("../golden/reference-cases.jsonl");
const MODEL: &str = "glm-5.3-flash";

fn cases() -> Vec<Value> {
    let cases: Vec<Value> = CASES
        .lines()
        .map(|l| serde_json::from_str(l).expect("case parses"))
        .collect();
    assert_eq!(cases.len(), 35);
    cases
}

/// The vLLM dialect at `base_url`, as the golden fake's model uses it.
fn backend(base_url: &str) -> VllmBackend {
    VllmBackend::new(
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool"),
        base_url,
        MODEL.into(),
        None,
        128,
    )
}

fn model(base_url: &str) -> Arc<Model> {
    Arc::new(Model::new(
        MODEL,
        Arc::new(backend(base_url)),
        TokenTable::load("golden-fake").expect("golden-fake table"),
    ))
}

fn history(case: &Value) -> History {
    let h = &case["input"]["options"]["history"];
    match h {
        Value::Null => History::None,
        Value::String(s) => History::Shared(s.clone()),
        Value::Array(pairs) => {
            let per = case["input"]["questions"]
                .as_array()
                .expect("questions")
                .iter()
                .map(|q| {
                    pairs
                        .iter()
                        .find(|p| p[0] == q[0])
                        .and_then(|p| p[1].as_str().map(str::to_string))
                })
                .collect();
            History::PerQuestion(per)
        }
        other => panic!("unexpected history {other}"),
    }
}

fn request(
    case: &Value,
    model: Arc<Model>,
    temperature: Option<f64>,
) -> Result<ValidRequest, ReferenceError> {
    let input = &case["input"];
    let questions = input["questions"]
        .as_array()
        .expect("questions")
        .iter()
        .map(|q| {
            let criteria = q[1]["criteria"]
                .as_array()
                .expect("criteria")
                .iter()
                .map(|c| (c[0].as_str().expect("label").to_string(), c[1].clone()))
                .collect();
            lower_choice(
                q[0].as_str().expect("id").to_string(),
                q[1]["instructions"].clone(),
                criteria,
            )
        })
        .collect();
    let options = &input["options"];
    let layout = match options["optimize"].as_str() {
        Some("cost") => Layout::Cost,
        _ => Layout::Accuracy,
    };
    let images = options["images"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|u| u.as_str().expect("url").to_string())
                .collect()
        })
        .unwrap_or_default();
    ValidRequest::reference(
        model,
        &input["state"],
        questions,
        temperature,
        layout,
        options["permutations"].as_u64().unwrap_or(1) as usize,
        images,
        history(case),
    )
}

/// Installs the case's recorded answers in the fake, so it replays them verbatim.
fn record(fake: &FakeVllm, case: &Value) {
    for (req, resp) in case["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .zip(case["responses"].as_array().expect("responses"))
    {
        let read = ids_of(&req["body"]["logprob_token_ids"]);
        fake.record(&req["body"]["messages"][0]["content"], read, resp.clone());
    }
}

fn text_parts(content: &UserContent) -> Vec<(Option<usize>, &str)> {
    match content {
        UserContent::Text(t) => vec![(None, t.as_str())],
        UserContent::Parts(parts) => parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                systemone::backend::Part::Text(t) => Some((Some(i), t.as_str())),
                systemone::backend::Part::ImageUrl(_) => None,
            })
            .collect(),
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs()) || (a - b).abs() < 1e-15
}

/// Compares an outcome with a recorded `result_*` object.
fn assert_outcome(name: &str, outcome: &Answers, req: &ValidRequest, want: &Value) {
    assert_eq!(outcome.model, want["response_model"], "{name}: model");
    let usage = &outcome.usage;
    let recorded = |section: &str, key: &str| want[section][key].as_u64().expect("u64");
    let input = recorded("usage", "input_tokens");
    assert_eq!(usage.input_tokens, input, "{name}: input tokens");
    let output = recorded("usage", "output_tokens");
    assert_eq!(usage.output_tokens, output, "{name}: output tokens");
    let cached = recorded("usage", "cached_tokens");
    assert_eq!(usage.cached_tokens, cached, "{name}: cached tokens");
    let requests = recorded("timings", "requests");
    assert_eq!(usage.upstream_requests, requests, "{name}: requests");
    let answers = want["answers"].as_array().expect("answers");
    assert_eq!(answers.len(), outcome.answers.len(), "{name}");
    for ((q, got), pair) in req.questions().iter().zip(&outcome.answers).zip(answers) {
        assert_eq!(pair[0], json!(q.id), "{name}: question order");
        let w = &pair[1];
        let probs = w["probabilities"].as_array().expect("probabilities");
        for ((option, p), wp) in q.options.iter().zip(&got.probabilities).zip(probs) {
            assert_eq!(wp[0], json!(option.label), "{name}: option order");
            let want_p = wp[1].as_f64().expect("f64");
            assert!(
                close(*p, want_p),
                "{name}: p({}) = {p}, want {want_p}",
                option.label
            );
        }
        let best = systemone::engine::decode::argmax(&got.probabilities);
        assert_eq!(json!(q.options[best].label), w["choice"], "{name}: choice");
        let wc = w["confidence"].as_f64().expect("f64");
        assert!(
            close(got.confidence, wc),
            "{name}: confidence {} want {wc}",
            got.confidence
        );
        let wt = w["temperature"].as_f64().expect("f64");
        assert!(
            close(got.temperature, wt),
            "{name}: temperature {} want {wt}",
            got.temperature
        );
        let wm = w["option_mass"].as_f64().expect("f64");
        let gm = got.option_mass.expect("asked");
        assert!(close(gm, wm), "{name}: option_mass {gm} want {wm}");
    }
}

#[test]
fn states_serialise_exactly_like_python() {
    for case in cases() {
        let want = case["input"]["state_json"].as_str().expect("state_json");
        let got = to_python(&case["input"]["state"]).expect("finite");
        assert_eq!(got, want, "{}", case["name"]);
    }
}

#[test]
fn every_upstream_body_matches_the_reference() {
    let m = model("http://127.0.0.1:9/v1");
    let backend = backend("http://127.0.0.1:9/v1");
    let mut compared = 0;
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        let req = match request(&case, m.clone(), None) {
            Ok(r) => r,
            Err(e) => {
                assert_eq!(case["requests"].as_array().map(Vec::len), Some(0), "{name}");
                assert_eq!(
                    e.to_string(),
                    case["error"]["message"].as_str().expect("message"),
                    "{name}"
                );
                continue;
            }
        };
        let mut bodies = Vec::new();
        for (qi, asks) in plan(&req).iter().enumerate() {
            let n = req.questions()[qi].options.len();
            let ids: Vec<u32> = m.table.get().expect("a fixed table").labels[..n]
                .iter()
                .map(|l| l.id)
                .collect();
            for ask in asks {
                for chunk in ids.chunks(128) {
                    let read = ReadRequest {
                        content: &ask.content,
                        prefix: "answer=",
                        allowed_ids: &ids,
                        read_ids: chunk,
                        chained: false,
                        routing: None,
                        cache_salt: None,
                    };
                    let body = serde_json::to_value(backend.body(&read)).expect("serialises");
                    // What the backend sends: the same bytes, the prompt spliced in.
                    assert_eq!(
                        String::from_utf8(backend.encode(&read).expect("encodes")),
                        serde_json::to_string(&backend.body(&read)).map_err(|_| unreachable!()),
                        "{name}: encoded body"
                    );
                    bodies.push((body, ask.content.clone()));
                }
            }
        }
        let want = case["requests"].as_array().expect("requests");
        assert_eq!(bodies.len(), want.len(), "{name}: request count");
        for ((got, content), w) in bodies.iter().zip(want) {
            assert_eq!(
                serde_json::to_string(got).expect("json"),
                serde_json::to_string(&w["body"]).expect("json"),
                "{name}: body"
            );
            let parts = text_parts(content);
            let digests = w["user_text_digests"].as_array().expect("digests");
            assert_eq!(parts.len(), digests.len(), "{name}: text parts");
            for ((part, text), d) in parts.iter().zip(digests) {
                assert_eq!(json!(part), d["part"], "{name}: part index");
                assert_eq!(
                    sha256_hex(text),
                    d["sha256"].as_str().expect("sha"),
                    "{name}: sha256"
                );
                assert_eq!(
                    text.len() as u64,
                    d["bytes"].as_u64().expect("bytes"),
                    "{name}: bytes"
                );
                assert_eq!(
                    text.chars().count() as u64,
                    d["chars"].as_u64().expect("chars"),
                    "{name}: chars"
                );
            }
            compared += 1;
        }
    }
    assert!(compared >= 40, "compared {compared} bodies");
}

#[tokio::test]
async fn the_pipeline_replays_every_case_exactly() {
    let fake = FakeVllm::start().await;
    let m = model(&fake.base_url());
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        record(&fake, &case);
        if case["error"] != Value::Null {
            assert!(request(&case, m.clone(), None).is_err(), "{name}");
            continue;
        }
        let pipeline = Pipeline::new(&UpstreamSettings::default());
        // Upkeep starts where models start (a router); this model has none.
        upkeep::start(&m, pipeline.in_flight());
        for (temperature, key) in [
            (None, "result_default_temperature"),
            (Some(1.0), "result_temperature_1"),
        ] {
            let req = request(&case, m.clone(), temperature).expect("valid");
            if req.questions().iter().any(|q| q.options.len() < 2) {
                // The service answers a 1-option question without asking (contract); the
                // reference asks. Decode the recorded answer directly instead.
                let recorded =
                    &case["responses"][0]["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
                let lps = recorded
                    .as_array()
                    .expect("top")
                    .iter()
                    .map(|e| e["logprob"].as_f64().expect("lp"))
                    .collect();
                let t = temperature.unwrap_or_else(|| DEFAULT_FORMULA.temperature(1));
                let d = decode(
                    &[OrderRead {
                        shift: 0,
                        logprobs: lps,
                        pre_mask: true,
                    }],
                    t,
                )
                .expect("decodes");
                let w = &case[key]["answers"][0][1];
                assert!(
                    close(
                        d.probabilities[0],
                        w["probabilities"][0][1].as_f64().expect("p")
                    ),
                    "{name}"
                );
                assert!(
                    close(
                        d.option_mass.expect("mass"),
                        w["option_mass"].as_f64().expect("m")
                    ),
                    "{name}"
                );
                assert!(
                    close(d.temperature, w["temperature"].as_f64().expect("t")),
                    "{name}"
                );
                assert!(
                    close(d.confidence, w["confidence"].as_f64().expect("c")),
                    "{name}"
                );
                continue;
            }
            let before = fake.chat_bodies().len();
            let ticket = req.model().circuit.admit().expect("a closed circuit");
            let outcome = pipeline
                .run(&req, ticket)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_outcome(name, &outcome, &req, &case[key]);
            // The multiset of bodies sent equals the recorded one.
            let mut sent: Vec<String> = fake.chat_bodies()[before..]
                .iter()
                .map(|b| b.to_string())
                .collect();
            let mut want: Vec<String> = case["requests"]
                .as_array()
                .expect("requests")
                .iter()
                .map(|r| r["body"].to_string())
                .collect();
            sent.sort();
            want.sort();
            assert_eq!(sent, want, "{name}: bodies sent");
        }
    }
}

#[test]
fn the_fake_servers_formula_reproduces_the_recorded_answers() {
    for case in cases() {
        for (req, resp) in case["requests"]
            .as_array()
            .expect("requests")
            .iter()
            .zip(case["responses"].as_array().expect("responses"))
        {
            let body = &req["body"];
            let support = ids_of(&body["allowed_token_ids"]);
            let read = ids_of(&body["logprob_token_ids"]);
            let got = toy_logprobs(&render_toy_prompt(body), &support, &read);
            let want = &resp["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
            for (g, w) in got.iter().zip(want.as_array().expect("top")) {
                let w = w["logprob"].as_f64().expect("lp");
                assert!((g - w).abs() < 1e-12, "{}: {g} vs {w}", case["name"]);
            }
            assert_eq!(
                resp["usage"]["prompt_tokens"].as_u64().expect("tokens") as usize,
                render_toy_prompt(body).len() / 4,
                "{}",
                case["name"]
            );
        }
    }
}

/// The contract's request body for a golden case (choice questions, extensions as fields).
fn http_body(case: &Value, temperature: Option<f64>) -> Value {
    let input = &case["input"];
    let mut questions = serde_json::Map::new();
    for q in input["questions"].as_array().expect("questions") {
        let mut criteria = serde_json::Map::new();
        for c in q[1]["criteria"].as_array().expect("criteria") {
            criteria.insert(c[0].as_str().expect("label").into(), c[1].clone());
        }
        questions.insert(
            q[0].as_str().expect("id").into(),
            json!({"type": "choice", "instructions": q[1]["instructions"], "criteria": criteria}),
        );
    }
    let mut body = json!({"model": MODEL, "state": input["state"], "questions": questions});
    let options = &input["options"];
    if let Some(layout) = options["optimize"].as_str() {
        body["layout"] = json!(layout);
    }
    if let Some(k) = options["permutations"].as_u64() {
        body["permutations"] = json!(k);
    }
    if let Some(images) = options["images"].as_array() {
        body["images"] = json!(images);
    }
    match &options["history"] {
        Value::Null => {}
        Value::Array(pairs) => {
            let map: serde_json::Map<String, Value> = pairs
                .iter()
                .map(|p| (p[0].as_str().expect("id").to_string(), p[1].clone()))
                .collect();
            body["history"] = Value::Object(map);
        }
        h => body["history"] = h.clone(),
    }
    if let Some(t) = temperature {
        body["temperature"] = json!(t);
    }
    body
}

/// Over HTTP, every case the contract accepts gives the reference's answers, usage and
/// model; the cases it rejects get the contract's 422 without any upstream request.
#[tokio::test]
async fn the_http_service_gives_the_reference_answers() {
    let (fake, service) = support::setup(&[]).await;
    let rejected = [
        ("state_empty_string", "system_one_invalid_state"),
        ("state_bare_number", "system_one_invalid_state"),
        ("state_false", "system_one_invalid_state"),
        ("labels_special_characters", "system_one_invalid_label"),
        ("images_two_urls", "system_one_images_unsupported"),
        ("options_192_error", "system_one_too_many_options"),
    ];
    let mut answered = 0;
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        record(&fake, &case);
        if let Some((_, code)) = rejected.iter().find(|(n, _)| *n == name) {
            let before = fake.chat_requests();
            let response = service.post_raw(&http_body(&case, None)).await;
            assert_eq!(response.status(), 422, "{name}");
            let body: Value = response.json().await.expect("json");
            assert_eq!(body["error"]["code"], *code, "{name}");
            if name == "options_192_error" {
                assert!(
                    body["error"]["message"]
                        .as_str()
                        .expect("message")
                        .contains("191"),
                    "{name}: {body}"
                );
            }
            assert_eq!(fake.chat_requests(), before, "{name}: no upstream request");
            continue;
        }
        if name == "options_1" {
            continue; // answered without asking: covered by the fault and shape tests
        }
        for (temperature, key) in [
            (None, "result_default_temperature"),
            (Some(1.0), "result_temperature_1"),
        ] {
            let response = service.post_raw(&http_body(&case, temperature)).await;
            assert_eq!(response.status(), 200, "{name}");
            let body: Value = response.json().await.expect("json");
            let want = &case[key];
            assert_eq!(body["model"], want["response_model"], "{name}");
            for field in ["input_tokens", "output_tokens", "cached_tokens"] {
                assert_eq!(
                    body["usage"][field], want["usage"][field],
                    "{name}: usage.{field}"
                );
            }
            assert_eq!(
                body["usage"]["upstream_requests"], want["timings"]["requests"],
                "{name}"
            );
            let answers = body["answers"].as_object().expect("answers");
            let want_answers = want["answers"].as_array().expect("answers");
            let order: Vec<&String> = answers.keys().collect();
            let want_order: Vec<&str> = want_answers
                .iter()
                .map(|a| a[0].as_str().expect("id"))
                .collect();
            assert_eq!(order, want_order, "{name}: answer order");
            for pair in want_answers {
                let (got, w) = (&answers[pair[0].as_str().expect("id")], &pair[1]);
                assert_eq!(got["type"], "choice", "{name}");
                assert_eq!(got["choice"], w["choice"], "{name}");
                let probs = got["probabilities"].as_object().expect("probabilities");
                let want_probs = w["probabilities"].as_array().expect("probabilities");
                assert_eq!(probs.len(), want_probs.len(), "{name}");
                for ((label, p), wp) in probs.iter().zip(want_probs) {
                    assert_eq!(json!(label), wp[0], "{name}: option order");
                    assert!(
                        close(p.as_f64().expect("p"), wp[1].as_f64().expect("p")),
                        "{name}: p({label})"
                    );
                }
                for field in ["confidence", "temperature", "option_mass"] {
                    let (g, e) = (
                        got[field].as_f64().expect("f64"),
                        w[field].as_f64().expect("f64"),
                    );
                    assert!(close(g, e), "{name}: {field} {g} want {e}");
                }
            }
            answered += 1;
        }
    }
    assert_eq!(answered, 2 * (35 - 6 - 1));
}
