//! A native server's answer, checked against the contract's types before anything of it
//! reaches a caller: `model` a string, `answers` one object per question sent, of the
//! question's `type`, with its value (`choice` one of the labels, `noul` a probability,
//! `score` a number), `probabilities` over exactly the question's options summing to 1
//! (choice, score),
//! `confidence` a probability; `temperature` and `option_mass` numbers when present;
//! `usage` (optional) with whole token counts. A field that is missing or of the wrong type
//! is an error naming it by the question's position (`answers[2].probabilities`; the ids
//! are the caller's), never a pass-through. Fields this service does not know are kept,
//! in the upstream's order, to be written back as they came.

use serde_json::{Map, Value};

use crate::backend::{BackendError, ReadUsage};
use crate::json::type_name as kind;
use crate::question::{LoweredQuestion, QuestionKind};

/// One checked answer.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeAnswer {
    /// In the question's option order (a noul: `[no, yes]`).
    pub probabilities: Vec<f64>,
    /// The upstream's confidence, as it calibrated it.
    pub confidence: f64,
    /// Every other field (`temperature`, `option_mass`, extensions), as the upstream
    /// wrote them, in its order.
    pub passed: Map<String, Value>,
}

/// A checked answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeReply {
    /// The model the upstream says served.
    pub model: String,
    /// One per question sent, in order.
    pub answers: Vec<NativeAnswer>,
    /// The upstream's usage, when it reported one; with whether it called it estimated.
    pub usage: Option<(ReadUsage, bool)>,
}

/// The answer body checked against `questions` (the questions sent, in order).
pub fn check(body: &[u8], questions: &[&LoweredQuestion]) -> Result<NativeReply, BackendError> {
    let body: Value =
        serde_json::from_slice(body).map_err(|_| contract("the answer", "is not JSON".into()))?;
    let top = object(&body, "the answer")?;
    let model = model_name(string(top, "model", "model")?)?;
    let answers = object(field(top, "answers", "answers")?, "answers")?;
    let answers = questions
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let at = format!("answers[{i}]");
            let answer = answers
                .get(&q.id)
                .ok_or_else(|| contract(&at, "is missing".into()))?;
            check_answer(object(answer, &at)?, q, &at)
        })
        .collect::<Result<_, _>>()?;
    let usage = match top.get("usage") {
        None | Some(Value::Null) => None,
        Some(u) => Some(check_usage(object(u, "usage")?)?),
    };
    Ok(NativeReply {
        model,
        answers,
        usage,
    })
}

/// One answer: its type's fields, the confidence, the optional numbers; the rest kept.
fn check_answer(
    answer: &Map<String, Value>,
    q: &LoweredQuestion,
    at: &str,
) -> Result<NativeAnswer, BackendError> {
    let kind = string(answer, "type", &format!("{at}.type"))?;
    if kind != q.kind.as_str() {
        return Err(contract(
            &format!("{at}.type"),
            format!("must be \"{}\", the question's type", q.kind.as_str()),
        ));
    }
    let probabilities = match q.kind {
        QuestionKind::Choice => check_choice(answer, q, at)?,
        QuestionKind::Noul => {
            let yes = probability(answer, "noul", at)?;
            vec![1.0 - yes, yes]
        }
        QuestionKind::Score => check_score(answer, q, at)?,
    };
    let confidence = probability(answer, "confidence", at)?;
    for optional in ["temperature", "option_mass"] {
        if let Some(v) = answer.get(optional).filter(|v| !v.is_null()) {
            finite(v, &format!("{at}.{optional}"))?;
        }
    }
    let ours = [
        "type",
        "choice",
        "noul",
        "score",
        "legend",
        "probabilities",
        "confidence",
    ];
    let passed = answer
        .iter()
        .filter(|(k, _)| !ours.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(NativeAnswer {
        probabilities,
        confidence,
        passed,
    })
}

/// A choice: `choice` one of the labels, `probabilities` over exactly the labels.
fn check_choice(
    answer: &Map<String, Value>,
    q: &LoweredQuestion,
    at: &str,
) -> Result<Vec<f64>, BackendError> {
    let choice = string(answer, "choice", &format!("{at}.choice"))?;
    if !q.options.iter().any(|o| o.label == choice) {
        return Err(contract(
            &format!("{at}.choice"),
            "is not one of the question's labels".into(),
        ));
    }
    let keys: Vec<&str> = q.options.iter().map(|o| o.label.as_str()).collect();
    distribution(answer, &keys, at)
}

/// A score: `score` a number, `probabilities` keyed `"0"`…, `legend` an object if present.
fn check_score(
    answer: &Map<String, Value>,
    q: &LoweredQuestion,
    at: &str,
) -> Result<Vec<f64>, BackendError> {
    finite(
        field(answer, "score", &format!("{at}.score"))?,
        &format!("{at}.score"),
    )?;
    if let Some(legend) = answer.get("legend") {
        object(legend, &format!("{at}.legend"))?;
    }
    let keys: Vec<String> = (0..q.options.len()).map(|i| i.to_string()).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    distribution(answer, &keys, at)
}

/// `probabilities`: an object with a probability for each of `keys` and nothing else,
/// returned in `keys`' order. Keys are named by position: they may be the caller's labels.
fn distribution(
    answer: &Map<String, Value>,
    keys: &[&str],
    at: &str,
) -> Result<Vec<f64>, BackendError> {
    let here = format!("{at}.probabilities");
    let p = object(field(answer, "probabilities", &here)?, &here)?;
    if p.len() != keys.len() {
        return Err(contract(
            &here,
            format!(
                "must hold the question's {} options, got {} entries",
                keys.len(),
                p.len()
            ),
        ));
    }
    let probabilities = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let at = format!("{here}[option {i}]");
            let v = p
                .get(*k)
                .ok_or_else(|| contract(&at, "is missing".into()))?;
            in_unit(finite(v, &at)?, &at)
        })
        .collect::<Result<Vec<f64>, _>>()?;
    let total: f64 = probabilities.iter().sum();
    if (total - 1.0).abs() > SUM_TOLERANCE {
        return Err(contract(&here, format!("must sum to 1, got {total}")));
    }
    Ok(probabilities)
}

/// How far from 1 a distribution's sum may be (rounding of the upstream's JSON numbers).
const SUM_TOLERANCE: f64 = 1e-6;

/// `usage`: whole token counts (`input_tokens`, `output_tokens`; `cached_tokens` and
/// `estimated` when present), each within [`ReadUsage::plausible`]'s bound.
fn check_usage(u: &Map<String, Value>) -> Result<(ReadUsage, bool), BackendError> {
    let count = |name: &str, required: bool| -> Result<u64, BackendError> {
        let at = format!("usage.{name}");
        match u.get(name) {
            None if !required => Ok(0),
            None => Err(contract(&at, "is missing".into())),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| contract(&at, format!("must be a whole number, got {}", kind(v)))),
        }
    };
    let prompt_tokens = count("input_tokens", true)?;
    let cached_tokens = count("cached_tokens", false)?;
    // Another `systemone` reports what its backend evaluated; other providers do not, so
    // it is what their cache did not serve.
    let evaluated_tokens = match u.get("evaluated_tokens") {
        None => prompt_tokens.saturating_sub(cached_tokens),
        Some(_) => count("evaluated_tokens", true)?,
    };
    let usage = ReadUsage {
        prompt_tokens,
        completion_tokens: count("output_tokens", true)?,
        cached_tokens,
        evaluated_tokens,
    }
    .plausible()?;
    let estimated = match u.get("estimated") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(contract(
                "usage.estimated",
                format!("must be a boolean, got {}", kind(v)),
            ))
        }
    };
    Ok((usage, estimated))
}

/// A number in [0, 1] at `answer.name`.
fn probability(answer: &Map<String, Value>, name: &str, at: &str) -> Result<f64, BackendError> {
    let at = format!("{at}.{name}");
    in_unit(finite(field(answer, name, &at)?, &at)?, &at)
}

fn in_unit(x: f64, at: &str) -> Result<f64, BackendError> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(contract(at, "must be a probability in [0, 1]".into()))
    }
}

fn field<'v>(map: &'v Map<String, Value>, name: &str, at: &str) -> Result<&'v Value, BackendError> {
    map.get(name)
        .ok_or_else(|| contract(at, "is missing".into()))
}

fn object<'v>(v: &'v Value, at: &str) -> Result<&'v Map<String, Value>, BackendError> {
    v.as_object()
        .ok_or_else(|| contract(at, format!("must be an object, got {}", kind(v))))
}

fn string<'v>(map: &'v Map<String, Value>, name: &str, at: &str) -> Result<&'v str, BackendError> {
    let v = field(map, name, at)?;
    v.as_str()
        .ok_or_else(|| contract(at, format!("must be a string, got {}", kind(v))))
}

/// Longest `model` an upstream may name, in bytes.
const MAX_MODEL_BYTES: usize = 256;

/// The upstream's `model`, accepted only as a short identifier: 1 to [`MAX_MODEL_BYTES`]
/// bytes of `[A-Za-z0-9._:/@+-]` (what model ids are made of: `org/name`, `llama3:8b`,
/// `name@rev`). The service repeats it to the caller and copies it into every question of
/// the ledger record, so anything else (a megabyte of text, markup, an error message) is a
/// broken protocol, refused without repeating it.
fn model_name(model: &str) -> Result<String, BackendError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._:/@+-".contains(c);
    if model.is_empty() || model.len() > MAX_MODEL_BYTES || !model.chars().all(allowed) {
        return Err(contract(
            "model",
            format!("must be an identifier of 1 to {MAX_MODEL_BYTES} bytes of A-Z a-z 0-9 . _ : / @ + -"),
        ));
    }
    Ok(model.to_owned())
}

fn finite(v: &Value, at: &str) -> Result<f64, BackendError> {
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| contract(at, format!("must be a finite number, got {}", kind(v))))
}

fn contract(at: &str, problem: String) -> BackendError {
    BackendError::Contract(format!("{at} {problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::question::{lower_choice, lower_noul, lower_score};
    use serde_json::json;

    fn questions() -> Vec<LoweredQuestion> {
        vec![
            lower_choice(
                "team".into(),
                json!("Which?"),
                vec![("billing".into(), Value::Null), ("bug".into(), Value::Null)],
            ),
            lower_noul("refund".into(), json!("Refund?"), Value::Null, Value::Null),
            lower_score(
                "urgency".into(),
                json!("How urgent?"),
                vec![json!("low"), json!("high")],
            ),
        ]
    }

    fn good() -> Value {
        json!({
            "model": "jev-1.13.0",
            "answers": {
                "team": {"type": "choice", "choice": "bug", "probabilities": {"billing": 0.25, "bug": 0.75}, "confidence": 0.19, "temperature": 2.4, "x_reason": "kept"},
                "refund": {"type": "noul", "noul": 0.9, "confidence": 0.53},
                "urgency": {"type": "score", "score": 0.5, "legend": {"0": "low", "1": "high"}, "probabilities": {"0": 0.5, "1": 0.5}, "confidence": 0.0}
            },
            "usage": {"input_tokens": 120, "output_tokens": 3, "cached_tokens": 7, "upstream_requests": 3}
        })
    }

    fn run(body: &Value) -> Result<NativeReply, BackendError> {
        let qs = questions();
        let refs: Vec<&LoweredQuestion> = qs.iter().collect();
        check(&serde_json::to_vec(body).expect("json"), &refs)
    }

    #[test]
    fn a_good_answer_is_read_in_option_order_and_keeps_unknown_fields() {
        let reply = run(&good()).expect("checks");
        assert_eq!(reply.model, "jev-1.13.0");
        assert_eq!(reply.answers[0].probabilities, vec![0.25, 0.75]);
        assert_eq!(reply.answers[1].probabilities, vec![1.0 - 0.9, 0.9]);
        assert_eq!(
            reply.answers[0].passed.get("x_reason"),
            Some(&json!("kept"))
        );
        assert_eq!(
            reply.answers[0].passed.get("temperature"),
            Some(&json!(2.4))
        );
        let (usage, estimated) = reply.usage.expect("reported");
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cached_tokens,
                estimated
            ),
            (120, 3, 7, false)
        );
    }

    /// Each broken field is refused with its name (by position), never passed on.
    #[test]
    fn every_missing_or_mistyped_field_is_named() {
        type Breaker = fn(&mut Value);
        let cases: Vec<(&str, Breaker)> = vec![
            ("model is missing", |v| {
                v["model"].take();
                v.as_object_mut().expect("o").remove("model");
            }),
            ("model must be a string, got a number", |v| {
                v["model"] = json!(7)
            }),
            ("model must be an identifier of 1 to 256 bytes", |v| {
                v["model"] = json!("x".repeat(257))
            }),
            ("model must be an identifier", |v| {
                v["model"] = json!("jev 1.13 <b>")
            }),
            ("answers must be an object, got an array", |v| {
                v["answers"] = json!([])
            }),
            ("answers[1] is missing", |v| {
                v["answers"].as_object_mut().expect("o").remove("refund");
            }),
            ("answers[0].type must be \"choice\"", |v| {
                v["answers"]["team"]["type"] = json!("noul")
            }),
            (
                "answers[0].choice is not one of the question's labels",
                |v| v["answers"]["team"]["choice"] = json!("other"),
            ),
            ("answers[0].probabilities[option 1] is missing", |v| {
                v["answers"]["team"]["probabilities"] = json!({"billing": 0.5, "x": 0.5});
            }),
            (
                "answers[0].probabilities must hold the question's 2 options, got 3",
                |v| v["answers"]["team"]["probabilities"]["z"] = json!(0.0),
            ),
            (
                "answers[0].probabilities[option 0] must be a finite number, got a string",
                |v| v["answers"]["team"]["probabilities"]["billing"] = json!("0.25"),
            ),
            ("answers[0].probabilities must sum to 1, got 1.5", |v| {
                v["answers"]["team"]["probabilities"]["billing"] = json!(0.75)
            }),
            ("answers[0].confidence must be a probability", |v| {
                v["answers"]["team"]["confidence"] = json!(1.5)
            }),
            (
                "answers[0].temperature must be a finite number, got a string",
                |v| v["answers"]["team"]["temperature"] = json!("hot"),
            ),
            ("answers[1].noul is missing", |v| {
                v["answers"]["refund"]
                    .as_object_mut()
                    .expect("o")
                    .remove("noul");
            }),
            (
                "answers[1].confidence must be a finite number, got null",
                |v| v["answers"]["refund"]["confidence"] = Value::Null,
            ),
            (
                "answers[2].score must be a finite number, got a string",
                |v| v["answers"]["urgency"]["score"] = json!("x"),
            ),
            ("answers[2].legend must be an object, got an array", |v| {
                v["answers"]["urgency"]["legend"] = json!([])
            }),
            (
                "usage.input_tokens must be a whole number, got a number",
                |v| v["usage"]["input_tokens"] = json!(1.5),
            ),
            ("usage.output_tokens is missing", |v| {
                v["usage"]
                    .as_object_mut()
                    .expect("o")
                    .remove("output_tokens");
            }),
        ];
        for (want, breaker) in cases {
            let mut body = good();
            breaker(&mut body);
            match run(&body) {
                Err(BackendError::Contract(got)) => {
                    assert!(got.starts_with(want), "{want}: got {got}")
                }
                other => panic!("{want}: got {other:?}"),
            }
        }
        assert!(
            matches!(check(b"<html>", &[]), Err(BackendError::Contract(m)) if m == "the answer is not JSON")
        );
    }

    #[test]
    fn a_missing_usage_is_none_and_the_callers_ids_never_appear_in_errors() {
        let mut body = good();
        body.as_object_mut().expect("o").remove("usage");
        assert_eq!(run(&body).expect("checks").usage, None);
        body["answers"]["team"]["probabilities"] = json!({"billing": 0.5});
        let Err(BackendError::Contract(m)) = run(&body) else {
            panic!("refused")
        };
        assert!(!m.contains("team") && !m.contains("billing"), "{m}");
    }
}
