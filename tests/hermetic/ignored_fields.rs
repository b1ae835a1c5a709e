//! Unknown top-level fields are ignored (clients send their own), and the answer says which:
//! `x-systemone-ignored-fields` names them, so a misspelled `"temprature"` does not pass
//! unnoticed. Names a header cannot carry as they are are counted, not repeated.

use serde_json::{json, Value};

use crate::support::fake_vllm::FakeVllm;
use crate::support::{ask, config, criteria, start};

const HEADER: &str = "x-systemone-ignored-fields";

fn body(extra: &[(&str, Value)]) -> Value {
    let mut body = json!({
        "state": "A customer asks for a refund.",
        "questions": {"q": {"type": "choice", "instructions": "Pick one.", "criteria": criteria(3)}},
    });
    for (k, v) in extra {
        body[*k] = v.clone();
    }
    body
}

#[tokio::test]
async fn the_answer_names_the_top_level_fields_it_ignored() {
    let fake = FakeVllm::start().await;
    let service = start(config(
        &fake.base_url(),
        &["--token-check-interval-secs", "0"],
    ))
    .await;

    let reply = ask(
        &service,
        &body(&[("temperature", json!(1)), ("layout", json!("cost"))]),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.headers.get(HEADER).is_none(), "nothing ignored");

    let reply = ask(
        &service,
        &body(&[("temprature", json!(1)), ("metadata", json!({}))]),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let named = reply
        .headers
        .get(HEADER)
        .expect("header")
        .to_str()
        .expect("ascii");
    assert_eq!(named, "temprature, metadata", "in body order");

    let long = "x".repeat(65);
    let reply = ask(
        &service,
        &body(&[("día", json!(1)), (&long, json!(2)), ("ok_name", json!(3))]),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let named = reply
        .headers
        .get(HEADER)
        .expect("header")
        .to_str()
        .expect("ascii");
    assert_eq!(named, "ok_name, (2 more)");

    let reply = ask(&service, &body(&[("día", json!(1))])).await;
    let named = reply
        .headers
        .get(HEADER)
        .expect("header")
        .to_str()
        .expect("ascii");
    assert_eq!(named, "(1 more)");
}
