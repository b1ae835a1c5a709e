//! The decision ledger: the same suite on a real SQLite file and a real
//! PostgreSQL (`SYSTEMONE_POSTGRES_URL_FOR_TESTS`, started by `scripts/test.sh`):
//!
//! * an answered request's record holds its request id, key, route, model, usage, and per
//!   question the type, option count, the answer's index, the probabilities the caller got
//!   (to the bit), confidence, temperature and option mass; names and labels only as keyed
//!   hashes (the test recomputes them with the key); a refusal (422) is a record with its
//!   status and code; the rerank door records too;
//! * privacy: canaries in the state, question ids, labels and instructions reach neither
//!   the database (file and WAL bytes, every PostgreSQL row as text), the logs, nor
//!   `/metrics`; with `--ledger-inputs full` the same scan does find them (so the scan can
//!   see what it looks for);
//! * the failure policy: with the ledger's table locked by another connection past
//!   `--ledger-timeout-ms`, `fail_closed` answers 503 `system_one_ledger_unavailable` and
//!   `fail_open` answers 200 and counts the miss, and `/readyz` says the ledger is
//!   unavailable (503 under `fail_closed`); once the lock is released both record again
//!   and `/readyz` says it is available;
//! * a store locked while more records arrive than the writer's queue holds, under
//!   `fail_open`: `/readyz` counts the records given up (`lost`, as the metric does) and
//!   those still queued, not only the backlog;
//! * PostgreSQL stopped and restarted under 8 callers: `fail_closed` answers 503 while it
//!   is down and every 200 is on record; `fail_open` keeps answering and counts what it
//!   could not record;
//! * `kill -9` of the real binary under 32 concurrent callers, then a restart on the same
//!   ledger: every request id a caller received a 200 for is on record with the
//!   probabilities it was answered, whole;
//! * retention: a sweep in the background deletes records older than
//!   `--ledger-retention-days` with their outcomes and erases full inputs older than
//!   `--ledger-inputs-retention-days`, and keeps the rest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Executor;

use super::fake_vllm::FakeVllm;
use super::ledger::{run_binary, start_with_ledger, Backend, LedgerDb, TEST_LEDGER_KEY};
use super::{config, post, Reply, Service};
use systemone::ledger::key::{Domain, LedgerKey};
use systemone::ledger::record::Decision;
use systemone::ledger::store::Store;
use systemone::secret::Secret;

const STATE_CANARY: &str = "canary-ledger-state-4f1e";
const NAME_CANARY: &str = "canary-ledger-name-4f1e";
const LABEL_CANARY: &str = "canary-ledger-label-4f1e";
const INSTRUCTIONS_CANARY: &str = "canary-ledger-instructions-4f1e";

fn key() -> LedgerKey {
    LedgerKey::new(Secret::new(TEST_LEDGER_KEY)).expect("key")
}

/// A fake vLLM and a service recording into `db`, with `extra` flags.
pub async fn service(db: &LedgerDb, extra: &[&str]) -> (FakeVllm, Service) {
    let fake = FakeVllm::start().await;
    let mut flags: Vec<String> = db.flags();
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let service = start_with_ledger(config(&fake.base_url(), &flags)).await;
    (fake, service)
}

pub fn three_questions(state: &str, name: &str, label: &str, instructions: &str) -> Value {
    json!({
        "state": state,
        "questions": {
            name: {"type": "choice", "instructions": instructions,
                   "criteria": {"billing": "money", label: "defects", "other": null}},
            "refund": {"type": "noul", "instructions": "Is a refund asked for?"},
            "urgency": {"type": "score", "instructions": "How urgent?",
                        "criteria": ["Routine", "Soon", "Immediate"]},
        }
    })
}

async fn record(service: &Service, request_id: &str) -> Decision {
    let store = service.state.ledger.store().expect("the ledger is on");
    store
        .decision(request_id)
        .await
        .expect("the ledger reads")
        .unwrap_or_else(|| panic!("{request_id} is on record"))
}

pub fn request_id(reply: &Reply) -> String {
    reply
        .header("x-request-id")
        .expect("a request id")
        .to_owned()
}

/// The record's probabilities are those the caller got, to the bit: a noul's P(yes) (its
/// option 1), a choice's or score's in option order.
fn assert_probabilities(recorded: &[f64], answer: &Value, what: &str) {
    if answer["type"] == "noul" {
        assert_eq!(recorded.len(), 2, "{what}");
        assert_eq!(Some(recorded[1]), answer["noul"].as_f64(), "{what}");
        return;
    }
    let got: Vec<f64> = answer["probabilities"]
        .as_object()
        .expect("probabilities")
        .values()
        .map(|p| p.as_f64().expect("number"))
        .collect();
    assert_eq!(recorded, got, "{what}");
}

pub async fn an_answer_and_a_refusal_are_on_record(backend: Backend) {
    let db = LedgerDb::new(backend).await;
    let (_fake, service) = service(&db, &[]).await;
    let body = three_questions("My card was charged twice", "team", "bug", "Which team?");
    let reply = super::ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let id = request_id(&reply);
    let got = record(&service, &id).await;
    let key = key();
    assert_eq!((got.status, got.code.as_deref()), (200, None));
    assert_eq!(got.route, "/v1/systemone");
    assert_eq!(got.key, "anonymous");
    assert_eq!(got.model.as_deref(), Some("glm-5.3-flash"));
    assert_eq!(got.hash_key_id, key.id());
    assert_eq!(
        got.usage.upstream_requests,
        reply.body["usage"]["upstream_requests"]
            .as_u64()
            .expect("usage")
    );
    assert_eq!(
        got.usage.input_tokens,
        reply.body["usage"]["input_tokens"].as_u64().expect("usage")
    );
    assert!(got.body_hash.as_deref().is_some_and(|h| h.len() == 32));
    let answers = reply.body["answers"].as_object().expect("answers");
    assert_eq!(got.questions.len(), 3);
    for ((name, answer), q) in answers.iter().zip(&got.questions) {
        assert_eq!(q.name, key.hash(Domain::Name, name), "{name}");
        assert_eq!(q.kind, answer["type"].as_str().expect("type"));
        assert_probabilities(&q.probabilities, answer, name);
        assert_eq!(q.options, q.probabilities.len());
        assert_eq!(
            q.confidence,
            answer["confidence"].as_f64().expect("confidence")
        );
        assert_eq!(
            q.temperature,
            answer["temperature"].as_f64().expect("temperature")
        );
        assert_eq!(q.option_mass, answer["option_mass"].as_f64());
        assert_eq!(q.model, reply.body["model"].as_str().expect("model"));
    }
    let team = &got.questions[0];
    let labels: Vec<String> = ["billing", "bug", "other"]
        .iter()
        .map(|l| key.hash(Domain::Label, l))
        .collect();
    assert_eq!(team.labels, labels);
    let chosen = answers["team"]["choice"].as_str().expect("choice");
    assert_eq!(
        team.answer,
        ["billing", "bug", "other"]
            .iter()
            .position(|l| *l == chosen)
            .expect("a label")
    );
    assert!(got.questions[1].labels.is_empty() && got.questions[2].labels.is_empty());

    let mut refused = body.clone();
    refused["temperature"] = json!(0);
    let reply = super::ask(&service, &refused).await;
    assert_eq!(reply.status, 422);
    let got = record(&service, &request_id(&reply)).await;
    assert_eq!(
        (got.status, got.code.as_deref()),
        (422, Some("system_one_bad_temperature"))
    );
    assert!(got.questions.is_empty() && got.body_hash.is_none());

    let rerank = json!({"query": "refund", "documents": ["a refund policy", "opening hours"]});
    let reply = post(&service.client, &service.url("/v2/rerank"), &rerank).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let got = record(&service, &request_id(&reply)).await;
    assert_eq!(
        (got.route.as_str(), got.status, got.questions.len()),
        ("/v2/rerank", 200, 2)
    );
}

/// Asks one request full of canaries and a refused one; returns what the database holds.
async fn canary_run(db: &LedgerDb, extra: &[&str]) -> (Service, String) {
    let (_fake, service) = service(db, extra).await;
    let body = three_questions(STATE_CANARY, NAME_CANARY, LABEL_CANARY, INSTRUCTIONS_CANARY);
    let reply = super::ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let mut refused = body.clone();
    refused["temperature"] = json!(-1);
    assert_eq!(super::ask(&service, &refused).await.status, 422);
    (service, db.dump().await)
}

pub async fn canaries_stay_out_of_the_ledger_logs_and_metrics(backend: Backend) {
    let log = super::log::capture();
    let canaries = [STATE_CANARY, NAME_CANARY, LABEL_CANARY, INSTRUCTIONS_CANARY];
    let db = LedgerDb::new(backend).await;
    let (service, dump) = canary_run(&db, &[]).await;
    assert!(dump.contains("glm-5.3-flash"), "the scan sees the records");
    let metrics = super::metrics(&service).await;
    assert!(
        metrics.contains("systemone_ledger_records_total"),
        "{metrics}"
    );
    for canary in canaries {
        assert!(!dump.contains(canary), "{canary} in the {backend:?} ledger");
        assert!(!log.text().contains(canary), "{canary} in the log");
        assert!(!metrics.contains(canary), "{canary} in /metrics");
    }
    // The same scan finds them where the operator asked for the inputs.
    let full = LedgerDb::new(backend).await;
    let (_, dump) = canary_run(&full, &["--ledger-inputs", "full"]).await;
    for canary in canaries {
        assert!(
            dump.contains(canary),
            "{canary} kept under --ledger-inputs full"
        );
    }
}

/// Locks the ledger's table from a connection of the test's own until dropped.
async fn lock_ledger(db: &LedgerDb) -> sqlx::AnyConnection {
    let mut conn = db.connect().await;
    let lock = match db.backend {
        Backend::Sqlite => "BEGIN EXCLUSIVE",
        Backend::Postgres => "BEGIN; LOCK TABLE decisions IN ACCESS EXCLUSIVE MODE",
    };
    conn.execute(lock).await.expect("lock");
    conn
}

pub async fn each_policy_does_what_it_says(backend: Backend) {
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    for policy in ["fail_closed", "fail_open"] {
        let db = LedgerDb::new(backend).await;
        let flags = ["--ledger-policy", policy, "--ledger-timeout-ms", "200"];
        let (_fake, service) = service(&db, &flags).await;
        assert_eq!(super::ask(&service, &body).await.status, 200);
        let mut lock = lock_ledger(&db).await;
        let reply = super::ask(&service, &body).await;
        match policy {
            "fail_closed" => {
                super::assert_error(&reply, 503, "system_one_ledger_unavailable", "unavailable");
                assert!(reply.retry_after().is_some());
            }
            _ => assert_eq!(reply.status, 200, "{}", reply.text),
        }
        // Readiness says so, from memory: 503 under `fail_closed`.
        let want = if policy == "fail_closed" { 503 } else { 200 };
        assert_ledger_readiness(&service, want, false, policy).await;
        let metrics = super::metrics(&service).await;
        let store = match backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        };
        let line = format!(
            "systemone_ledger_missed_waits_total{{policy=\"{policy}\",store=\"{store}\"}} 1"
        );
        assert!(metrics.contains(&line), "{line} in {metrics}");
        lock.execute("ROLLBACK").await.expect("unlock");
        drop(lock);
        // The record the wait missed lands once the lock is gone, as what the caller got:
        // the 503 under `fail_closed` (in place of the answer it withheld), the answer under
        // `fail_open`; counted `late`, none `lost`.
        let missed = request_id(&reply);
        let ledger = service.state.ledger.store().expect("on").clone();
        let record = wait_for_record(&ledger, &missed, reply.status).await;
        let code = (policy == "fail_closed").then_some("system_one_ledger_unavailable");
        assert_eq!(record.code.as_deref(), code, "{policy}");
        let metrics = super::metrics(&service).await;
        let late = format!("systemone_ledger_records_total{{result=\"late\",store=\"{store}\"}} 1");
        assert!(metrics.contains(&late), "{late} in {metrics}");
        let lost = format!("systemone_ledger_records_total{{result=\"lost\",store=\"{store}\"}} 0");
        assert!(metrics.contains(&lost), "{lost} in {metrics}");
        // The writer notices the lock is gone within its database's retry interval (SQLite
        // backs off up to 100 ms between tries): poll, bounded.
        let mut recorded = false;
        for _ in 0..50 {
            let reply = super::ask(&service, &body).await;
            let store = service.state.ledger.store().expect("on");
            if reply.status == 200
                && store
                    .decision(&request_id(&reply))
                    .await
                    .expect("reads")
                    .is_some()
            {
                recorded = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            recorded,
            "{policy}: answers are recorded again once the lock is gone"
        );
        assert_ledger_readiness(&service, 200, true, policy).await;
    }
}

/// A refusal's record numbered `n`, as the service would make it.
fn refusal(n: usize) -> Decision {
    Decision {
        request_id: format!("req_lost_{n}"),
        at_ms: 1_700_000_000_000,
        key: "anonymous".into(),
        route: "/v1/systemone".into(),
        status: 503,
        code: Some("system_one_overloaded".into()),
        model: None,
        latency_ms: 1.0,
        usage: Default::default(),
        body_hash: None,
        images: Vec::new(),
        questions: Vec::new(),
        hash_key_id: "test".into(),
        inputs: None,
    }
}

pub async fn readiness_counts_what_a_store_away_loses(backend: Backend) {
    let db = LedgerDb::new(backend).await;
    let flags = ["--ledger-policy", "fail_open", "--ledger-timeout-ms", "100"];
    let (_fake, service) = service(&db, &flags).await;
    let mut lock = lock_ledger(&db).await;
    // More records than the writer's queue (4,096) holds while its first batch waits on
    // the lock: the rest stop waiting for room and are given up.
    let ledger = service.state.ledger.clone();
    let commits = (0..5_000).map(|n| {
        let ledger = ledger.clone();
        async move { ledger.commit(refusal(n)).await }
    });
    let results = futures::future::join_all(commits).await;
    assert!(results.iter().all(Result::is_ok), "fail_open answers");
    let ready = super::get(&service, "/readyz").await;
    let status = &ready.body["ledger"];
    assert_eq!(status["ready"], true, "fail_open stays ready: {status}");
    assert_eq!(status["available"], false, "{status}");
    let lost = status["lost"].as_u64().expect("lost");
    let queued = status["queued"].as_u64().expect("queued");
    let backlog = status["backlog"].as_u64().expect("backlog");
    assert!(lost > 0, "{status}");
    assert!(lost > backlog, "the backlog alone understates it: {status}");
    assert!(queued > 0 && lost + queued <= 5_000, "{status}");
    let store = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let metric =
        format!("systemone_ledger_records_total{{result=\"lost\",store=\"{store}\"}} {lost}");
    let metrics = super::metrics(&service).await;
    assert!(metrics.contains(&metric), "{metric} in {metrics}");
    lock.execute("ROLLBACK").await.expect("unlock");
}

/// The record of request `id`, once the store has it with `status` (bounded wait: an
/// answer whose request was refused meanwhile lands first, its refusal just after).
async fn wait_for_record(store: &Store, id: &str, status: u16) -> Decision {
    let mut last = None;
    for _ in 0..100 {
        last = store.decision(id).await.expect("reads");
        if let Some(record) = last.take_if(|r| r.status == status) {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the record of {id} did not say {status} within 5 s: {last:?}");
}

/// `/readyz` answers `status` with the ledger `available` or not.
async fn assert_ledger_readiness(service: &Service, status: u16, available: bool, policy: &str) {
    let ready = super::get(service, "/readyz").await;
    let ledger = &ready.body["ledger"];
    assert_eq!(ready.status, status, "{policy}: {}", ready.text);
    assert_eq!(ledger["available"], available, "{policy}: {ledger}");
}

/// The real binary serving `db` against `backend_url`; returns it and its address.
fn spawn_binary(db: &LedgerDb, backend_url: &str) -> (super::Spawned, std::net::SocketAddr) {
    let flags = db.flags();
    let mut args = vec!["--backend", "vllm", "--backend-url", backend_url];
    args.extend(["--token-table", "golden-fake", "--model", "glm-5.3-flash"]);
    args.extend(flags.iter().map(String::as_str));
    let (child, addr) = super::spawn_serve(&args);
    (super::Spawned(child), addr)
}

pub async fn every_answer_survives_kill_9(backend: Backend) {
    let db = LedgerDb::new(backend).await;
    let fake = FakeVllm::start().await;
    let (child, addr) = spawn_binary(&db, &fake.base_url());
    let url = format!("http://{addr}/v1/systemone");
    let answered: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    let callers: Vec<_> = (0..32)
        .map(|_| {
            let (url, body, answered) = (url.clone(), body.clone(), answered.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                loop {
                    let Ok(response) = client.post(&url).json(&body).send().await else {
                        return;
                    };
                    let id = response
                        .headers()
                        .get("x-request-id")
                        .map(|v| v.to_str().unwrap_or("").to_owned());
                    if response.status() != 200 {
                        continue;
                    }
                    let (Some(id), Ok(json)) = (id, response.json::<Value>().await) else {
                        return;
                    };
                    answered.lock().expect("lock").insert(id, json);
                }
            })
        })
        .collect();
    for _ in 0..600 {
        if answered.lock().expect("lock").len() >= 300 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(child); // SIGKILL, mid-load.
    for caller in callers {
        caller.await.expect("caller");
    }
    let answered = std::mem::take(&mut *answered.lock().expect("lock"));
    assert!(
        answered.len() >= 300,
        "only {} answered before the kill",
        answered.len()
    );
    // A restart on the same ledger opens it (recovering SQLite's WAL) and serves.
    let (_again, addr) = spawn_binary(&db, &fake.base_url());
    let reply = post(
        &reqwest::Client::new(),
        &format!("http://{addr}/v1/systemone"),
        &body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let store = match backend {
        Backend::Sqlite => Store::sqlite(db.file.as_deref().expect("file")).await,
        Backend::Postgres => Store::postgres(&db.target).await,
    }
    .expect("the ledger opens");
    for (id, json) in &answered {
        let got = store
            .decision(id)
            .await
            .expect("reads")
            .unwrap_or_else(|| panic!("{id} answered 200 but not on record"));
        let answers: Vec<&Value> = json["answers"]
            .as_object()
            .expect("answers")
            .values()
            .collect();
        assert_eq!(got.questions.len(), answers.len(), "{id}: whole");
        for (q, answer) in got.questions.iter().zip(answers) {
            assert_probabilities(&q.probabilities, answer, id);
        }
    }
}

const KEY_A: &str = "sk-ledger-a-1c9e";
const KEY_B: &str = "sk-ledger-b-1c9e";
const ADMIN: &str = "sk-ledger-admin-1c9e";

/// POSTs `body` to `path` as `bearer`.
async fn post_as(service: &Service, path: &str, bearer: &str, body: &Value) -> Reply {
    let request = service
        .client
        .post(service.url(path))
        .bearer_auth(bearer)
        .json(body);
    Reply::read(request.send().await.expect("service answers")).await
}

/// Every record `bearer` lists, walking the pages of `limit` by their cursors.
pub async fn list_all(service: &Service, bearer: &str, query: &str, limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let after = cursor
            .as_ref()
            .map(|c| format!("&cursor={c}"))
            .unwrap_or_default();
        let path = format!("/v1/ledger/decisions?limit={limit}{query}{after}");
        let reply = super::get_as(service, &path, Some(bearer)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        all.extend(
            reply.body["decisions"]
                .as_array()
                .expect("decisions")
                .iter()
                .cloned(),
        );
        match reply.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return all,
        }
    }
    panic!("more than 100 pages");
}

pub async fn keys_read_and_annotate_their_own_records(backend: Backend) {
    let db = LedgerDb::new(backend).await;
    let keys = format!("{KEY_A},{KEY_B},{ADMIN}");
    let (_fake, service) = service(&db, &["--api-keys", &keys, "--admin-key", "key-3"]).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    let mut mine = Vec::new();
    for _ in 0..3 {
        let reply = super::ask_as(&service, Some(KEY_A), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        mine.push(request_id(&reply));
    }
    let theirs = request_id(&super::ask_as(&service, Some(KEY_B), &body).await);

    // Own records only, newest first (by arrival, to the millisecond), the same through
    // pages of 1 and of 100.
    let listed = list_all(&service, KEY_A, "", 1).await;
    let mut ids: Vec<&str> = listed
        .iter()
        .map(|d| d["request_id"].as_str().expect("id"))
        .collect();
    let at: Vec<i64> = listed
        .iter()
        .map(|d| d["at_ms"].as_i64().expect("at_ms"))
        .collect();
    assert!(at.windows(2).all(|w| w[0] >= w[1]), "{at:?}");
    ids.sort_unstable();
    let mut expected: Vec<&str> = mine.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert_eq!(list_all(&service, KEY_A, "", 100).await, listed);
    assert_eq!(
        list_all(&service, ADMIN, "", 2).await.len(),
        4,
        "the admin reads every key's"
    );
    let path = format!("/v1/ledger/decisions/{theirs}");
    let reply = super::get_as(&service, &path, Some(KEY_A)).await;
    super::assert_error(&reply, 404, "system_one_decision_not_found", "invalid");
    assert_eq!(
        super::get_as(&service, &path, Some(ADMIN)).await.status,
        200
    );

    // Names come back only where the query names them.
    let one = format!("/v1/ledger/decisions/{}?question=team&label=bug", mine[0]);
    let got = super::get_as(&service, &one, Some(KEY_A)).await.body;
    let team = &got["questions"][0];
    assert_eq!(team["name"], "team");
    assert_eq!(team["labels"], json!([null, "bug", null]));
    assert_eq!(got["questions"][1]["name"], Value::Null);
    assert_eq!(
        got["questions"][1]["name_hash"],
        key().hash(Domain::Name, "refund")
    );

    // Outcomes: once per question, 409 unless replaced (history kept), 422s name what is
    // wrong, another key's record is 404.
    let outcomes = format!("/v1/ledger/decisions/{}/outcomes", mine[0]);
    let first = json!({"question": "team", "outcome": "bug", "note": "checked by support"});
    assert_eq!(
        post_as(&service, &outcomes, KEY_A, &first).await.status,
        201
    );
    let again = post_as(&service, &outcomes, KEY_A, &first).await;
    super::assert_error(&again, 409, "system_one_outcome_exists", "invalid");
    let replaced = json!({"question": "team", "outcome": "billing", "replace": true});
    let reply = post_as(&service, &outcomes, KEY_A, &replaced).await;
    assert_eq!((reply.status, &reply.body["index"]), (201, &json!(0)));
    let yes = json!({"question": "refund", "outcome": true});
    assert_eq!(post_as(&service, &outcomes, KEY_A, &yes).await.status, 201);
    for (wrong, names) in [
        (
            json!({"question": "nope", "outcome": true}),
            "question is not",
        ),
        (
            json!({"question": "team", "outcome": "sales", "replace": true}),
            "one of its labels",
        ),
        (json!({"question": "urgency", "outcome": 3}), "0 to 2"),
        (
            json!({"question": "refund", "outcome": "yes", "replace": true}),
            "true or false",
        ),
    ] {
        let reply = post_as(&service, &outcomes, KEY_A, &wrong).await;
        super::assert_error(&reply, 422, "system_one_bad_outcome", "invalid");
        assert!(reply.message().contains(names), "{}", reply.text);
        for sent in ["nope", "sales"] {
            assert!(!reply.message().contains(sent), "{}", reply.text);
        }
    }
    let reply = post_as(&service, &outcomes, KEY_B, &first).await;
    super::assert_error(&reply, 404, "system_one_decision_not_found", "invalid");
    let got = super::get_as(
        &service,
        &format!("/v1/ledger/decisions/{}", mine[0]),
        Some(KEY_A),
    )
    .await
    .body;
    let team = &got["questions"][0];
    assert_eq!(team["outcome"], 0);
    let history = team["outcomes"].as_array().expect("history");
    assert_eq!(history.len(), 2);
    assert!(history[0]["replaced_at_ms"].is_i64() && history[1]["replaced_at_ms"].is_null());
    assert_eq!(history[0]["note"], "checked by support");
    assert_eq!(got["questions"][1]["outcome"], 1);
    let with = list_all(&service, KEY_A, "&has_outcome=true", 10).await;
    assert_eq!(with.len(), 1);
    assert_eq!(
        list_all(&service, KEY_A, "&has_outcome=false", 10)
            .await
            .len(),
        2
    );
    let reply = super::get_as(&service, "/v1/ledger/decisions?colour=red", Some(KEY_A)).await;
    super::assert_error(&reply, 422, "system_one_bad_ledger_query", "invalid");
}

/// A day in milliseconds.
const DAY_MS: i64 = 86_400_000;

/// Retention in the background: with `--ledger-retention-days 2` and
/// `--ledger-inputs-retention-days 1`, a sweep on its interval (shortened to 20 ms; it runs
/// hourly in a service) deletes a record made 3 days old and its outcome, erases the full
/// inputs of one made 1.5 days old and keeps that record and its outcome, and leaves a
/// record of now whole. The records are answered through the service after it started, so
/// the startup sweep has nothing to do with them, then aged by moving their arrival time
/// back; the test polls (bounded) until the sweep has run.
pub async fn retention_deletes_old_records_in_the_background(backend: Backend) {
    let db = LedgerDb::new(backend).await;
    let fake = FakeVllm::start().await;
    let mut flags = db.flags();
    flags.extend(
        [
            "--ledger-inputs",
            "full",
            "--ledger-retention-days",
            "2",
            "--ledger-inputs-retention-days",
            "1",
        ]
        .map(str::to_owned),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut config = super::config(&fake.base_url(), &flags);
    config.ledger.ledger_retention_every = Duration::from_millis(20);
    let service = start_with_ledger(config).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let body = three_questions(&format!("ticket {i}"), "team", "bug", "Which team?");
        let reply = super::ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let id = request_id(&reply);
        let path = format!("/v1/ledger/decisions/{id}/outcomes");
        let outcome = json!({"question": "team", "outcome": "bug"});
        let reply = post(&service.client, &service.url(&path), &outcome).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        ids.push(id);
    }
    let (old, older_than_inputs, new) = (&ids[0], &ids[1], &ids[2]);
    let store = service.state.ledger.store().expect("the ledger is on");
    for (id, age_ms) in [(old, 3 * DAY_MS), (older_than_inputs, DAY_MS * 3 / 2)] {
        let aged = sqlx::query("UPDATE decisions SET at_ms = at_ms - $1 WHERE request_id = $2")
            .bind(age_ms)
            .bind(id.as_str())
            .execute(&store.pool())
            .await
            .expect("aged");
        assert_eq!(aged.rows_affected(), 1, "{id}");
    }
    let swept = async {
        loop {
            let gone = store.decision(old).await.expect("reads").is_none();
            let erased = record(&service, older_than_inputs).await.inputs.is_none();
            if gone && erased {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), swept)
        .await
        .expect("a sweep deletes the old record and erases the inputs within 30 s");
    let outcomes = store
        .outcomes(&[old.as_str(), older_than_inputs.as_str(), new.as_str()])
        .await
        .expect("reads");
    let with_outcome: Vec<&str> = outcomes.iter().map(|o| o.request_id.as_str()).collect();
    assert_eq!(
        with_outcome,
        [older_than_inputs.as_str(), new.as_str()],
        "the deleted record's outcome went with it; the others' stay"
    );
    let kept = record(&service, new).await;
    assert!(kept.inputs.is_some(), "a record of now keeps its inputs");
    assert_eq!(kept.questions.len(), 3);
    assert_eq!(record(&service, older_than_inputs).await.questions.len(), 3);
}

pub async fn calibrate_from_the_ledger_fits_as_its_export(backend: Backend) {
    let db = LedgerDb::new(backend).await;
    let (_fake, service) = service(&db, &[]).await;
    let labels = ["billing", "bug", "other"];
    let (mut right, mut brier) = (0, 0.0);
    for i in 0..12 {
        let body = three_questions(&format!("ticket number {i}"), "team", "bug", "Which team?");
        let reply = super::ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let got = record(&service, &request_id(&reply)).await;
        for (q, truth) in got.questions.iter().zip([i % 3, usize::from(i % 2 == 0)]) {
            right += usize::from(q.answer == truth);
            brier += q
                .probabilities
                .iter()
                .enumerate()
                .map(|(k, p)| (p - f64::from(u8::from(k == truth))).powi(2))
                .sum::<f64>();
        }
        let path = format!("/v1/ledger/decisions/{}/outcomes", request_id(&reply));
        for outcome in [
            json!({"question": "team", "outcome": labels[i % 3]}),
            json!({"question": "refund", "outcome": i % 2 == 0}),
        ] {
            let reply = post(&service.client, &service.url(&path), &outcome).await;
            assert_eq!(reply.status, 201, "{}", reply.text);
        }
    }
    // The per-model figures in /metrics: 24 outcomes, their accuracy and mean Brier.
    service.state.ledger.refresh_quality().await;
    let metrics = super::metrics(&service).await;
    let value = |name: &str| -> f64 {
        let prefix = format!("systemone_{name}{{model=\"glm-5.3-flash\"}} ");
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("{prefix} in {metrics}"));
        line[prefix.len()..].parse().expect("a number")
    };
    assert_eq!(value("ledger_outcomes"), 24.0);
    assert!((value("ledger_accuracy") - right as f64 / 24.0).abs() < 1e-12);
    assert!((value("ledger_brier") - brier / 24.0).abs() < 1e-9);
    let export = tokio::task::spawn_blocking({
        let target = db.target.clone();
        move || {
            run_binary(&[
                "ledger",
                "export",
                "--ledger",
                &target,
                "--model",
                "glm-5.3-flash",
            ])
        }
    })
    .await
    .expect("export");
    let rows: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    assert_eq!(
        rows.len(),
        24,
        "two labelled questions per decision:\n{export}"
    );
    assert!(
        !export.contains("team") && !export.contains("billing"),
        "hashes only"
    );
    let dir = super::temp_file("rows.jsonl", &export);
    let (from_file, from_ledger) = (
        dir.with_file_name("file.json"),
        dir.with_file_name("ledger.json"),
    );
    let target = db.target.clone();
    let (data, a, b) = (
        dir.display().to_string(),
        from_file.display().to_string(),
        from_ledger.display().to_string(),
    );
    tokio::task::spawn_blocking(move || {
        run_binary(&[
            "calibrate",
            "--data",
            &data,
            "--model",
            "glm-5.3-flash",
            "--out",
            &a,
        ]);
        run_binary(&[
            "calibrate",
            "--from-ledger",
            &target,
            "--model",
            "glm-5.3-flash",
            "--out",
            &b,
        ]);
    })
    .await
    .expect("calibrate");
    let read = |p: &std::path::Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).expect("written")).expect("JSON")
    };
    let (file_fit, ledger_fit) = (read(&from_file), read(&from_ledger));
    // `eval --from-ledger` scores the answers as given: its accuracies add up to the
    // records' own.
    let report_path = dir.with_file_name("eval.json");
    let (target, report) = (db.target.clone(), report_path.display().to_string());
    let table = tokio::task::spawn_blocking(move || {
        run_binary(&[
            "eval",
            "--from-ledger",
            &target,
            "--model",
            "glm-5.3-flash",
            "--report",
            &report,
        ])
    })
    .await
    .expect("eval");
    assert!(
        table.contains("24 answers with outcomes from the ledger"),
        "{table}"
    );
    let report = read(&report_path);
    let families = report["families"].as_object().expect("families");
    assert_eq!(families.len(), 2);
    let correct: f64 = families
        .values()
        .map(|f| f["accuracy"].as_f64().expect("accuracy") * f["n"].as_f64().expect("n"))
        .sum();
    assert!((correct - right as f64).abs() < 1e-9, "{report}");
    for field in ["a", "b", "groups"] {
        assert_eq!(file_fit[field], ledger_fit[field], "{field}");
    }
    assert_eq!(file_fit["groups"].as_array().map(Vec::len), Some(2));
}

/// With the position prior on, each answer's record carries the weight of the prior taken
/// out of it, to the bit the answer said (`prior_correction`), and none for an answer the
/// prior did not correct (a warm-up sample, a request that opted out). The fake plants a
/// bias of 3 on two options, so the prior is learned within a few requests.
pub async fn the_prior_correction_is_on_record(backend: Backend) {
    use super::prior::{plant_two, planted};
    let db = LedgerDb::new(backend).await;
    let (fake, service) = service(&db, &["--prior-correction", "true"]).await;
    plant_two(&fake);
    let first = super::ask(&service, &planted(0, json!({}))).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert!(first.body["answers"]["q"].get("prior_correction").is_none());
    let recorded = record(&service, &request_id(&first)).await;
    assert_eq!(recorded.questions[0].prior_correction, None);
    let mut corrected = None;
    for i in 1..100 {
        let reply = super::ask(&service, &planted(i, json!({}))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        if let Some(w) = reply.body["answers"]["q"]["prior_correction"].as_f64() {
            corrected = Some((request_id(&reply), w));
            break;
        }
    }
    let (id, weight) = corrected.expect("an answer corrected within 100 requests");
    assert!(weight > 0.0 && weight <= 1.0, "{weight}");
    let recorded = record(&service, &id).await;
    assert_eq!(recorded.questions[0].prior_correction, Some(weight));
    let out = super::ask(&service, &planted(100, json!({"prior_correction": false}))).await;
    assert_eq!(out.status, 200, "{}", out.text);
    let recorded = record(&service, &request_id(&out)).await;
    assert_eq!(recorded.questions[0].prior_correction, None, "opted out");
}
