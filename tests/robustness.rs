//! Robustness and privacy of `POST /v1/systemone`.
//!
//! * Property tests push arbitrary bytes, arbitrary nested JSON and structured-but-wrong
//!   requests (random types in every known field) through the real router in-process
//!   (`tower::ServiceExt::oneshot`), against a fake vLLM server: the handler never panics,
//!   the status is one the contract lists, every error has a JSON body whose `error.code`
//!   starts with `system_one_` and equals `x-systemone-error-code`, and a request refused
//!   with a 400, 413, 415 or 422 never reached the backend. Requests valid by construction
//!   always get a 200 whose answers obey the contract's response rules.
//! * A privacy canary: requests carrying `CANARY-7f3a` in every caller-content field, some
//!   answered, some refused, some failing at the backend, are logged at TRACE into memory;
//!   the log never holds the canary nor the backend API key.

mod common;

use std::sync::{Mutex, OnceLock};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};
use tower::ServiceExt;

use common::fake_vllm::{FakeVllm, Fault};
use common::log::Captured;

/// Every status the contract lets `POST /v1/systemone` answer with (no keys configured).
const CONTRACT_STATUSES: [u16; 9] = [200, 400, 413, 415, 422, 429, 502, 503, 504];

/// A fake vLLM server and the service's router pointed at it, on a runtime of their own.
struct Harness {
    runtime: tokio::runtime::Runtime,
    fake: FakeVllm,
    app: axum::Router,
}

impl Harness {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (fake, app) = runtime.block_on(async {
            let fake = FakeVllm::start().await;
            let config = common::config(&fake.base_url(), &[]);
            let state = systemone::build_state(&config).expect("state builds");
            (fake, systemone::app(state))
        });
        Harness { runtime, fake, app }
    }

    /// Sends one request in-process; returns status, error-code header, body bytes and the
    /// chat requests the fake received meanwhile.
    fn send(
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
    fn check(
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

fn run<S: Strategy>(cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    if let Err(e) = runner(cases).run(&strategy, test) {
        panic!("{e}");
    }
}

// ---- Strategies -----------------------------------------------------------------------

/// Numbers, including the ones JSON allows and `f64` does not hold.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter_map("finite", serde_json::Number::from_f64)
            .prop_map(Value::Number),
        prop::sample::select(vec![
            "1e400",
            "-1e400",
            "1e-400",
            "-0",
            "0.0",
            "2.5",
            "18446744073709551616",
            "123456789012345678901234567890",
        ])
        .prop_map(|s| systemone::json::parse_strict(s.as_bytes()).expect("a JSON number")),
    ]
}

/// Strings, with the ones validation cares about over-represented.
fn string() -> impl Strategy<Value = String> {
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

/// Object keys: the request's own field names, or anything.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "state",
            "questions",
            "model",
            "type",
            "instructions",
            "criteria",
            "temperature",
            "layout",
            "permutations",
            "history",
            "images",
            "assets",
            "keep_alive",
            "true",
            "false",
            "q1",
        ])
        .prop_map(str::to_string),
        string(),
    ]
}

/// Any JSON value, nested up to a few levels.
fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

/// `valid` most of the time, any JSON value otherwise.
fn or_any(valid: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
    prop_oneof![7 => valid, 1 => json_value()].boxed()
}

/// Present with probability `p`.
fn present(p: f64, s: BoxedStrategy<Value>) -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(p, s)
}

/// A description the contract accepts: string, object, array or null.
fn valid_description() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => string().prop_map(Value::String),
        2 => Just(Value::Null),
        1 => Just(json!({"k": "v"})),
        1 => Just(json!(["a", 1])),
    ]
    .boxed()
}

/// Usually a valid description, sometimes a boolean or a number.
fn description() -> BoxedStrategy<Value> {
    prop_oneof![
        8 => valid_description(),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => number(),
    ]
    .boxed()
}

fn choice_criteria() -> BoxedStrategy<Value> {
    prop::collection::vec((string(), description()), 0..6)
        .prop_map(|kv| Value::Object(kv.into_iter().collect()))
        .boxed()
}

fn noul_criteria() -> BoxedStrategy<Value> {
    (
        prop::option::of(description()),
        prop::option::of(description()),
        prop::option::weighted(0.1, key()),
    )
        .prop_map(|(t, f, other)| {
            let mut m = Map::new();
            if let Some(t) = t {
                m.insert("true".into(), t);
            }
            if let Some(f) = f {
                m.insert("false".into(), f);
            }
            if let Some(k) = other {
                m.insert(k, json!("other"));
            }
            Value::Object(m)
        })
        .boxed()
}

fn score_criteria() -> BoxedStrategy<Value> {
    prop::collection::vec(description(), 0..12)
        .prop_map(Value::Array)
        .boxed()
}

/// A question of a given (or random) type whose fields are each usually plausible for
/// that type, sometimes of a random type, sometimes absent, sometimes joined by an
/// unknown field.
fn question() -> BoxedStrategy<Value> {
    let shaped = prop_oneof![
        Just(("choice", choice_criteria())),
        Just(("noul", noul_criteria())),
        Just(("score", score_criteria())),
        Just(("box", choice_criteria())),
    ]
    .prop_flat_map(|(kind, criteria)| {
        (
            present(0.95, or_any(Just(Value::from(kind)))),
            present(0.8, or_any(description())),
            present(0.9, or_any(criteria)),
            prop::option::weighted(0.05, (key(), json_value())),
        )
    })
    .prop_map(|(kind, instructions, criteria, extra)| {
        let mut q = Map::new();
        for (k, v) in [
            ("type", kind),
            ("instructions", instructions),
            ("criteria", criteria),
        ] {
            if let Some(v) = v {
                q.insert(k.into(), v);
            }
        }
        if let Some((k, v)) = extra {
            q.insert(k, v);
        }
        Value::Object(q)
    });
    prop_oneof![15 => shaped, 1 => json_value()].boxed()
}

/// Question ids from a small pool (so histories can name them) or anything.
fn question_id() -> BoxedStrategy<String> {
    prop_oneof![
        6 => prop::sample::select(vec!["q1", "q2", "team"]).prop_map(str::to_string),
        1 => Just(String::new()),
        1 => string(),
    ]
    .boxed()
}

/// A request with every known field either absent, plausible, or of a random type.
fn shaped_request() -> impl Strategy<Value = Value> {
    let model = or_any(
        prop::sample::select(vec!["glm-5.3-flash", "jev-latest", "gpt-4o"]).prop_map(Value::from),
    );
    let state = or_any(prop_oneof![
        string().prop_map(Value::String),
        Just(json!({"ticket": "refund please", "amount": 12.5})),
        Just(json!(["a", "b"])),
    ]);
    let questions = or_any(
        prop::collection::vec((question_id(), question()), 0..4)
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
    );
    let temperature = or_any(prop_oneof![(0.05f64..5.0).prop_map(Value::from), number()]);
    let layout =
        or_any(prop::sample::select(vec!["accuracy", "cost", "fast"]).prop_map(Value::from));
    let permutations = or_any((0u64..10).prop_map(Value::from));
    let history = or_any(prop_oneof![
        string().prop_map(Value::String),
        prop::collection::vec((question_id(), prop::option::of(string())), 0..3)
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k, json!(v))).collect())),
    ]);
    let images = or_any(prop_oneof![Just(json!([])), Just(json!(["iVBORw0KGgo="]))]);
    let assets = or_any(prop_oneof![
        Just(json!({})),
        Just(json!({"<image:00ff>": {"type": "image", "part": "asset-0"}}))
    ]);
    let keep_alive = json_value();
    (
        (
            present(0.5, model),
            present(0.95, state),
            present(0.95, questions),
            present(0.3, temperature),
        ),
        (
            present(0.3, layout),
            present(0.3, permutations),
            present(0.3, history),
        ),
        (
            present(0.1, images),
            present(0.1, assets),
            present(0.1, keep_alive),
        ),
    )
        .prop_map(|((m, s, q, t), (l, p, h), (i, a, k))| {
            let mut body = Map::new();
            for (name, v) in [
                ("model", m),
                ("state", s),
                ("questions", q),
                ("temperature", t),
                ("layout", l),
                ("permutations", p),
                ("history", h),
                ("images", i),
                ("assets", a),
                ("keep_alive", k),
            ] {
                if let Some(v) = v {
                    body.insert(name.into(), v);
                }
            }
            Value::Object(body)
        })
}

/// Where a mutation of a valid request lands.
#[derive(Debug, Clone)]
enum Target {
    /// A top-level field, set to the value.
    Top(&'static str),
    /// A top-level field, removed.
    RemoveTop(&'static str),
    /// The whole question at this index.
    Question(usize),
    /// A field of the question at this index, set to the value.
    QuestionField(usize, &'static str),
    /// A field of the question at this index, removed.
    RemoveQuestionField(usize, &'static str),
    /// An entry of the question's criteria (the value of a label, a level), by indexes.
    CriteriaEntry(usize, usize),
}

fn target() -> impl Strategy<Value = Target> {
    let top = prop::sample::select(vec![
        "model",
        "state",
        "questions",
        "temperature",
        "layout",
        "permutations",
        "history",
        "images",
        "assets",
        "keep_alive",
    ]);
    let field = prop::sample::select(vec!["type", "instructions", "criteria"]);
    prop_oneof![
        3 => top.clone().prop_map(Target::Top),
        1 => top.prop_map(Target::RemoveTop),
        1 => (0usize..4).prop_map(Target::Question),
        3 => (0usize..4, field.clone()).prop_map(|(i, f)| Target::QuestionField(i, f)),
        1 => (0usize..4, field).prop_map(|(i, f)| Target::RemoveQuestionField(i, f)),
        3 => (0usize..4, 0usize..12).prop_map(|(i, j)| Target::CriteriaEntry(i, j)),
    ]
}

/// The question at index `i` (modulo their count), if there are any.
fn nth_question(body: &mut Value, i: usize) -> Option<&mut Value> {
    let questions = body.get_mut("questions")?.as_object_mut()?;
    let n = questions.len();
    if n == 0 {
        return None;
    }
    questions.values_mut().nth(i % n)
}

/// Applies one mutation to a request body (a no-op where the target does not exist).
fn mutate(body: &mut Value, target: &Target, value: Value) {
    match target {
        Target::Top(f) => body[*f] = value,
        Target::RemoveTop(f) => {
            body.as_object_mut().map(|o| o.remove(*f));
        }
        Target::Question(i) => {
            if let Some(q) = nth_question(body, *i) {
                *q = value;
            }
        }
        Target::QuestionField(i, f) => {
            if let Some(q) = nth_question(body, *i).and_then(Value::as_object_mut) {
                q.insert(f.to_string(), value);
            }
        }
        Target::RemoveQuestionField(i, f) => {
            if let Some(q) = nth_question(body, *i).and_then(Value::as_object_mut) {
                q.remove(*f);
            }
        }
        Target::CriteriaEntry(i, j) => {
            match nth_question(body, *i).and_then(|q| q.get_mut("criteria")) {
                Some(Value::Object(m)) if !m.is_empty() => {
                    let n = m.len();
                    if let Some(v) = m.values_mut().nth(j % n) {
                        *v = value;
                    }
                }
                Some(Value::Array(a)) if !a.is_empty() => {
                    let n = a.len();
                    a[j % n] = value;
                }
                _ => {}
            }
        }
    }
}

/// A valid request with 0 to 2 of its fields (top-level, question, criteria entry)
/// replaced by a random JSON value or removed.
fn mutated_request() -> impl Strategy<Value = Value> {
    (
        valid_request(),
        prop::collection::vec((target(), json_value()), 0..3),
    )
        .prop_map(|((mut body, _), mutations)| {
            for (target, value) in &mutations {
                mutate(&mut body, target, value.clone());
            }
            body
        })
}

/// Structured-but-wrong requests: shaped from scratch, or valid ones with fields replaced.
fn structured_request() -> impl Strategy<Value = Value> {
    prop_oneof![shaped_request(), mutated_request()]
}

/// Content types and encodings a client might send, mostly the right ones.
fn transport() -> impl Strategy<Value = (Option<&'static str>, Option<&'static str>)> {
    (
        prop_oneof![
            6 => Just(Some("application/json")),
            1 => Just(None),
            1 => Just(Some("application/json; charset=utf-8")),
            1 => Just(Some("text/plain")),
        ],
        prop_oneof![
            8 => Just(None),
            1 => Just(Some("identity")),
            1 => Just(Some("br")),
        ],
    )
}

// ---- Valid requests -------------------------------------------------------------------

/// One valid question and its option labels as the answer keys them.
#[derive(Debug, Clone)]
enum ValidQuestion {
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

fn valid_request() -> impl Strategy<Value = (Value, Vec<(String, ValidQuestion)>)> {
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

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9
}

/// The contract's rules for one answer.
fn check_answer(id: &str, kind: &ValidQuestion, a: &Value) -> Result<(), TestCaseError> {
    let confidence = a["confidence"].as_f64().unwrap_or(f64::NAN);
    prop_assert!(
        (-1e-12..=1.0 + 1e-12).contains(&confidence),
        "{id}: confidence {confidence}"
    );
    let t = a["temperature"].as_f64().unwrap_or(f64::NAN);
    prop_assert!(t.is_finite() && t > 0.0, "{id}: temperature {t}");
    let probabilities = |a: &Value| -> Vec<(String, f64)> {
        a["probabilities"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(f64::NAN)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let n = match kind {
        ValidQuestion::Choice(labels) => {
            prop_assert_eq!(&a["type"], &json!("choice"), "{}", id);
            let p = probabilities(a);
            let keys: Vec<&String> = p.iter().map(|(k, _)| k).collect();
            prop_assert_eq!(
                keys,
                labels.iter().collect::<Vec<_>>(),
                "{}: option order",
                id
            );
            prop_assert!(
                p.iter().all(|(_, x)| (0.0..=1.0).contains(x)),
                "{id}: {p:?}"
            );
            prop_assert!(
                close(p.iter().map(|(_, x)| x).sum(), 1.0),
                "{id}: sum of {p:?}"
            );
            let best = p
                .iter()
                .fold(None::<&(String, f64)>, |b, x| match b {
                    Some(b) if b.1 >= x.1 => Some(b),
                    _ => Some(x),
                })
                .map(|(k, _)| k.clone());
            prop_assert_eq!(a["choice"].as_str(), best.as_deref(), "{}: choice", id);
            labels.len()
        }
        ValidQuestion::Noul => {
            prop_assert_eq!(&a["type"], &json!("noul"), "{}", id);
            let p = a["noul"].as_f64().unwrap_or(f64::NAN);
            prop_assert!((0.0..=1.0).contains(&p), "{id}: noul {p}");
            2
        }
        ValidQuestion::Score(levels) => {
            prop_assert_eq!(&a["type"], &json!("score"), "{}", id);
            let p = probabilities(a);
            let keys: Vec<String> = p.iter().map(|(k, _)| k.clone()).collect();
            let want: Vec<String> = (0..*levels).map(|i| i.to_string()).collect();
            prop_assert_eq!(keys, want, "{}: level keys", id);
            prop_assert!(
                close(p.iter().map(|(_, x)| x).sum(), 1.0),
                "{id}: sum of {p:?}"
            );
            let expected: f64 = p.iter().enumerate().map(|(i, (_, x))| i as f64 * x).sum();
            let s = a["score"].as_f64().unwrap_or(f64::NAN);
            prop_assert!(close(s, expected), "{id}: score {s}, Σ i·p = {expected}");
            *levels
        }
    };
    if n == 1 {
        prop_assert!(
            close(confidence, 1.0),
            "{id}: 1 option, confidence {confidence}"
        );
        prop_assert!(
            a.get("option_mass").is_none(),
            "{id}: 1 option has option_mass"
        );
    } else {
        let mass = a["option_mass"].as_f64().unwrap_or(f64::NAN);
        prop_assert!(
            (0.0..=1.0 + 1e-12).contains(&mass),
            "{id}: option_mass {mass}"
        );
    }
    Ok(())
}

// ---- Property tests -------------------------------------------------------------------

/// Arbitrary bytes, under any content type and encoding, never panic the handler and are
/// answered with a contract status and a well-formed error (or, by chance, a 200).
#[test]
fn arbitrary_bytes_get_a_contract_status_and_error_body() {
    let h = Harness::new();
    run(
        256,
        (prop::collection::vec(any::<u8>(), 0..512), transport()),
        |(bytes, (ct, enc))| {
            h.check(bytes, ct, enc)?;
            Ok(())
        },
    );
}

/// Arbitrary nested JSON values (any shape, any key, numbers beyond `f64`) never panic the
/// handler and are answered with a contract status and a well-formed error body.
#[test]
fn arbitrary_json_gets_a_contract_status_and_error_body() {
    let h = Harness::new();
    run(256, (json_value(), transport()), |(value, (ct, enc))| {
        h.check(value.to_string().into_bytes(), ct, enc)?;
        Ok(())
    });
}

/// Requests shaped like the real thing, with random types in every known field, never
/// panic the handler, never reach the backend when refused, and are answered with a
/// contract status; the generator does produce both accepted and refused requests.
#[test]
fn structured_but_wrong_requests_get_a_contract_status() {
    let h = Harness::new();
    let seen = Mutex::new([0usize; 2]);
    run(256, structured_request(), |value| {
        let (status, _) = h.check(
            value.to_string().into_bytes(),
            Some("application/json"),
            None,
        )?;
        seen.lock().expect("lock")[usize::from(status == 200)] += 1;
        Ok(())
    });
    let [refused, answered] = *seen.lock().expect("lock");
    assert!(
        refused > 0 && answered > 0,
        "refused {refused}, answered {answered}"
    );
}

/// Every request valid by construction is answered with 200: one answer per question in
/// question order, probabilities in option order summing to 1, `choice` the most probable
/// label, `score` = Σ index × probability, confidence in [0, 1], and a 1-option question
/// answered with confidence 1 and no `option_mass`.
#[test]
fn valid_requests_always_get_well_formed_answers() {
    let h = Harness::new();
    run(96, valid_request(), |(body, asked)| {
        let (status, parsed) = h.check(
            body.to_string().into_bytes(),
            Some("application/json"),
            None,
        )?;
        prop_assert_eq!(status, 200, "{}", parsed);
        let answers = parsed["answers"].as_object().cloned().unwrap_or_default();
        let ids: Vec<&String> = answers.keys().collect();
        let want: Vec<&String> = asked.iter().map(|(id, _)| id).collect();
        prop_assert_eq!(ids, want, "answer order");
        for (id, kind) in &asked {
            check_answer(id, kind, &answers[id])?;
        }
        Ok(())
    });
}

// ---- Privacy canary -------------------------------------------------------------------

const CANARY: &str = "CANARY-7f3a";
const API_KEY: &str = "sk-secret-canary";

fn obj(pairs: Vec<(String, Value)>) -> Value {
    Value::Object(pairs.into_iter().collect())
}

fn c(suffix: &str) -> String {
    format!("{CANARY}{suffix}")
}

/// A request with the canary in the state (keys and values), question ids, instructions,
/// labels, descriptions, levels and history.
fn canary_request(extra: &[(&str, Value)]) -> Value {
    let questions = obj(vec![
        (
            c("-choice"),
            json!({
                "type": "choice",
                "instructions": c(" instructions"),
                "criteria": obj(vec![
                    (c("-billing"), json!(c(" description"))),
                    (c("-bug"), json!({"why": c(" nested description")})),
                ]),
            }),
        ),
        (
            c("-noul"),
            json!({"type": "noul", "instructions": {"ask": c(" noul")},
                   "criteria": {"true": c(" yes"), "false": c(" no")}}),
        ),
        (
            c("-score"),
            json!({"type": "score", "instructions": [c(" score")],
                   "criteria": [c(" low"), {"mid": c(" mid")}, [c(" high")]]}),
        ),
        (
            c("-single"),
            json!({"type": "choice", "criteria": obj(vec![(c("-only"), json!(c(" only")))])}),
        ),
    ]);
    let mut body = json!({
        "state": obj(vec![
            (c("-key"), json!(c(" state value"))),
            ("text".into(), json!(format!("the customer said {CANARY}"))),
        ]),
        "questions": questions,
        "history": obj(vec![(c("-choice"), json!(c(" history")))]),
    });
    for (k, v) in extra {
        body[*k] = v.clone();
    }
    body
}

/// One request of the canary scenario.
struct Probe {
    name: &'static str,
    fault: Fault,
    body: Vec<u8>,
    content_type: &'static str,
    encoding: Option<&'static str>,
    status: u16,
}

fn probe(name: &'static str, body: impl Into<Vec<u8>>, status: u16) -> Probe {
    Probe {
        name,
        fault: Fault::None,
        body: body.into(),
        content_type: "application/json",
        encoding: None,
        status,
    }
}

fn probes() -> Vec<Probe> {
    let ok = canary_request(&[]).to_string();
    let mut bad_label = canary_request(&[]);
    bad_label["questions"][c("-choice")]["criteria"][c("\nline")] = json!(c(" bad label"));
    let mut unknown_field = canary_request(&[]);
    unknown_field["questions"][c("-noul")][c("-field")] = json!(c(" value"));
    let duplicate = format!(
        r#"{{"state": "{CANARY}", "questions": {{"{CANARY}-q": {{"type": "noul", "instructions": "{CANARY}"}}, "{CANARY}-q": {{"type": "noul", "instructions": "x"}}}}}}"#
    );
    let mut big_label = canary_request(&[]);
    big_label["questions"][c("-choice")]["criteria"][c(&"x".repeat(200))] = json!(null);
    let mut probes = vec![
        probe("answered", ok.clone(), 200),
        probe(
            "answered, cost layout, shared history, permutations, temperature",
            canary_request(&[
                ("layout", json!("cost")),
                ("history", json!(c(" shared history"))),
                ("permutations", json!(2)),
                ("temperature", json!(0.7)),
            ])
            .to_string(),
            200,
        ),
        probe("label with a line break", bad_label.to_string(), 422),
        probe("label too long", big_label.to_string(), 422),
        probe("unknown field", unknown_field.to_string(), 422),
        probe("duplicate key", duplicate, 422),
        probe(
            "unknown model",
            canary_request(&[("model", json!(c("-model")))]).to_string(),
            422,
        ),
        probe(
            "unknown calibration profile",
            canary_request(&[("calibration", json!(c("-profile")))]).to_string(),
            422,
        ),
        probe(
            "history for an unknown id",
            canary_request(&[("history", obj(vec![(c("-nope"), json!(c(" h")))]))]).to_string(),
            422,
        ),
        probe(
            "state number overflow",
            format!(
                r#"{{"state": {{"{CANARY}": 1e400}}, "questions": {{"{CANARY}": {{"type": "noul", "instructions": "{CANARY}"}}}}}}"#
            ),
            422,
        ),
        probe(
            "not JSON",
            format!(r#"{{"state": "{CANARY}", "questions": {CANARY}"#),
            400,
        ),
        Probe {
            content_type: "text/plain",
            ..probe("wrong content type", ok.clone(), 415)
        },
        Probe {
            encoding: Some("br"),
            ..probe("unsupported encoding", ok.clone(), 415)
        },
    ];
    // A valid request the backend fails.
    for (fault, name, status) in [
        (Fault::ServerError, "backend 500", 502),
        (Fault::NoLogprobs, "backend without logprobs", 502),
        (Fault::MissingId, "backend missing an id", 502),
        (Fault::MalformedJson, "backend malformed JSON", 502),
        (Fault::NonFiniteLogprob, "backend -Infinity logprob", 502),
        (Fault::RateLimited(Some("7".into())), "backend 429", 429),
        (Fault::Unavailable(None), "backend 503", 503),
    ] {
        probes.push(Probe {
            fault,
            ..probe(name, ok.clone(), status)
        });
    }
    probes
}

/// The process-wide TRACE log of this test binary, in memory, text and JSON formats, every
/// span event included; `log`-crate records are bridged in too (as `main` does).
///
/// A global subscriber, not `tracing::subscriber::set_default`: with the property tests
/// running on other threads, tracing's per-callsite interest cache made a thread-local
/// subscriber miss every event of the service (measured: 0 of 19 "request finished").
fn global_log() -> &'static Captured {
    static LOG: OnceLock<Captured> = OnceLock::new();
    LOG.get_or_init(common::log::install)
}

/// Caller content never reaches the logs: with a TRACE subscriber writing every event and
/// span (text and JSON formats) into memory, requests carrying `CANARY-7f3a` in the state,
/// question ids, instructions, labels, descriptions, levels and history, answered, refused
/// by validation and failed by the backend (500, protocol breaks, 429, 503), each leave a
/// "request finished" line with their request id, but the log never holds the canary, nor
/// the backend API key. Error bodies never carry the key, the backend's URL or its error
/// text.
#[test]
fn caller_content_and_the_api_key_never_reach_the_logs() {
    let log = global_log();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let probes = probes();
    let ids: Vec<(String, &'static str)> = runtime.block_on(async {
        let (fake, service) = common::setup(&["--backend-api-key", API_KEY]).await;
        let mut ids = Vec::new();
        for p in &probes {
            fake.set_fault(p.fault.clone());
            let mut request = service
                .client
                .post(service.url("/v1/systemone"))
                .header("content-type", p.content_type)
                .body(p.body.clone());
            if let Some(enc) = p.encoding {
                request = request.header("content-encoding", enc);
            }
            let response = request.send().await.expect("service answers");
            let status = response.status().as_u16();
            let id = response
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .expect("request id")
                .to_string();
            let headers = format!("{:?}", response.headers());
            let text = response.text().await.expect("body");
            assert_eq!(status, p.status, "{}: {text}", p.name);
            if status == 200 {
                assert!(
                    text.contains(CANARY),
                    "{}: ids are echoed in answers",
                    p.name
                );
            }
            for secret in [
                API_KEY,
                "sk-backend",
                "secret-backend",
                "CUDA",
                &fake.base_url(),
            ] {
                assert!(
                    !text.contains(secret) && !headers.contains(secret),
                    "{}: the response carries {secret:?}: {headers} {text}",
                    p.name
                );
            }
            ids.push((id, p.name));
        }
        fake.set_fault(Fault::None);
        assert!(
            fake.chat_bodies()
                .iter()
                .any(|b| b.to_string().contains(CANARY)),
            "the canary reached the backend, so the logs had a chance to leak it"
        );
        ids
    });
    let text = log.text();
    assert!(!text.is_empty(), "nothing was logged");
    for (id, name) in &ids {
        assert!(
            text.lines()
                .any(|l| l.contains("request finished") && l.contains(id.as_str())),
            "{name}: no 'request finished' line with {id}"
        );
    }
    // The contract logs the backend's own error text once, at warn, with the request id:
    // proof that the backend failure paths were captured too.
    let (id_500, _) = ids
        .iter()
        .find(|(_, name)| *name == "backend 500")
        .expect("a backend 500 probe");
    let warned = text
        .lines()
        .filter(|l| l.contains("CUDA error") && l.contains("WARN") && l.contains(id_500.as_str()))
        .count();
    assert!(
        warned >= 1,
        "no warn line with the backend's error text and {id_500}"
    );
    for (i, line) in text.lines().enumerate() {
        assert!(
            !line.contains(CANARY),
            "log line {i} leaks the canary: {line}"
        );
        assert!(
            !line.contains(API_KEY),
            "log line {i} leaks the API key: {line}"
        );
    }
}
