//! Robustness of `POST /v1/systemone` for valid requests, by a property test: requests
//! valid by construction (`tests/hermetic/setup/props.rs`), pushed through the real router
//! in-process against a fake vLLM server, always get a 200 whose answers obey the
//! contract's response rules.

use crate::support;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

use crate::setup::props::{run, valid_request, Harness, ValidQuestion};

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

/// Every number in `v` is finite and nothing is `null` (the wire writes NaN and ±inf as
/// `null`); `path` names where, for the failure message.
fn assert_all_finite(v: &Value, path: &str) {
    match v {
        Value::Null => panic!("{path} is null"),
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite(), "{path} is {n}");
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                assert_all_finite(item, &format!("{path}.{i}"));
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                assert_all_finite(item, &format!("{path}.{k}"));
            }
        }
        Value::Bool(_) | Value::String(_) => {}
    }
}

/// Issue 29's reproduction: a subnormal temperature (`1e-310`, where `1/T` overflows) once
/// answered 200 with `"probabilities": {"p": null, …}`. Now every question type answers with
/// finite numbers: all the weight on the most probable option, at the temperature asked.
#[tokio::test]
async fn a_subnormal_temperature_answers_finite_numbers() {
    let (_fake, service) = support::setup(&[]).await;
    let bodies = [
        r#"{"temperature": 1e-310, "state": "x", "questions": {"a": {"type": "choice", "criteria": {"p": "1", "q": "2", "r": "3"}}}}"#,
        r#"{"temperature": 1e-310, "state": "x", "questions": {"a": {"type": "noul", "instructions": "yes?"}}}"#,
        r#"{"temperature": 5e-324, "state": "x", "questions": {"a": {"type": "score", "criteria": ["low", "mid", "high"]}}}"#,
        r#"{"temperature": 1.7976931348623157e308, "state": "x", "questions": {"a": {"type": "choice", "criteria": {"p": "1", "q": "2", "r": "3"}}}}"#,
    ];
    for body in bodies {
        let reply = support::Reply::read(
            service
                .client
                .post(service.url("/v1/systemone"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("service answers"),
        )
        .await;
        assert_eq!(reply.status, 200, "{body}: {}", reply.text);
        assert_all_finite(&reply.body, "body");
        let answer = &reply.body["answers"]["a"];
        let confidence = answer["confidence"].as_f64().expect("confidence");
        assert!((0.0..=1.0).contains(&confidence), "{}", reply.text);
        if let Some(p) = answer["probabilities"].as_object() {
            let sum: f64 = p.values().map(|x| x.as_f64().expect("a number")).sum();
            assert!(close(sum, 1.0), "{}", reply.text);
        }
        let t: f64 = body[16..body.find(',').expect("a comma")]
            .parse()
            .expect("the temperature");
        assert_eq!(answer["temperature"].as_f64(), Some(t), "{}", reply.text);
    }
}
