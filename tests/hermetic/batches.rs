//! Batch jobs (`/v1/files`, `/v1/batches`): a file of lines runs through the doors, each
//! line's output body the one the door gives online; a line the door refuses goes to the
//! error file with the door's error and the batch goes on; a malformed file is refused with
//! the rule it breaks (a gzip bomb within the body budget); a batch and its files are their
//! caller's (another caller gets 404); a batch resumes after a restart with one output line
//! per line, one ledger record per line and its questions counted once against the daily
//! cap; an expired batch keeps its finished lines (paused time); a cancelled one too.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::body_memory::gzip;
use crate::fake_vllm::FakeVllm;
use crate::support::bodies::choice_about;
use crate::support::ledger::{start_with_ledger, Backend, LedgerDb};
use crate::support::replicas::used_today;
use crate::support::{self, Reply, Service};

const BOUNDARY: &str = "batchboundary7f3a";

/// A fresh state directory.
fn state_dir() -> PathBuf {
    let file = support::temp_file("keep", "");
    file.parent().expect("a folder").to_path_buf()
}

/// One JSONL line for `url` with a System One body about state `i`.
fn line(custom_id: &str, url: &str, i: usize) -> String {
    json!({"custom_id": custom_id, "method": "POST", "url": url,
           "body": choice_about(json!(format!("ticket {}", i % 3)), 3)})
    .to_string()
}

fn file_of(n: usize) -> String {
    (0..n)
        .map(|i| line(&format!("c{i}"), "/v1/systemone", i) + "\n")
        .collect()
}

/// A `multipart/form-data` upload of `content` with `purpose`.
fn form(purpose: &str, content: &[u8]) -> Vec<u8> {
    let mut out = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n").into_bytes();
    out.extend_from_slice(content);
    out.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    out
}

/// Where a service listens: one in this process, or the real binary's.
trait Base {
    fn url(&self, path: &str) -> String;
}

impl Base for Service {
    fn url(&self, path: &str) -> String {
        Service::url(self, path)
    }
}

/// The real binary, at its address.
struct Binary(std::net::SocketAddr);

impl Base for Binary {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.0)
    }
}

fn client() -> reqwest::Client {
    // No pooled connections: paused time may outlast the edge's idle timeout between calls.
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

async fn send(request: reqwest::RequestBuilder, key: Option<&str>) -> Reply {
    let request = match key {
        Some(key) => request.bearer_auth(key),
        None => request,
    };
    Reply::read(request.send().await.expect("service answers")).await
}

async fn upload_raw(service: &impl Base, body: Vec<u8>, gzipped: bool, key: Option<&str>) -> Reply {
    let mut request = client().post(service.url("/v1/files")).header(
        "content-type",
        format!("multipart/form-data; boundary={BOUNDARY}"),
    );
    if gzipped {
        request = request.header("content-encoding", "gzip");
    }
    send(request.body(body), key).await
}

async fn upload(service: &impl Base, content: &str, key: Option<&str>) -> Reply {
    upload_raw(service, form("batch", content.as_bytes()), false, key).await
}

async fn create(service: &impl Base, file: &str, endpoint: &str, key: Option<&str>) -> Reply {
    let body = json!({"input_file_id": file, "endpoint": endpoint, "completion_window": "24h"});
    let request = client()
        .post(service.url("/v1/batches"))
        .header("content-type", "application/json")
        .body(body.to_string());
    send(request, key).await
}

async fn get(service: &impl Base, path: &str, key: Option<&str>) -> Reply {
    send(client().get(service.url(path)), key).await
}

/// Uploads `content` and creates a batch of it; the batch.
async fn submit(service: &impl Base, content: &str, key: Option<&str>) -> Value {
    let file = upload(service, content, key).await;
    assert_eq!(file.status, 200, "{}", file.text);
    let batch = create(
        service,
        file.body["id"].as_str().expect("id"),
        "/v1/systemone",
        key,
    )
    .await;
    assert_eq!(batch.status, 200, "{}", batch.text);
    batch.body
}

/// Polls batch `id` until it has ended; the batch.
async fn ended(service: &impl Base, id: &str, key: Option<&str>) -> Value {
    for _ in 0..3000 {
        let batch = get(service, &format!("/v1/batches/{id}"), key).await.body;
        if ["completed", "expired", "cancelled", "failed"]
            .contains(&batch["status"].as_str().unwrap_or(""))
        {
            return batch;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the batch did not end within a minute");
}

/// The lines of file `id`, by custom_id.
async fn lines(service: &impl Base, id: &Value, key: Option<&str>) -> HashMap<String, Value> {
    let reply = get(
        service,
        &format!("/v1/files/{}/content", id.as_str().expect("a file")),
        key,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let mut out = HashMap::new();
    for text in reply.text.lines() {
        let v: Value = serde_json::from_str(text).expect("a JSON line");
        let id = v["custom_id"].as_str().expect("custom_id").to_string();
        assert!(
            out.insert(id.clone(), v).is_none(),
            "{id} has two output lines"
        );
    }
    out
}

#[tokio::test]
async fn each_line_is_answered_as_online_and_a_refused_line_goes_to_the_error_file() {
    let dir = state_dir();
    let (_fake, service) = support::setup(&["--state-dir", dir.to_str().expect("utf-8")]).await;
    let mut content = file_of(5);
    let bad = json!({"custom_id": "bad", "method": "POST", "url": "/v1/systemone",
                     "body": {"state": "x", "questions": {}}});
    content.push_str(&format!("{bad}\n"));
    let batch = submit(&service, &content, None).await;
    assert_eq!(batch["object"], "batch");
    let done = ended(&service, batch["id"].as_str().expect("id"), None).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["request_counts"],
        json!({"total": 6, "completed": 5, "failed": 1})
    );
    let output = lines(&service, &done["output_file_id"], None).await;
    assert_eq!(output.len(), 5);
    for i in 0..5 {
        let out = &output[&format!("c{i}")];
        assert_eq!(out["response"]["status_code"], 200);
        assert!(out["response"]["request_id"]
            .as_str()
            .expect("id")
            .starts_with("req_"));
        let online = support::ask(
            &service,
            &choice_about(json!(format!("ticket {}", i % 3)), 3),
        )
        .await;
        assert_eq!(
            out["response"]["body"], online.body,
            "line c{i} differs from its online answer"
        );
    }
    let errors = lines(&service, &done["error_file_id"], None).await;
    let refused = &errors["bad"]["response"];
    let online = support::ask(&service, &bad["body"]).await;
    assert_eq!(refused["status_code"], online.status);
    assert_eq!(refused["body"], online.body);
    let listed = get(&service, "/v1/batches?limit=1", None).await;
    assert_eq!(listed.body["data"][0]["id"], done["id"], "{}", listed.text);
}

#[tokio::test]
async fn usage_counts_a_batchs_lines_as_batch_and_online_requests_as_online() {
    let dir = state_dir();
    let (_fake, service) = support::setup(&["--state-dir", dir.to_str().expect("utf-8")]).await;
    for i in 0..2 {
        let online = support::ask(&service, &choice_about(json!(format!("ticket {i}")), 3)).await;
        assert_eq!(online.status, 200, "{}", online.text);
    }
    let before = get(&service, "/v1/usage", None).await;
    assert_eq!(before.status, 200, "{}", before.text);
    let online = &before.body["usage"][0];
    assert_eq!(online["requests"], 2, "{}", before.text);
    assert_eq!(
        online["batch"]["requests"], 0,
        "online requests are not batch lines"
    );
    let batch = submit(&service, &file_of(5), None).await;
    let done = ended(&service, batch["id"].as_str().expect("id"), None).await;
    assert_eq!(done["status"], "completed", "{done}");
    let after = get(&service, "/v1/usage", None).await;
    let row = &after.body["usage"][0];
    assert_eq!(row["requests"], 7, "{}", after.text);
    let part = &row["batch"];
    assert_eq!(part["requests"], 5, "{}", after.text);
    for counter in ["questions", "input_tokens", "upstream_requests"] {
        let all = row[counter].as_u64().expect("a count");
        let online = online[counter].as_u64().expect("a count");
        assert_eq!(
            part[counter].as_u64(),
            Some(all - online),
            "{counter}: {}",
            after.text
        );
    }
    assert_eq!(after.body["total"]["batch"], *part, "{}", after.text);
}

#[tokio::test]
async fn a_malformed_file_is_refused_with_the_rule_it_breaks() {
    let dir = state_dir();
    let (_fake, service) = support::setup(&[
        "--state-dir",
        dir.to_str().expect("utf-8"),
        "--batch-max-file-mb",
        "1",
    ])
    .await;
    let twice = format!(
        "{}\n{}\n",
        line("a", "/v1/systemone", 0),
        line("a", "/v1/systemone", 1)
    );
    let no_id = json!({"method": "POST", "url": "/v1/systemone", "body": {}}).to_string();
    let cases: Vec<(String, u16, &str)> = vec![
        ("{not json\n".into(), 422, "system_one_batch_not_jsonl"),
        ("[1, 2]\n".into(), 422, "system_one_batch_line_not_object"),
        (twice, 422, "system_one_batch_duplicate_custom_id"),
        (no_id, 422, "system_one_batch_missing_custom_id"),
        (
            line("a", "/v1/chat/completions", 0),
            422,
            "system_one_batch_url_mismatch",
        ),
        (
            file_of(1).repeat(2_000_000 / file_of(1).len() + 1),
            413,
            "system_one_batch_file_too_large",
        ),
    ];
    for (content, status, code) in cases {
        let reply = upload(&service, &content, None).await;
        support::assert_error(
            &reply,
            status,
            code,
            if status == 413 {
                "cap_exceeded"
            } else {
                "invalid"
            },
        );
    }
    // 64 MB of one byte gzips to ~64 KB: refused one byte past the 1 MB cap, not held.
    let bomb = gzip(&form("batch", &vec![b'{'; 64 * 1024 * 1024]));
    let reply = upload_raw(&service, bomb, true, None).await;
    support::assert_error(
        &reply,
        413,
        "system_one_batch_file_too_large",
        "cap_exceeded",
    );
    let wrong = upload_raw(
        &service,
        form("fine-tune", file_of(1).as_bytes()),
        false,
        None,
    )
    .await;
    support::assert_error(&wrong, 422, "system_one_bad_batch_request", "invalid");
    let file = upload(&service, &file_of(2), None).await;
    let id = file.body["id"].as_str().expect("id");
    let rerank = create(&service, id, "/v2/rerank", None).await;
    support::assert_error(&rerank, 422, "system_one_batch_url_mismatch", "invalid");
    let chat = create(&service, id, "/v1/chat/completions", None).await;
    support::assert_error(&chat, 422, "system_one_bad_batch_request", "invalid");
    let missing = create(&service, "file-nothing", "/v1/systemone", None).await;
    support::assert_error(&missing, 404, "system_one_file_not_found", "invalid");
}

#[tokio::test]
async fn a_batch_and_its_files_are_their_callers_alone() {
    let dir = state_dir();
    let flags = [
        "--state-dir",
        dir.to_str().expect("utf-8"),
        "--api-keys",
        "key-a,key-b",
    ];
    let (_fake, service) = support::setup(&flags).await;
    let batch = submit(&service, &file_of(3), Some("key-a")).await;
    let id = batch["id"].as_str().expect("id");
    let done = ended(&service, id, Some("key-a")).await;
    let file = batch["input_file_id"].as_str().expect("file");
    let output = done["output_file_id"].as_str().expect("output");
    for path in [
        format!("/v1/batches/{id}"),
        format!("/v1/files/{file}"),
        format!("/v1/files/{file}/content"),
        format!("/v1/files/{output}/content"),
    ] {
        let theirs = get(&service, &path, Some("key-b")).await;
        assert_eq!(theirs.status, 404, "{path}: {}", theirs.text);
        assert_eq!(
            get(&service, &path, Some("key-a")).await.status,
            200,
            "{path}"
        );
    }
    let cancel = send(
        client().post(service.url(&format!("/v1/batches/{id}/cancel"))),
        Some("key-b"),
    )
    .await;
    support::assert_error(&cancel, 404, "system_one_batch_not_found", "invalid");
    let listed = get(&service, "/v1/batches", Some("key-b")).await;
    assert_eq!(listed.body["data"], json!([]), "{}", listed.text);
    let files = get(&service, "/v1/files", Some("key-b")).await;
    assert_eq!(files.body["data"], json!([]), "{}", files.text);
    let anonymous = get(&service, "/v1/batches", None).await;
    assert_eq!(anonymous.status, 403, "{}", anonymous.text);
    // The lines' usage is key-a's alone: key-b's batch counters hold none of it, and key-b
    // may not ask for key-a's.
    let mine = get(&service, "/v1/usage", Some("key-a")).await;
    assert_eq!(mine.body["total"]["batch"]["requests"], 3, "{}", mine.text);
    let theirs = get(&service, "/v1/usage", Some("key-b")).await;
    assert_eq!(theirs.status, 200, "{}", theirs.text);
    assert_eq!(
        theirs.body["total"]["batch"]["requests"], 0,
        "{}",
        theirs.text
    );
    let asked = get(&service, "/v1/usage?key=key-a", Some("key-b")).await;
    assert_eq!(asked.status, 403, "{}", asked.text);
}

/// Phase one of a restart: a service (in a runtime of its own) that starts the batch and
/// is dropped with its runtime once `at_least` lines are finished; the batch's id.
fn start_and_crash(
    fake_url: &str,
    flags: &[String],
    content: &str,
    at_least: i64,
    key: Option<&str>,
) -> String {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let id = runtime.block_on(async {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let service = start_with_ledger(support::config(fake_url, &flags)).await;
        let batch = submit(&service, content, key).await;
        let id = batch["id"].as_str().expect("id").to_string();
        loop {
            let now = get(&service, &format!("/v1/batches/{id}"), key).await.body;
            assert_eq!(now["status"], "in_progress", "{now}");
            if now["request_counts"]["completed"].as_i64().unwrap_or(0) >= at_least {
                break id;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    id
}

#[test]
fn a_batch_resumes_after_a_restart_with_one_output_and_one_record_per_line() {
    let fake_runtime = tokio::runtime::Runtime::new().expect("runtime");
    let fake = fake_runtime.block_on(FakeVllm::start());
    fake.set_delay(Duration::from_millis(20));
    let db = fake_runtime.block_on(LedgerDb::new(Backend::Sqlite));
    let dir = state_dir();
    let mut flags = db.flags();
    flags.extend(
        [
            "--state-dir",
            dir.to_str().expect("utf-8"),
            "--batch-concurrency",
            "2",
        ]
        .map(String::from),
    );
    let id = start_and_crash(&fake.base_url(), &flags, &file_of(40), 6, None);
    fake.set_delay(Duration::ZERO);
    fake_runtime.block_on(async {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let service = start_with_ledger(support::config(&fake.base_url(), &flags)).await;
        let done = ended(&service, &id, None).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(
            done["request_counts"],
            json!({"total": 40, "completed": 40, "failed": 0})
        );
        let output = lines(&service, &done["output_file_id"], None).await;
        assert_eq!(output.len(), 40);
        one_record_per_line(&service, &output).await;
        usage_is_each_line_once(&service, &output).await;
    });
}

/// The daily cap counts a line once however often it runs: the lines in flight when the
/// service stopped run again after the restart, with the request ids they were admitted
/// with, and the key's count for the day is the output lines' questions, no more.
#[test]
fn a_line_run_again_after_a_restart_counts_once_against_the_daily_cap() {
    const KEY: &str = "sk-batch-daily-5e1f0c";
    let fake_runtime = tokio::runtime::Runtime::new().expect("runtime");
    let fake = fake_runtime.block_on(FakeVllm::start());
    fake.set_delay(Duration::from_millis(20));
    let db = fake_runtime.block_on(LedgerDb::new(Backend::Sqlite));
    let dir = state_dir();
    let keys = support::keys_file(&support::key_entry("k", KEY, "daily_questions = 1000"));
    let mut flags = db.flags();
    flags.extend(
        [
            "--state-dir",
            dir.to_str().expect("utf-8"),
            "--batch-concurrency",
            "4",
            "--keys-file",
            keys.to_str().expect("utf-8"),
        ]
        .map(String::from),
    );
    let id = start_and_crash(&fake.base_url(), &flags, &file_of(40), 6, Some(KEY));
    fake.set_delay(Duration::ZERO);
    fake_runtime.block_on(async {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let service = start_with_ledger(support::config(&fake.base_url(), &flags)).await;
        let done = ended(&service, &id, Some(KEY)).await;
        assert_eq!(
            done["request_counts"],
            json!({"total": 40, "completed": 40, "failed": 0})
        );
        let output = lines(&service, &done["output_file_id"], Some(KEY)).await;
        let questions = questions_in(&output);
        assert_eq!(used_today(&service, KEY).await, Some(questions as u64));
    });
}

#[tokio::test(start_paused = true)]
async fn an_expired_batch_keeps_its_finished_lines_and_closes_the_rest() {
    let dir = state_dir();
    let flags = [
        "--state-dir",
        dir.to_str().expect("utf-8"),
        "--batch-concurrency",
        "1",
        "--read-timeout-secs",
        "7200",
        "--request-timeout-secs",
        "7200",
    ];
    let (fake, service) = support::setup(&flags).await;
    fake.set_delay(Duration::from_secs(20 * 60));
    let file = upload(&service, &file_of(30), None).await;
    let body = json!({"input_file_id": file.body["id"], "endpoint": "/v1/systemone", "completion_window": "1h"});
    let request = client()
        .post(service.url("/v1/batches"))
        .header("content-type", "application/json")
        .body(body.to_string());
    let batch = send(request, None).await;
    assert_eq!(batch.status, 200, "{}", batch.text);
    let done = ended(&service, batch.body["id"].as_str().expect("id"), None).await;
    assert_eq!(done["status"], "expired", "{done}");
    let completed = done["request_counts"]["completed"].as_i64().expect("count");
    assert!((1..30).contains(&completed), "{done}");
    assert_eq!(
        done["request_counts"]["failed"].as_i64(),
        Some(30 - completed)
    );
    let output = lines(&service, &done["output_file_id"], None).await;
    let errors = lines(&service, &done["error_file_id"], None).await;
    assert_eq!(output.len() as i64, completed);
    assert_eq!(output.len() + errors.len(), 30);
    assert!(
        errors
            .values()
            .all(|e| e["error"]["code"] == "batch_expired"),
        "{errors:?}"
    );
}

#[tokio::test]
async fn a_cancelled_batch_keeps_its_finished_lines() {
    let dir = state_dir();
    let flags = [
        "--state-dir",
        dir.to_str().expect("utf-8"),
        "--batch-concurrency",
        "1",
    ];
    let (fake, service) = support::setup(&flags).await;
    fake.set_delay(Duration::from_millis(50));
    let batch = submit(&service, &file_of(50), None).await;
    let id = batch["id"].as_str().expect("id");
    let cancel = send(
        client().post(service.url(&format!("/v1/batches/{id}/cancel"))),
        None,
    )
    .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    let done = ended(&service, id, None).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    let counts = &done["request_counts"];
    assert_eq!(
        counts["completed"].as_i64().expect("n") + counts["failed"].as_i64().expect("n"),
        50
    );
    let errors = lines(&service, &done["error_file_id"], None).await;
    assert!(errors
        .values()
        .any(|e| e["error"]["code"] == "batch_cancelled"));
    let again = send(
        client().post(service.url(&format!("/v1/batches/{id}/cancel"))),
        None,
    )
    .await;
    support::assert_error(&again, 409, "system_one_batch_not_cancellable", "invalid");
}

#[tokio::test]
async fn the_batch_command_submits_follows_and_writes_both_files() {
    let dir = state_dir();
    let (_fake, service) = support::setup(&["--state-dir", dir.to_str().expect("utf-8")]).await;
    let mut content = file_of(4);
    let bad = json!({"custom_id": "bad", "method": "POST", "url": "/v1/systemone",
                     "body": {"state": "x", "questions": {}}});
    content.push_str(&format!("{bad}\n"));
    let input = support::temp_file("in.jsonl", &content);
    let output = input.with_file_name("out.jsonl");
    let (url, args) = (service.url(""), [input.clone(), output.clone()]);
    let ran = tokio::task::spawn_blocking(move || {
        support::binary()
            .args([
                "batch",
                "--url",
                &url,
                "--poll-ms",
                "20",
                "--quiet",
                "--input",
            ])
            .arg(&args[0])
            .arg("--output")
            .arg(&args[1])
            .output()
            .expect("the binary runs")
    })
    .await
    .expect("joined");
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "{stderr}");
    assert!(stderr.contains("completed: 4 answered, 1 in"), "{stderr}");
    let answered = std::fs::read_to_string(&output).expect("the output file");
    assert_eq!(answered.lines().count(), 4, "{answered}");
    let refused = std::fs::read_to_string(output.with_extension("errors.jsonl")).expect("errors");
    let line: Value = serde_json::from_str(refused.trim()).expect("one JSON line");
    assert_eq!(line["custom_id"], "bad");
    assert_eq!(line["response"]["status_code"], 422);
}

/// Asserts the ledger holds exactly one record per output line, under the line's request id.
async fn one_record_per_line(base: &impl Base, output: &HashMap<String, Value>) {
    let ids: HashSet<&str> = output
        .values()
        .map(|l| l["response"]["request_id"].as_str().expect("id"))
        .collect();
    let records = get(base, "/v1/ledger/decisions?limit=1000", None).await;
    let recorded: Vec<&str> = records.body["decisions"]
        .as_array()
        .expect("records")
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    assert_eq!(
        recorded.len(),
        output.len(),
        "one record per line: {}",
        records.text
    );
    assert!(recorded.iter().all(|r| ids.contains(r)));
}

/// The questions answered in a batch's output lines (each line's answers).
fn questions_in(output: &HashMap<String, Value>) -> usize {
    output
        .values()
        .map(|l| {
            l["response"]["body"]["answers"]
                .as_object()
                .expect("answers")
                .len()
        })
        .sum()
}

/// Asserts the caller's usage, all of it and its batch counters, is the sum of the output
/// lines' own: each line charged once, none lost and none twice (the service answered
/// nothing but the batch's lines).
async fn usage_is_each_line_once(base: &impl Base, output: &HashMap<String, Value>) {
    let usage = get(base, "/v1/usage", None).await;
    assert_eq!(usage.status, 200, "{}", usage.text);
    let sum = |field: &str| -> u64 {
        output
            .values()
            .map(|l| l["response"]["body"]["usage"][field].as_u64().expect(field))
            .sum()
    };
    let questions = questions_in(output);
    let want = [
        ("requests", output.len() as u64),
        ("questions", questions as u64),
        ("input_tokens", sum("input_tokens")),
        ("upstream_requests", sum("upstream_requests")),
    ];
    let row = &usage.body["usage"][0];
    for part in [row, &row["batch"]] {
        for (counter, n) in want {
            assert_eq!(part[counter].as_u64(), Some(n), "{counter}: {}", usage.text);
        }
    }
}

/// Polls until the batch has at least `n` finished lines (it must still be running).
async fn finished_at_least(base: &impl Base, id: &str, n: i64) {
    loop {
        let now = get(base, &format!("/v1/batches/{id}"), None).await.body;
        assert_eq!(now["status"], "in_progress", "{now}");
        if now["request_counts"]["completed"].as_i64().unwrap_or(0) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_binary_at_three_points_loses_repeats_and_charges_twice_no_line() {
    let fake = FakeVllm::start().await;
    fake.set_delay(Duration::from_millis(30));
    let db = LedgerDb::new(Backend::Sqlite).await;
    let dir = state_dir();
    let mut args: Vec<String> = [
        "--backend",
        "vllm",
        "--backend-url",
        &fake.base_url(),
        "--token-table",
        "golden-fake",
        "--model",
        "glm-5.3-flash",
        "--state-dir",
        dir.to_str().expect("utf-8"),
        "--batch-concurrency",
        "4",
    ]
    .map(String::from)
    .to_vec();
    args.extend(db.flags());
    let spawn = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            support::spawn_serve(&args)
        })
    };
    let (mut child, addr) = spawn(args.clone()).await.expect("started");
    let batch = submit(&Binary(addr), &file_of(60), None).await;
    let id = batch["id"].as_str().expect("id").to_string();
    let mut addr = addr;
    for point in [10, 25, 40] {
        finished_at_least(&Binary(addr), &id, point).await;
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
        (child, addr) = spawn(args.clone()).await.expect("restarted");
    }
    let service = Binary(addr);
    let done = ended(&service, &id, None).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["request_counts"],
        json!({"total": 60, "completed": 60, "failed": 0})
    );
    let output = lines(&service, &done["output_file_id"], None).await;
    assert_eq!(output.len(), 60, "one output line per line");
    one_record_per_line(&service, &output).await;
    usage_is_each_line_once(&service, &output).await;
    child.kill().expect("stopped");
    child.wait().expect("reaped");
}
