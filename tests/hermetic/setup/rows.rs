//! The runner of the validation table (`tests/hermetic/validation_rules.rs`,
//! `tests/hermetic/validation_transport.rs`): rows sent over HTTP to a service in front of the fake
//! vLLM server, each checked against what it expects.
//!
//! Each row is a request body (raw bytes or JSON), optional headers, the service flags it
//! runs under, and what must come back. For every refused row the runner checks the status,
//! the `x-systemone-error-code` header, `error.code` (equal to the header), a non-empty
//! `error.message` and `error.type`, for a 422 a FastAPI-style `detail` list whose first
//! `loc` starts with `"body"` (and, where the row says so, equals a precise path), the
//! substrings the message must name (limit, value), and that the fake vLLM server received
//! no chat request at all. For every accepted row it checks a 200 with one answer per
//! question, in question order, of the asked type, and that the fake received exactly the
//! `usage.upstream_requests` the answer reports.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::support::fake_vllm::FakeVllm;
use crate::support::Service;

/// A request body: JSON to serialise, or exact bytes.
#[derive(Debug, Clone)]
pub enum Body {
    Json(Value),
    Raw(Vec<u8>),
}

impl From<Value> for Body {
    fn from(v: Value) -> Self {
        Body::Json(v)
    }
}

impl From<&str> for Body {
    fn from(s: &str) -> Self {
        Body::Raw(s.as_bytes().to_vec())
    }
}

impl From<String> for Body {
    fn from(s: String) -> Self {
        Body::Raw(s.into_bytes())
    }
}

impl From<Vec<u8>> for Body {
    fn from(b: Vec<u8>) -> Self {
        Body::Raw(b)
    }
}

impl Body {
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Body::Json(v) => v.to_string().into_bytes(),
            Body::Raw(b) => b.clone(),
        }
    }
}

/// What a row expects back.
#[derive(Debug, Clone)]
pub enum Expect {
    /// 200; `upstream` is the exact number of chat requests, when the row pins it.
    Ok { upstream: Option<usize> },
    /// An error with this status and code.
    Err {
        status: u16,
        code: &'static str,
        /// The exact `detail[0].loc` of a 422 (including the leading `"body"`), if pinned.
        loc: Option<Vec<String>>,
        /// Substrings `error.message` must contain (the limit, the value).
        mentions: Vec<String>,
    },
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    pub body: Body,
    /// `Content-Type` to send; `None` sends none.
    pub content_type: Option<&'static str>,
    pub headers: Vec<(&'static str, String)>,
    /// Extra service flags; rows with the same flags share one service.
    pub flags: Vec<&'static str>,
    pub expect: Expect,
}

/// A row that must be answered with 200.
pub fn pass(name: impl Into<String>, body: impl Into<Body>) -> Row {
    Row {
        name: name.into(),
        body: body.into(),
        content_type: Some("application/json"),
        headers: Vec::new(),
        flags: Vec::new(),
        expect: Expect::Ok { upstream: None },
    }
}

/// A row that must be refused with `status` and `code`.
pub fn fail(
    name: impl Into<String>,
    body: impl Into<Body>,
    status: u16,
    code: &'static str,
) -> Row {
    Row {
        expect: Expect::Err {
            status,
            code,
            loc: None,
            mentions: Vec::new(),
        },
        ..pass(name, body)
    }
}

impl Row {
    /// Pins the exact `detail[0].loc` (the leading `"body"` is added here).
    pub fn at(mut self, path: &[&str]) -> Self {
        match &mut self.expect {
            Expect::Err { loc, .. } => {
                let mut l = vec!["body".to_string()];
                l.extend(path.iter().map(|s| s.to_string()));
                *loc = Some(l);
            }
            Expect::Ok { .. } => panic!("{}: a passing row has no loc", self.name),
        }
        self
    }

    /// Substrings the error message must contain.
    pub fn mentions(mut self, words: &[&str]) -> Self {
        match &mut self.expect {
            Expect::Err { mentions, .. } => mentions.extend(words.iter().map(|s| s.to_string())),
            Expect::Ok { .. } => panic!("{}: a passing row has no message", self.name),
        }
        self
    }

    /// Pins the number of upstream chat requests of a passing row.
    pub fn upstream(mut self, n: usize) -> Self {
        match &mut self.expect {
            Expect::Ok { upstream } => *upstream = Some(n),
            Expect::Err { .. } => panic!("{}: a refused row sends nothing", self.name),
        }
        self
    }

    pub fn content_type(mut self, ct: Option<&'static str>) -> Self {
        self.content_type = ct;
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn flags(mut self, flags: &[&'static str]) -> Self {
        self.flags = flags.to_vec();
        self
    }
}

pub const STATE: &str = "A customer writes: my card was charged twice, please refund one charge.";

/// A valid choice question.
pub fn choice() -> Value {
    json!({"type": "choice", "instructions": "Which team handles this?",
           "criteria": {"billing": "money questions", "bug": "defects", "other": null}})
}

/// A valid request with one question `q1`.
pub fn base() -> Value {
    json!({"state": STATE, "questions": {"q1": choice()}})
}

/// `base()` with one top-level field set.
pub fn top(field: &str, value: Value) -> Value {
    let mut b = base();
    b[field] = value;
    b
}

pub const BOUNDARY: &str = "systemone-test-boundary";

/// The question ids and types of a passing row's body, in order.
fn asked(body: &Body) -> Vec<(String, String)> {
    let v = match body {
        Body::Json(v) => v.clone(),
        Body::Raw(b) if b.starts_with(format!("--{BOUNDARY}").as_bytes()) => {
            serde_json::from_slice(&multipart_request_part(b))
                .expect("a passing multipart row's request part is JSON")
        }
        Body::Raw(b) => serde_json::from_slice(b)
            .or_else(|_| {
                // A compressed row: decompress it the way the service must.
                let mut text = Vec::new();
                let gz = std::io::Read::read_to_end(
                    &mut flate2::read::MultiGzDecoder::new(&b[..]),
                    &mut text,
                );
                let plain = if gz.is_ok() {
                    text
                } else {
                    zstd::decode_all(&b[..]).expect("zstd")
                };
                serde_json::from_slice(&plain)
            })
            .expect("a passing raw row is JSON, possibly compressed"),
    };
    questions_of(&v)
}

/// The `request` part of a multipart body (`multipart` in `tests/hermetic/validation_transport.rs`).
fn multipart_request_part(body: &[u8]) -> Vec<u8> {
    let find = |from: usize, needle: &[u8]| {
        body[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|i| from + i)
    };
    let start =
        find(0, b"Content-Disposition: form-data; name=\"request\"").expect("a request part");
    let data = find(start, b"\r\n\r\n").expect("part headers end") + 4;
    let end = find(data, format!("\r\n--{BOUNDARY}").as_bytes()).expect("part end");
    body[data..end].to_vec()
}

fn questions_of(v: &Value) -> Vec<(String, String)> {
    v["questions"]
        .as_object()
        .expect("questions")
        .iter()
        .map(|(id, q)| (id.clone(), q["type"].as_str().expect("type").to_string()))
        .collect()
}

/// Sends one row and returns every way it differs from its expectation.
async fn check(row: &Row, service: &Service, fake: &FakeVllm) -> Vec<String> {
    let mut problems = Vec::new();
    let mut p = |s: String| problems.push(format!("{}: {s}", row.name));
    let before = fake.chat_requests();
    let mut request = service
        .client
        .post(service.url("/v1/systemone"))
        .body(row.body.bytes());
    if let Some(ct) = row.content_type {
        request = request.header("content-type", ct);
    }
    for (name, value) in &row.headers {
        request = request.header(*name, value.as_str());
    }
    let response = request.send().await.expect("service answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let sent = fake.chat_requests() - before;
    let header_code = headers
        .get("x-systemone-error-code")
        .map(|v| v.to_str().expect("ascii").to_string());
    match headers.get("x-typesafe-request-id").map(|v| v.to_str()) {
        Some(Ok(id)) if id.starts_with("req_") => {
            if headers.get("x-request-id").map(|v| v.as_bytes()) != Some(id.as_bytes()) {
                p("x-request-id differs from x-typesafe-request-id".into());
            }
        }
        other => p(format!("bad x-typesafe-request-id {other:?}")),
    }
    let body: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            p(format!("status {status}, body is not JSON ({e}): {text:?}"));
            return problems;
        }
    };
    match &row.expect {
        Expect::Ok { upstream } => {
            if status != 200 {
                p(format!("expected 200, got {status}: {body}"));
                return problems;
            }
            if let Some(code) = header_code {
                p(format!("a 200 carries x-systemone-error-code {code}"));
            }
            let want = asked(&row.body);
            let answers = body["answers"].as_object().cloned().unwrap_or_default();
            let got: Vec<(String, String)> = answers
                .iter()
                .map(|(id, a)| (id.clone(), a["type"].as_str().unwrap_or("").to_string()))
                .collect();
            if got != want {
                p(format!("answers {got:?}, asked {want:?}"));
            }
            let reported = body["usage"]["upstream_requests"].as_u64();
            if reported != Some(sent as u64) {
                p(format!(
                    "usage.upstream_requests {reported:?}, fake saw {sent}"
                ));
            }
            if let Some(n) = upstream {
                if sent != *n {
                    p(format!("expected {n} upstream requests, fake saw {sent}"));
                }
            }
        }
        Expect::Err {
            status: want_status,
            code,
            loc,
            mentions,
        } => {
            if status != *want_status {
                p(format!(
                    "expected {want_status} {code}, got {status}: {body}"
                ));
            }
            if header_code.as_deref() != Some(code) {
                p(format!(
                    "x-systemone-error-code {header_code:?}, expected {code}"
                ));
            }
            if body["error"]["code"] != json!(code) {
                p(format!(
                    "error.code {}, expected {code}",
                    body["error"]["code"]
                ));
            }
            let message = body["error"]["message"].as_str().unwrap_or("");
            if message.trim().is_empty() {
                p(format!("empty error.message in {body}"));
            }
            if body["error"]["type"].as_str().is_none_or(str::is_empty) {
                p(format!("missing error.type in {body}"));
            }
            for word in mentions {
                if !message.contains(word.as_str()) {
                    p(format!("message {message:?} does not mention {word:?}"));
                }
            }
            if *want_status == 422 {
                let first = &body["detail"][0];
                let got_loc: Option<Vec<String>> = first["loc"].as_array().map(|a| {
                    a.iter()
                        .map(|s| s.as_str().unwrap_or("<not a string>").to_string())
                        .collect()
                });
                match (&got_loc, loc) {
                    (None, _) => p(format!("a 422 without detail[0].loc: {body}")),
                    (Some(g), _) if g.first().map(String::as_str) != Some("body") => {
                        p(format!("detail[0].loc {g:?} does not start with \"body\""))
                    }
                    (Some(g), Some(w)) if g != w => {
                        p(format!("detail[0].loc {g:?}, expected {w:?}"))
                    }
                    _ => {}
                }
                if first["msg"].as_str().is_none_or(|m| m.trim().is_empty()) {
                    p(format!("detail[0].msg empty in {body}"));
                }
                if first["type"].as_str().is_none_or(str::is_empty) {
                    p(format!("detail[0].type empty in {body}"));
                }
            }
            if sent != 0 {
                p(format!(
                    "a refused request sent {sent} chat requests upstream"
                ));
            }
        }
    }
    problems
}

/// Runs rows against services sharing one fake, one service per distinct flag set.
async fn run(rows: &[Row]) -> Vec<String> {
    let fake = FakeVllm::start().await;
    let mut services: HashMap<Vec<&'static str>, Service> = HashMap::new();
    let mut problems = Vec::new();
    for row in rows {
        if !services.contains_key(&row.flags) {
            let service =
                crate::support::start(crate::support::config(&fake.base_url(), &row.flags)).await;
            services.insert(row.flags.clone(), service);
        }
        let service = &services[&row.flags];
        problems.extend(check(row, service, &fake).await);
    }
    problems
}

/// Runs `rows` and asserts that each got exactly its expected outcome.
pub async fn assert_rows_hold(rows: &[Row]) {
    let problems = run(rows).await;
    assert!(
        problems.is_empty(),
        "{} problems in {} rows:\n{}",
        problems.len(),
        rows.len(),
        problems.join("\n")
    );
}
