//! The edge (`src/http/edge/`), over raw TCP against the real `systemone::serve`: slow
//! heads, slow bodies and idle connections end on their configured deadlines (short ones,
//! so no test sleeps: each waits for the server to act); bad request heads get the
//! contract's JSON error with a request id; at the connection cap new connections are
//! refused while open ones are served; over the request cap callers get 503 with
//! `Retry-After`; a request its client abandons is counted as `client_closed`; an answer
//! given before the body was all read (a 413 for a body over the limit, a 408) says
//! `connection: close`, and the rest of the body is drained so the client reads it and
//! then a clean end of stream.

use crate::support;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::criteria;
use crate::support::fake_vllm::FakeVllm;

/// A fake vLLM and the service in front of it, served by the real edge with `extra` flags.
struct Edge {
    fake: FakeVllm,
    addr: SocketAddr,
    /// The log, at TRACE, while the edge lives.
    log: support::log::Capture,
}

async fn start(extra: &[&str]) -> Edge {
    let log = support::log::capture();
    let fake = FakeVllm::start().await;
    let config = support::config(&fake.base_url(), extra);
    let state = systemone::build_state(&config).expect("state builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let edge = systemone::Edge::new(&state);
    tokio::spawn(systemone::serve(
        listener,
        systemone::app(state),
        edge,
        std::future::pending(),
        Duration::from_secs(1),
    ));
    Edge { fake, addr, log }
}

fn body(n: usize) -> String {
    json!({
        "state": "A customer writes: my invoice is wrong.",
        "questions": {"q": {"type": "choice", "instructions": "Pick one.", "criteria": criteria(n)}},
    })
    .to_string()
}

fn post(body: &str) -> String {
    format!(
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One raw response read off a connection: status, headers (lower-case names), body.
#[derive(Debug)]
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A contract error: the code in body and header, a request id, and `connection: close`.
    fn assert_refusal(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.body["error"]["code"], code, "{self:?}");
        assert_eq!(self.header("x-systemone-error-code"), Some(code));
        let id = self.header("x-request-id").expect("request id");
        assert!(id.starts_with("req_") && id.len() == 36, "{id}");
        assert_eq!(self.header("x-typesafe-request-id"), Some(id));
        assert_eq!(self.header("content-type"), Some("application/json"));
    }
}

/// Reads one response (head, then `content-length` bytes of body).
async fn read_response(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<Raw> {
    let head_end = loop {
        if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        pending.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while pending.len() < head_end + len {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        pending.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&pending[head_end..head_end + len]).unwrap_or(Value::Null);
    pending.drain(..head_end + len);
    Some(Raw {
        status,
        headers,
        body,
    })
}

/// Whether the server closes the connection (end of stream, or a reset) with nothing more.
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest).await {
        Ok(_) => rest.is_empty(),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

/// Sends `bytes` and reads the one response the server answers before it closes.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Raw {
    let mut stream = connect(addr).await;
    stream.write_all(bytes).await.expect("write");
    let raw = read_response(&mut stream, &mut Vec::new())
        .await
        .expect("a response");
    assert!(closed_by_server(&mut stream).await, "closed after {raw:?}");
    raw
}

async fn metrics(addr: SocketAddr) -> String {
    let reply = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("metrics answer");
    reply.text().await.expect("metrics text")
}

fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_head_that_arrives_too_slowly_gets_a_408_and_the_connection_closes() {
    let edge = start(&["--header-read-timeout-secs", "0.3"]).await;
    let mut stream = connect(edge.addr).await;
    // Slowloris: a head begun and never finished.
    stream
        .write_all(b"POST /v1/systemone HTTP/1.1\r\nhost: x\r\nx-a: ")
        .await
        .expect("write");
    let raw = read_response(&mut stream, &mut Vec::new())
        .await
        .expect("a 408");
    raw.assert_refusal(408, "system_one_request_timeout");
    assert!(
        raw.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("header read timeout of 0.3 s")),
        "{raw:?}"
    );
    assert!(closed_by_server(&mut stream).await);
    // A connection that never sends a byte is closed at the same deadline, without a
    // response (no request was made).
    let mut silent = connect(edge.addr).await;
    assert!(closed_by_server(&mut silent).await);
    let text = metrics(edge.addr).await;
    assert_eq!(
        metric(
            &text,
            "systemone_connections_closed_total{rule=\"header_timeout\"}"
        ),
        2.0,
        "{text}"
    );
    assert_eq!(edge.fake.chat_requests(), 0);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_its_response() {
    let edge = start(&["--idle-timeout-secs", "0.3"]).await;
    let mut stream = connect(edge.addr).await;
    let mut pending = Vec::new();
    for _ in 0..2 {
        // Kept alive between requests until idle for the deadline.
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let raw = read_response(&mut stream, &mut pending).await.expect("200");
        assert_eq!(raw.status, 200);
    }
    assert!(closed_by_server(&mut stream).await);
    let text = metrics(edge.addr).await;
    assert_eq!(
        metric(
            &text,
            "systemone_connections_closed_total{rule=\"idle_timeout\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn a_body_that_arrives_too_slowly_gets_a_408() {
    let edge = start(&["--body-read-timeout-secs", "0.3"]).await;
    let full = post(&body(3));
    let mut stream = connect(edge.addr).await;
    // The head and half the body, then nothing.
    let cut = full.len() - 40;
    stream
        .write_all(&full.as_bytes()[..cut])
        .await
        .expect("write");
    let raw = read_response(&mut stream, &mut Vec::new())
        .await
        .expect("a 408");
    raw.assert_refusal(408, "system_one_request_timeout");
    assert!(raw.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("body read timeout of 0.3 s")));
    // Refused mid-body: the connection closes (cleanly, once the client sends nothing).
    assert_eq!(raw.header("connection"), Some("close"));
    assert_eq!(ends_cleanly(&mut stream).await, Ok(()));
    assert_eq!(edge.fake.chat_requests(), 0);
}

const MIB: usize = 1024 * 1024;

/// The head of a `/v1/systemone` POST whose body is `len` bytes (`None`: chunked).
fn post_head(len: Option<usize>) -> String {
    let framing = match len {
        Some(len) => format!("content-length: {len}"),
        None => "transfer-encoding: chunked".to_string(),
    };
    format!("POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{framing}\r\n\r\n")
}

/// Whether the server ends the stream cleanly (a FIN after what was read, no reset).
async fn ends_cleanly(stream: &mut TcpStream) -> Result<(), String> {
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest).await {
        Ok(_) if rest.is_empty() => Ok(()),
        Ok(_) => Err(format!("{} more bytes", rest.len())),
        Err(e) => Err(format!("{e}")),
    }
}

/// Writes a head and a body of `len` bytes (chunked in pieces of 64 KiB when `chunked`)
/// all before reading, as most clients do; the server must take it all.
async fn send_whole(stream: &mut TcpStream, len: usize, chunked: bool) {
    stream
        .write_all(post_head((!chunked).then_some(len)).as_bytes())
        .await
        .expect("write the head");
    let piece = vec![b' '; 64 * 1024];
    let mut left = len;
    while left > 0 {
        let n = left.min(piece.len());
        let written = if chunked {
            let mut chunk = format!("{n:x}\r\n").into_bytes();
            chunk.extend_from_slice(&piece[..n]);
            chunk.extend_from_slice(b"\r\n");
            stream.write_all(&chunk).await
        } else {
            stream.write_all(&piece[..n]).await
        };
        written.unwrap_or_else(|e| panic!("the server stopped taking the body: {e}"));
        left -= n;
    }
    if chunked {
        stream
            .write_all(b"0\r\n\r\n")
            .await
            .expect("the last chunk");
    }
}

/// A body over the limit (1 MiB here) is answered 413 with `connection: close`, and the
/// rest of it is drained, so a client that writes its whole body before reading takes it
/// all (no EPIPE), reads the 413, then a clean end of stream (no reset): 2 MiB and 8 MiB
/// over, by `Content-Length` and chunked.
#[tokio::test]
async fn an_oversized_body_gets_a_readable_413_and_a_clean_close() {
    let edge = start(&["--max-body-bytes", &MIB.to_string()]).await;
    for (over, chunked) in [(2, false), (8, false), (2, true)] {
        let mut stream = connect(edge.addr).await;
        send_whole(&mut stream, MIB + over * MIB, chunked).await;
        let raw = read_response(&mut stream, &mut Vec::new())
            .await
            .unwrap_or_else(|| panic!("no 413 for {over} MiB over (chunked: {chunked})"));
        raw.assert_refusal(413, "system_one_body_too_large");
        assert_eq!(raw.header("connection"), Some("close"), "{raw:?}");
        let end = ends_cleanly(&mut stream).await;
        assert_eq!(end, Ok(()), "{over} MiB over (chunked: {chunked})");
    }
    assert_eq!(edge.fake.chat_requests(), 0);
}

/// A keep-alive client whose second request's body is too large (8 MiB over) reads its
/// 413 with `connection: close`, then the connection ends cleanly instead of being reset
/// under its next request; a new connection is served as usual.
#[tokio::test]
async fn a_keep_alive_client_over_the_body_limit_sees_a_clean_close() {
    let edge = start(&["--max-body-bytes", &MIB.to_string()]).await;
    let mut stream = connect(edge.addr).await;
    let mut pending = Vec::new();
    stream
        .write_all(post(&body(3)).as_bytes())
        .await
        .expect("write");
    let first = read_response(&mut stream, &mut pending).await.expect("200");
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.header("connection"), None, "kept alive");
    send_whole(&mut stream, 9 * MIB, false).await;
    let refused = read_response(&mut stream, &mut pending)
        .await
        .expect("a 413");
    refused.assert_refusal(413, "system_one_body_too_large");
    assert_eq!(refused.header("connection"), Some("close"));
    assert!(pending.is_empty());
    assert_eq!(ends_cleanly(&mut stream).await, Ok(()));
    let again = exchange_kept(edge.addr, post(&body(3)).as_bytes()).await;
    assert_eq!(again.status, 200, "{again:?}");
}

/// Sends `bytes` on a new connection and reads one response (the connection stays open).
async fn exchange_kept(addr: SocketAddr, bytes: &[u8]) -> Raw {
    let mut stream = connect(addr).await;
    stream.write_all(bytes).await.expect("write");
    read_response(&mut stream, &mut Vec::new())
        .await
        .expect("a response")
}

#[tokio::test]
async fn bad_heads_get_contract_errors_with_a_request_id() {
    let edge = start(&["--max-headers", "20", "--max-header-bytes", "4096"]).await;
    let del = exchange(
        edge.addr,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-token: sk-\x7fsecret\r\n\r\n",
    )
    .await;
    del.assert_refusal(400, "system_one_bad_request_head");
    assert!(!del.body.to_string().contains("secret"));
    let id = del.header("x-request-id").expect("id");
    let logged = edge.log.text();
    assert!(
        logged
            .lines()
            .any(|l| l.contains(id) && l.contains("request refused at the edge")),
        "the refusal is logged with its request id"
    );
    assert!(!logged.contains("secret"), "nothing of the head is logged");
    let many: String = (0..21).map(|i| format!("x-h{i}: v\r\n")).collect();
    let too_many = exchange(
        edge.addr,
        format!("GET /healthz HTTP/1.1\r\nhost: x\r\n{many}\r\n").as_bytes(),
    )
    .await;
    too_many.assert_refusal(431, "system_one_headers_too_large");
    assert!(too_many.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("limit of 20 header lines")));
    let long = exchange(
        edge.addr,
        format!(
            "GET /healthz HTTP/1.1\r\nx-big: {}\r\n\r\n",
            "a".repeat(5000)
        )
        .as_bytes(),
    )
    .await;
    long.assert_refusal(431, "system_one_headers_too_large");
    let bad_length = exchange(
        edge.addr,
        b"POST /v1/systemone HTTP/1.1\r\ncontent-length: 12x\r\n\r\n",
    )
    .await;
    bad_length.assert_refusal(400, "system_one_bad_request_head");
    let text = metrics(edge.addr).await;
    assert_eq!(
        metric(
            &text,
            "systemone_connections_closed_total{rule=\"bad_request_head\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(
            &text,
            "systemone_connections_closed_total{rule=\"headers_too_large\"}"
        ),
        2.0
    );
}

#[tokio::test]
async fn pipelined_and_keep_alive_requests_pass_the_guard_unchanged() {
    let edge = start(&[]).await;
    let mut stream = connect(edge.addr).await;
    // Two requests with bodies and a GET in one write: each head is found after the
    // previous body.
    let three = format!(
        "{}{}GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
        post(&body(3)),
        post(&body(4))
    );
    stream.write_all(three.as_bytes()).await.expect("write");
    let mut pending = Vec::new();
    for options in [3, 4] {
        let raw = read_response(&mut stream, &mut pending).await.expect("200");
        assert_eq!(raw.status, 200, "{raw:?}");
        let probabilities = raw.body["answers"]["q"]["probabilities"]
            .as_object()
            .map(|p| p.len());
        assert_eq!(probabilities, Some(options), "{raw:?}");
    }
    let health = read_response(&mut stream, &mut pending).await.expect("200");
    assert_eq!(health.body["status"], "ok");
    // And an ordinary client over one kept-alive connection.
    let client = reqwest::Client::new();
    for _ in 0..5 {
        let reply = client
            .post(format!("http://{}/v1/systemone", edge.addr))
            .header("content-type", "application/json")
            .body(body(3))
            .send()
            .await
            .expect("send");
        assert_eq!(reply.status(), 200);
    }
}

#[tokio::test]
async fn at_the_connection_cap_new_connections_are_refused_and_open_ones_served() {
    let edge = start(&["--max-connections", "2"]).await;
    let mut first = connect(edge.addr).await;
    let second = connect(edge.addr).await;
    // Both are accepted (a request on the first proves the server has seen it).
    first
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let mut pending = Vec::new();
    assert_eq!(
        read_response(&mut first, &mut pending)
            .await
            .map(|r| r.status),
        Some(200)
    );
    let refused = exchange(edge.addr, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
    refused.assert_refusal(503, "system_one_overloaded");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(refused.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("limit of 2 connections")));
    // The open connection is still served.
    first
        .write_all(post(&body(3)).as_bytes())
        .await
        .expect("write");
    let answer = read_response(&mut first, &mut pending)
        .await
        .expect("answer");
    assert_eq!(answer.status, 200);
    drop(second);
    drop(first);
}

#[tokio::test]
async fn over_the_request_cap_callers_get_503_overloaded_with_retry_after() {
    let edge = start(&["--max-concurrent-requests", "2"]).await;
    edge.fake.set_delay(Duration::from_millis(400));
    let url = format!("http://{}/v1/systemone", edge.addr);
    let send = || {
        let url = url.clone();
        async move {
            let reply = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .body(body(3))
                .send()
                .await
                .expect("send");
            support::Reply::read(reply).await
        }
    };
    let held = [tokio::spawn(send()), tokio::spawn(send())];
    // Wait until both are in the handler (the fake has seen their reads).
    while edge.fake.chat_requests() < 2 {
        tokio::task::yield_now().await;
    }
    let shed = send().await;
    support::assert_error(&shed, 503, "system_one_overloaded", "unavailable");
    assert_eq!(shed.retry_after(), Some(1));
    assert!(
        shed.message().contains("limit of 2 requests"),
        "{}",
        shed.message()
    );
    for handle in held {
        assert_eq!(handle.await.expect("join").status, 200);
    }
    // Operators can still look in while it sheds: health and metrics are not counted.
    let text = metrics(edge.addr).await;
    assert_eq!(metric(&text, "systemone_requests_shed_total"), 1.0);
    assert!(text.contains("code=\"system_one_overloaded\""));
}

#[tokio::test]
async fn a_request_its_client_abandons_is_logged_and_counted_as_client_closed() {
    let edge = start(&[]).await;
    edge.fake.set_delay(Duration::from_secs(30));
    let mut stream = connect(edge.addr).await;
    stream
        .write_all(post(&body(3)).as_bytes())
        .await
        .expect("write");
    while edge.fake.chat_requests() < 1 {
        tokio::task::yield_now().await;
    }
    drop(stream);
    let counted =
        "systemone_requests_total{code=\"client_closed\",route=\"/v1/systemone\",status=\"499\"}";
    let mut text = metrics(edge.addr).await;
    while metric(&text, counted) < 1.0 {
        tokio::task::yield_now().await;
        text = metrics(edge.addr).await;
    }
    assert_eq!(metric(&text, counted), 1.0);
    assert!(text.contains("systemone_open_connections"));
    assert!(edge
        .log
        .text()
        .lines()
        .any(|l| l.contains("request abandoned by the client")
            && l.contains("/v1/systemone")
            && l.contains("client_closed")));
}

/// Under a low file-descriptor limit (256, set for the binary by its shell) the connection
/// cap is lowered to fit at startup, with a warning, so callers beyond it get the cap's 503
/// instead of an `accept` that fails and a connection left hanging; open ones are served.
#[tokio::test]
async fn the_connection_cap_is_fitted_under_the_file_descriptor_limit() {
    use std::io::BufRead;
    let binary = env!("CARGO_BIN_EXE_systemone");
    // The decision ledger in a directory of this test's own.
    let ledger = support::temp_file("ledger.sqlite", "");
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec {binary} serve --listen 127.0.0.1:0 --backend vllm \
             --backend-url http://127.0.0.1:9/v1 --token-table golden-fake \
             --model glm-5.3-flash --token-check-interval-secs 0 --ledger sqlite:{}",
            ledger.display()
        ))
        // Not the SYSTEMONE_API_KEYS another suite of this process may set for a moment.
        .env_remove("SYSTEMONE_API_KEYS")
        .env("RUST_LOG", "warn,systemone::cli=info")
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stderr = child.stderr.take().expect("stderr");
    let (addr, warning) = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stderr).lines();
        let (mut addr, mut warning) = (None, None);
        for line in lines.by_ref().map_while(Result::ok) {
            if line.contains("lowered") {
                warning = Some(line.clone());
            }
            if let Some(at) = line.split("address=").nth(1) {
                addr = at.split_whitespace().next().and_then(|a| a.parse().ok());
            }
            if addr.is_some() && warning.is_some() {
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        (addr, warning)
    })
    .await
    .expect("stderr reader");
    let addr: SocketAddr = addr.expect("listening line");
    let warning = warning.expect("a warning that the cap was lowered");
    assert!(warning.contains("fd_limit=256"), "{warning}");
    let mut streams = Vec::new();
    for _ in 0..300 {
        streams.push(connect(addr).await);
    }
    let mut refused = 0;
    for stream in &mut streams[200..] {
        let raw = read_response(stream, &mut Vec::new()).await;
        if let Some(raw) = raw {
            raw.assert_refusal(503, "system_one_overloaded");
            refused += 1;
        }
    }
    assert_eq!(
        refused, 100,
        "every connection beyond the fitted cap is refused"
    );
    let first = &mut streams[0];
    first
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let health = read_response(first, &mut Vec::new()).await.expect("200");
    assert_eq!(health.status, 200);
    let _ = child.kill();
    let _ = child.wait();
}
