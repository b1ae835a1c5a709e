//! What the property tests of `POST /v1/systemone` share (`tests/hermetic/robustness_malformed.rs`,
//! `tests/hermetic/robustness_answers.rs`): the real router driven in-process
//! (`tower::ServiceExt::oneshot`) against a fake vLLM server, with the contract's invariants
//! checked on every reply, a proptest runner without failure persistence, and the generator
//! of requests valid by construction (which the malformed requests also start from).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};
use tower::ServiceExt;

use crate::support::fake_vllm::FakeVllm;

/// Every status the contract lets `POST /v1/systemone` answer with (no keys configured).
const CONTRACT_STATUSES: [u16; 9] = [200, 400, 413, 415, 422, 429, 502, 503, 504];

/// A fake vLLM server and the service's router pointed at it, on a runtime of their own.
pub struct Harness {
    runtime: tokio::runtime::Runtime,
    fake: FakeVllm,
    app: axum::Router,
}

impl Harness {
    pub fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (fake, app) = runtime.block_on(async {
            let fake = FakeVllm::start().await;
            let config = crate::support::config(&fake.base_url(), &[]);
            let state = systemone::build_state(&config).expect("state builds");
            (fake, systemone::app(state))
        });
        Harness { runtime, fake, app }
    }

    /// Sends one request in-process; returns status, error-code header, body bytes and the
    /// chat requests the fake received meanwhile.
    pub fn send(
        &self,
        body: Vec<u8>,
        content_type: Option<&str>,
        encoding: Option<&str>,
    ) -> (StatusCode, Option<String>, Vec<u8>, usize) {
        let mut request = Request::builder().method("POST").uri("/v1/systemone");
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        if let Some(enc) = encoding {
            request = request.header("content-encoding", enc);
        }
        let request = request.body(Body::from(body)).expect("request");
        let before = self.fake.chat_requests();
        let (status, code, bytes) = self.runtime.block_on(async {
            let response = self.app.clone().oneshot(request).await.expect("infallible");
            let status = response.status();
            let code = response
                .headers()
                .get("x-systemone-error-code")
                .map(|v| v.to_str().expect("ascii header").to_string());
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("body");
            (status, code, bytes.to_vec())
        });
        (status, code, bytes, self.fake.chat_requests() - before)
    }

    /// Sends and checks the contract's invariants for any request; returns the status and
    /// the parsed body.
    pub fn check(
        &self,
        body: Vec<u8>,
        content_type: Option<&str>,
        encoding: Option<&str>,
    ) -> Result<(u16, Value), TestCaseError> {
        let (status, code, bytes, sent) = self.send(body, content_type, encoding);
        let status = status.as_u16();
        prop_assert!(
            CONTRACT_STATUSES.contains(&status),
            "status {status} is not a contract status: {}",
            String::from_utf8_lossy(&bytes)
        );
        let parsed: Value = serde_json::from_slice(&bytes).map_err(|e| {
            TestCaseError::fail(format!(
                "status {status}: body is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            ))
        })?;
        if status == 200 {
            prop_assert!(code.is_none(), "a 200 carries an error code {code:?}");
            prop_assert!(
                parsed["answers"].is_object(),
                "200 without answers: {parsed}"
            );
            prop_assert!(parsed["usage"].is_object(), "200 without usage: {parsed}");
            prop_assert_eq!(
                parsed["usage"]["upstream_requests"].as_u64(),
                Some(sent as u64),
                "usage.upstream_requests differs from what the backend saw"
            );
        } else {
            let body_code = parsed["error"]["code"].as_str().unwrap_or("");
            prop_assert!(
                body_code.starts_with("system_one_"),
                "error.code {body_code:?} in {parsed}"
            );
            prop_assert_eq!(code.as_deref(), Some(body_code), "header vs body code");
            prop_assert!(
                parsed["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.trim().is_empty()),
                "empty message in {parsed}"
            );
            if status == 422 {
                prop_assert_eq!(
                    &parsed["detail"][0]["loc"][0],
                    &json!("body"),
                    "422 detail in {}",
                    parsed
                );
            }
            if [400, 413, 415, 422].contains(&status) {
                prop_assert_eq!(sent, 0, "a refused request reached the backend: {}", parsed);
            }
        }
        Ok((status, parsed))
    }
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

pub fn run<S: Strategy>(
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    if let Err(e) = runner(cases).run(&strategy, test) {
        panic!("{e}");
    }
}

/// Strings, with the ones validation cares about over-represented.
pub fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,8}",
        ".{0,12}",
        prop::sample::select(vec![
            "",
            " ",
            "\n",
            "\t",
            "a\nb",
            "\u{2028}",
            "\u{0}",
            "choice",
            "noul",
            "score",
            "box",
            "cost",
            "accuracy",
            "jev-latest",
            "glm-5.3-flash",
            "true",
            "false",
            "<image:00ff>",
        ])
        .prop_map(str::to_string),
    ]
}

/// A description the contract accepts: string, object, array or null.
pub fn valid_description() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => string().prop_map(Value::String),
        2 => Just(Value::Null),
        1 => Just(json!({"k": "v"})),
        1 => Just(json!(["a", 1])),
    ]
    .boxed()
}

/// One valid question and its option labels as the answer keys them.
#[derive(Debug, Clone)]
pub enum ValidQuestion {
    Choice(Vec<String>),
    Noul,
    Score(usize),
}

fn valid_question() -> impl Strategy<Value = (Value, ValidQuestion)> {
    let label = "[A-Za-z][A-Za-z0-9 _-]{0,12}";
    prop_oneof![
        (
            prop::collection::vec((label, valid_description()), 1..8),
            valid_description()
        )
            .prop_map(|(options, instructions)| {
                let criteria: Map<String, Value> = options.into_iter().collect();
                let labels = criteria.keys().cloned().collect();
                (
                    json!({"type": "choice", "instructions": instructions, "criteria": criteria}),
                    ValidQuestion::Choice(labels),
                )
            }),
        (
            "[a-z]{1,10}( [a-z]{1,10}){0,4}",
            prop::option::of(valid_description())
        )
            .prop_map(|(instructions, yes)| {
                let mut q = json!({"type": "noul", "instructions": instructions});
                if let Some(yes) = yes {
                    q["criteria"] = json!({"true": yes});
                }
                (q, ValidQuestion::Noul)
            }),
        prop::collection::vec("[a-z]{1,10}", 1..=10).prop_map(|levels| {
            let n = levels.len();
            (
                json!({"type": "score", "instructions": "How much?", "criteria": levels}),
                ValidQuestion::Score(n),
            )
        }),
    ]
}

pub fn valid_request() -> impl Strategy<Value = (Value, Vec<(String, ValidQuestion)>)> {
    (
        prop::collection::vec(("[a-z][a-z0-9_]{0,8}", valid_question()), 1..4),
        prop_oneof![
            "[a-z]{1,20}( [a-z]{1,10}){0,6}".prop_map(Value::String),
            Just(json!({"ticket": "refund please", "amount": 12.5, "tags": ["a"]})),
        ],
        prop::option::of(prop::sample::select(vec!["glm-5.3-flash", "jev-latest"])),
        prop::option::of(0.1f64..5.0),
        prop::option::of(prop::sample::select(vec!["accuracy", "cost"])),
        prop::option::of(1u64..=8),
        prop::option::of("[a-z ]{1,30}"),
    )
        .prop_map(
            |(questions, state, model, temperature, layout, permutations, history)| {
                let mut asked: Vec<(String, ValidQuestion)> = Vec::new();
                let mut map = Map::new();
                for (id, (q, kind)) in questions {
                    if map.insert(id.clone(), q).is_none() {
                        asked.push((id, kind));
                    } else {
                        // A repeated id replaces the question in place; keep its new kind.
                        let slot = asked.iter_mut().find(|(i, _)| *i == id).expect("seen");
                        slot.1 = kind;
                    }
                }
                let mut body = json!({"state": state, "questions": map});
                for (k, v) in [
                    ("model", model.map(Value::from)),
                    ("temperature", temperature.map(Value::from)),
                    ("layout", layout.map(Value::from)),
                    ("permutations", permutations.map(Value::from)),
                    ("history", history.map(Value::from)),
                ] {
                    if let Some(v) = v {
                        body[k] = v;
                    }
                }
                (body, asked)
            },
        )
}
