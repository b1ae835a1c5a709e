//! The floor of the load benchmark: what any tokio service standing where `systemone`
//! stands pays per answer before it does any of the work, measured beside it.
//!
//! A bare proxy, run as its own child process (the bench binary started again with
//! `--floor-proxy`, so `/proc` counts its CPU alone), with the service's default runtime
//! (one tokio worker). Per caller request it does only the I/O the service must do:
//! reads the request (head and `content-length` body), sends one upstream request per
//! question (a question is a `"type":"choice"` in the body; the upstream body is the exact
//! 1 × 4 vLLM body the service sends, pre-rendered once), reads each reply in full, and
//! answers 200 with the first reply's body. No JSON is parsed, nothing is validated, no
//! prompt is rendered, no log is written: the same system calls (`recvfrom`, `writev`,
//! `epoll_wait`) and tokio wake-ups, on the same loopback sockets, and nothing else.
//!
//! So its CPU per answer is a lower bound for any design on tokio and loopback TCP, at
//! 1 × 4 and 5 × 4 (at 150 options it would send the 4-option body and undercount, so the
//! bench prints no floor there). A target below it cannot be met by cutting code.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The argument that makes the bench binary run as the floor.
pub const FLAG: &str = "--floor-proxy";

/// What a question looks like in the caller's compact JSON body.
const QUESTION_MARK: &[u8] = br#""type":"choice""#;

/// Runs the floor against the vLLM server at `base_url` (`http://host:port/v1`), sending
/// `upstream_body` for each question; prints `floor listening on <addr>` to stderr and
/// serves until killed.
pub fn run(base_url: &str, upstream_body: &[u8]) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(serve(base_url, upstream_body));
}

async fn serve(base_url: &str, upstream_body: &[u8]) {
    let authority = base_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .expect("an http:// base url");
    let upstream: SocketAddr = authority.parse().expect("host:port");
    let mut request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {authority}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        upstream_body.len()
    )
    .into_bytes();
    request.extend_from_slice(upstream_body);
    let upstream = Arc::new(Upstream {
        addr: upstream,
        request,
        idle: Mutex::new(Vec::new()),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    eprintln!("floor listening on {}", listener.local_addr().expect("addr"));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(caller(stream, upstream.clone()));
    }
}

/// The upstream server, its one request and the idle keep-alive connections to it.
struct Upstream {
    addr: SocketAddr,
    request: Vec<u8>,
    idle: Mutex<Vec<TcpStream>>,
}

impl Upstream {
    /// One exchange on an idle connection (or a new one); the reply's body.
    async fn exchange(&self) -> std::io::Result<Vec<u8>> {
        let idle = self.idle.lock().expect("lock").pop();
        let mut stream = match idle {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(self.addr).await?;
                s.set_nodelay(true)?;
                s
            }
        };
        stream.write_all(&self.request).await?;
        let mut buf = Vec::with_capacity(4096);
        let (head, length) = read_head(&mut stream, &mut buf, false).await?;
        read_to(&mut stream, &mut buf, head + length).await?;
        self.idle.lock().expect("lock").push(stream);
        Ok(buf[head..head + length].to_vec())
    }
}

/// Serves one caller connection: request after request until it closes.
async fn caller(mut stream: TcpStream, upstream: Arc<Upstream>) {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let Ok((head, length)) = read_head(&mut stream, &mut buf, true).await else {
            return;
        };
        if read_to(&mut stream, &mut buf, head + length).await.is_err() {
            return;
        }
        let body = &buf[head..head + length];
        let questions = body
            .windows(QUESTION_MARK.len())
            .filter(|w| *w == QUESTION_MARK)
            .count()
            .max(1);
        let replies =
            futures::future::join_all((0..questions).map(|_| upstream.exchange())).await;
        let reply = match replies.into_iter().collect::<std::io::Result<Vec<_>>>() {
            Ok(mut replies) => replies.swap_remove(0),
            Err(_) => return,
        };
        let mut response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            reply.len()
        )
        .into_bytes();
        response.extend_from_slice(&reply);
        if stream.write_all(&response).await.is_err() {
            return;
        }
        buf.drain(..head + length);
    }
}

/// Reads until `buf` holds a whole request (or, with `request` false, response) head;
/// its length and the body's `content-length`.
async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    request: bool,
) -> std::io::Result<(usize, usize)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let parsed = if request {
            httparse::Request::new(&mut headers).parse(buf)
        } else {
            httparse::Response::new(&mut headers).parse(buf)
        };
        match parsed {
            Ok(httparse::Status::Complete(head)) => {
                let length = headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or_else(|| std::io::Error::other("no content-length"))?;
                return Ok((head, length));
            }
            Ok(httparse::Status::Partial) => fill(stream, buf).await?,
            Err(e) => return Err(std::io::Error::other(e)),
        }
    }
}

/// Reads until `buf` holds at least `len` bytes.
async fn read_to(stream: &mut TcpStream, buf: &mut Vec<u8>, len: usize) -> std::io::Result<()> {
    while buf.len() < len {
        fill(stream, buf).await?;
    }
    Ok(())
}

/// One read into the spare end of `buf`; an error at end of stream.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.reserve(4096);
    if stream.read_buf(buf).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}
