//! Privacy of `POST /v1/systemone`: a canary. Requests carrying `CANARY-7f3a` in every
//! caller-content field, some answered, some refused, some failing at the backend, are
//! logged at TRACE into memory; the log never holds the canary nor the backend API key.
//! A second canary, `KEYCANARY-2d8c`, sits only in the caller's keys and values that are
//! not question ids (state keys, option labels, unknown fields, history keys, noul criteria
//! keys, numbers in the state), repeated or refused: no error body ever holds it either
//! (a duplicate key is located by path and position, never named as `the key "K"`).

use crate::support;

use serde_json::{json, Value};

use crate::support::fake_vllm::Fault;

const CANARY: &str = "CANARY-7f3a";
/// Never in a question id, so never in any response body of a refused request.
const KEY_CANARY: &str = "KEYCANARY-2d8c";
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

/// Refused bodies with [`KEY_CANARY`] as a repeated state key, a repeated option label (a
/// choice's and a noul's), a repeated key deep in the state, an unknown question field, a
/// history key naming no question, a noul criteria key, and a state number beyond `f64`.
fn key_canary_probes() -> Vec<Probe> {
    let k = KEY_CANARY;
    let q = r#""q": {"type": "noul", "instructions": "x"}"#;
    let bodies = [
        ("duplicate state key", format!(r#"{{"state": {{"{k}": 1, "{k}": 2}}, "questions": {{{q}}}}}"#)),
        ("duplicate state key, deep", format!(r#"{{"state": [{{"a": {{"{k}": 1, "{k}": 2}}}}], "questions": {{{q}}}}}"#)),
        ("duplicate option label", format!(r#"{{"state": "s", "questions": {{"q": {{"type": "choice", "criteria": {{"{k}": "a", "b": "b", "{k}": "c"}}}}}}}}"#)),
        ("duplicate option label with a line break", format!(r#"{{"state": "s", "questions": {{"q": {{"type": "choice", "criteria": {{"{k}\n": 1, "{k}\n": 2}}}}}}}}"#)),
        ("duplicate noul criteria key", r#"{"state": "s", "questions": {"q": {"type": "noul", "criteria": {"true": "a", "true": "b"}}}}"#.to_string()),
        ("duplicate key in a description", format!(r#"{{"state": "s", "questions": {{"q": {{"type": "choice", "criteria": {{"a": {{"{k}": 1, "{k}": 2}}}}}}}}}}"#)),
        ("duplicate unknown top-level key", format!(r#"{{"{k}": 1, "{k}": 2, "state": "s", "questions": {{{q}}}}}"#)),
        ("unknown question field", format!(r#"{{"state": "s", "questions": {{"q": {{"type": "noul", "instructions": "x", "{k}": 1}}}}}}"#)),
        ("history key naming no question", format!(r#"{{"state": "s", "questions": {{{q}}}, "history": {{"{k}": "h"}}}}"#)),
        ("noul criteria key", format!(r#"{{"state": "s", "questions": {{"q": {{"type": "noul", "criteria": {{"{k}": "a"}}}}}}}}"#)),
        ("state number beyond f64", format!(r#"{{"state": {{"{k}": 1{}.5}}, "questions": {{{q}}}}}"#, "0".repeat(400))),
        ("state number beyond f64, as written", r#"{"state": [8.20e999], "questions": {"q": {"type": "noul", "instructions": "x"}}}"#.to_string()),
    ];
    bodies
        .into_iter()
        .map(|(name, body)| Probe {
            body_holds_no_canary: true,
            ..probe(name, body, 422)
        })
        .collect()
}

/// One request of the canary scenario.
struct Probe {
    name: &'static str,
    fault: Fault,
    body: Vec<u8>,
    content_type: &'static str,
    encoding: Option<&'static str>,
    status: u16,
    /// The response body must not hold [`KEY_CANARY`] (nor `8.20e999`, nor `e+999`).
    body_holds_no_canary: bool,
}

fn probe(name: &'static str, body: impl Into<Vec<u8>>, status: u16) -> Probe {
    Probe {
        name,
        fault: Fault::None,
        body: body.into(),
        content_type: "application/json",
        encoding: None,
        status,
        body_holds_no_canary: false,
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
        probe(
            "answered, an ignored top-level field",
            canary_request(&[(CANARY, json!(c(" ignored")))]).to_string(),
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
    probes.extend(key_canary_probes());
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

/// Caller content never reaches the logs: with a TRACE subscriber writing every event and
/// span (text and JSON formats) into memory, requests carrying `CANARY-7f3a` in the state,
/// question ids, instructions, labels, descriptions, levels and history, answered, refused
/// by validation and failed by the backend (500, protocol breaks, 429, 503), each leave a
/// "request finished" line with their request id, but the log never holds the canary, nor
/// the backend API key. Error bodies never carry the key, the backend's URL or its error
/// text.
#[test]
fn caller_content_and_the_api_key_never_reach_the_logs() {
    let log = support::log::capture();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let probes = probes();
    let ids: Vec<(String, &'static str)> = runtime.block_on(async {
        let (fake, service) = support::setup(&["--backend-api-key", API_KEY]).await;
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
            if p.body_holds_no_canary {
                for secret in [KEY_CANARY, "8.20e999", "e+999", "1000000000"] {
                    assert!(
                        !text.contains(secret) && !headers.contains(secret),
                        "{}: the response carries the caller's {secret:?}: {text}",
                        p.name
                    );
                }
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
    // The backend's error is logged once, at warn, with the request id, by its status,
    // length and hash (a backend may echo the prompt, so never its text): proof
    // that the backend failure paths were captured too.
    let (id_500, _) = ids
        .iter()
        .find(|(_, name)| *name == "backend 500")
        .expect("a backend 500 probe");
    let warned = text
        .lines()
        .filter(|l| {
            l.contains("backend answered an error")
                && l.contains("WARN")
                && l.contains("body_bytes")
                && l.contains(id_500.as_str())
        })
        .count();
    assert!(
        warned >= 1,
        "no warn line with the backend's error status and length and {id_500}"
    );
    assert!(
        !text.contains("CUDA error"),
        "the backend's error text is not logged without --log-backend-error-text"
    );
    for (i, line) in text.lines().enumerate() {
        assert!(
            !line.contains(CANARY) && !line.contains(KEY_CANARY),
            "log line {i} leaks the canary: {line}"
        );
        assert!(
            !line.contains(API_KEY),
            "log line {i} leaks the API key: {line}"
        );
    }
}
