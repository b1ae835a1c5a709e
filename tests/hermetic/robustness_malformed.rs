//! Robustness of `POST /v1/systemone` against malformed requests, by property tests that
//! push arbitrary bytes, arbitrary nested JSON and structured-but-wrong requests (random
//! types in every known field, or valid requests with fields replaced or removed) through
//! the real router in-process (`tower::ServiceExt::oneshot`, `tests/hermetic/setup/props.rs`),
//! against a fake vLLM server: the handler never panics, the status is one the contract
//! lists, every error has a JSON body whose `error.code` starts with `system_one_` and equals
//! `x-systemone-error-code`, and a request refused with a 400, 413, 415 or 422 never reached
//! the backend.

use std::sync::Mutex;

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::setup::props::{run, string, valid_description, valid_request, Harness};

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
