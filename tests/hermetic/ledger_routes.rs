//! The ledger's routes answer every refusal in the error contract's shape (the JSON body
//! and `x-systemone-error-code`), read an outcome body as the doors read theirs (gzip and
//! zstd, strict JSON, a size limit in that shape) and never repeat the caller's text; a
//! page of the list is bounded in bytes as well as rows.

use serde_json::{json, Value};

use crate::body_memory::gzip;
use crate::fake_vllm::FakeVllm;
use crate::support::ledger::{Backend, LedgerDb};
use crate::support::ledger_suite::{list_all, service, three_questions};
use crate::support::{ask, ask_as, assert_error, get, get_as, Reply, Service};

const LABEL_CANARY: &str = "canary-outcome-label-7d2a";
const QUESTION_CANARY: &str = "canary-outcome-question-7d2a";

/// POSTs `body` as is, with `headers`, to the outcomes of `request_id` (a path segment).
async fn post_outcome(
    service: &Service,
    request_id: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let path = format!("/v1/ledger/decisions/{request_id}/outcomes");
    let mut request = service.client.post(service.url(&path)).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Reply::read(request.send().await.expect("service answers")).await
}

/// A service with a ledger and the request id of one answered request on record (with
/// the fake backend, kept alive for the test).
async fn answered() -> (FakeVllm, Service, String) {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (fake, service) = service(&db, &[]).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    let reply = ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let id = reply
        .header("x-request-id")
        .expect("a request id")
        .to_owned();
    (fake, service, id)
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn an_outcome_body_over_its_limit_is_a_413_in_the_contract_shape() {
    let (_fake, service, id) = answered().await;
    let note = "x".repeat(3 * 1024 * 1024);
    let body = json!({"question": "refund", "outcome": true, "note": note});
    let reply = post_outcome(&service, &id, &[JSON], body.to_string().into_bytes()).await;
    assert_error(&reply, 413, "system_one_body_too_large", "cap_exceeded");
}

#[tokio::test]
async fn a_request_id_that_is_not_text_is_a_404_in_the_contract_shape() {
    let (_fake, service, _) = answered().await;
    let reply = get(&service, "/v1/ledger/decisions/%FF%FE").await;
    assert_error(&reply, 404, "system_one_decision_not_found", "invalid");
    let body = json!({"question": "refund", "outcome": true}).to_string();
    let reply = post_outcome(&service, "%FF%FE", &[JSON], body.into_bytes()).await;
    assert_error(&reply, 404, "system_one_decision_not_found", "invalid");
}

#[tokio::test]
async fn an_outcome_body_naming_a_key_twice_is_refused_as_the_doors_refuse_it() {
    let (_fake, service, id) = answered().await;
    let body = br#"{"question": "refund", "outcome": true, "outcome": false}"#.to_vec();
    let reply = post_outcome(&service, &id, &[JSON], body).await;
    assert_error(&reply, 422, "system_one_duplicate_key", "invalid");
}

#[tokio::test]
async fn outcome_refusals_never_repeat_the_callers_label_or_question() {
    let (_fake, service, id) = answered().await;
    for body in [
        json!({"question": "team", "outcome": LABEL_CANARY}),
        json!({"question": QUESTION_CANARY, "outcome": LABEL_CANARY}),
        json!({"question": "team", "outcome": "bug", LABEL_CANARY: 1}),
    ] {
        let reply = post_outcome(&service, &id, &[JSON], body.to_string().into_bytes()).await;
        assert_error(&reply, 422, "system_one_bad_outcome", "invalid");
        assert!(!reply.text.contains("canary"), "{}", reply.text);
    }
    let first = json!({"question": "team", "outcome": "bug"}).to_string();
    let reply = post_outcome(&service, &id, &[JSON], first.clone().into_bytes()).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let again = post_outcome(&service, &id, &[JSON], first.into_bytes()).await;
    assert_error(&again, 409, "system_one_outcome_exists", "invalid");
    assert!(!again.message().contains("team"), "{}", again.text);
}

#[tokio::test]
async fn gzip_and_zstd_outcome_bodies_are_decoded_as_the_doors_decode_them() {
    let (_fake, service, id) = answered().await;
    let plain = |question: &str| {
        let body: Value = json!({"question": question, "outcome": true});
        body.to_string().into_bytes()
    };
    let gz = gzip(&plain("refund"));
    let reply = post_outcome(&service, &id, &[JSON, ("content-encoding", "gzip")], gz).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.body["index"], 1);
    let zst = zstd::encode_all(&plain("refund")[..], 3).expect("compresses");
    let replace = json!({"question": "refund", "outcome": false, "replace": true});
    let zst_replace = zstd::encode_all(replace.to_string().as_bytes(), 3).expect("compresses");
    let headers = [JSON, ("content-encoding", "zstd")];
    let reply = post_outcome(&service, &id, &headers, zst).await;
    assert_error(&reply, 409, "system_one_outcome_exists", "invalid");
    let reply = post_outcome(&service, &id, &headers, zst_replace).await;
    assert_eq!((reply.status, &reply.body["index"]), (201, &json!(0)));
    let br = post_outcome(&service, &id, &[JSON, ("content-encoding", "br")], vec![1]).await;
    assert_error(&br, 415, "system_one_unsupported_encoding", "invalid");
}

/// Records with full inputs of 1.5 MiB each: a page stops short of its row limit at the
/// byte budget (4 MiB), and its cursor continues to every record, each listed once.
#[tokio::test]
async fn a_page_ends_at_its_byte_budget_and_its_cursor_continues() {
    const KEY: &str = "sk-ledger-pages-5b1d";
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (_fake, service) = service(&db, &["--api-keys", KEY]).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    for _ in 0..3 {
        assert_eq!(ask_as(&service, Some(KEY), &body).await.status, 200);
    }
    let store = service.state.ledger.store().expect("the ledger is on");
    let large = Value::from("x".repeat(3 * 512 * 1024)).to_string();
    sqlx::query("UPDATE decisions SET inputs = $1")
        .bind(large)
        .execute(&store.pool())
        .await
        .expect("the records grow");
    let first = get_as(&service, "/v1/ledger/decisions?limit=10", Some(KEY)).await;
    assert_eq!(first.status, 200);
    let rows = first.body["decisions"].as_array().expect("decisions").len();
    assert!((1..3).contains(&rows), "{rows} records on the first page");
    assert!(first.body["next_cursor"].is_string(), "a cursor continues");
    let all = list_all(&service, KEY, "", 10).await;
    let mut ids: Vec<&str> = all
        .iter()
        .map(|d| d["request_id"].as_str().expect("id"))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "every record, once");
}
