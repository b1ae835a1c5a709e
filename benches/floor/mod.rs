//! The floor of the load benchmark: what any tokio service standing where `systemone`
//! stands pays per answer before it does any of the work, measured beside it.
//!
//! A bare proxy, run as its own child process (the bench binary started again with
//! `--floor-proxy`, so `/proc` counts its CPU alone). Per caller request it does only the I/O the service must do: reads
//! the request (head and `content-length` body), sends at once the upstream requests the
//! service sent for that caller body (captured from the new binary before the run, found
//! here by the body's length: the [`Plan`]), reads each reply in full, and answers 200 with
//! the first reply's body. No JSON is parsed, nothing is validated, no prompt is rendered,
//! no log is written: the same system calls (`recvfrom`, `writev`, `epoll_wait`) and tokio
//! wake-ups, on the same loopback sockets, with the same bytes upstream, and nothing else.
//!
//! So its CPU per answer is a lower bound for any design on tokio and loopback TCP. A
//! target below it cannot be met by cutting code. It runs on the runtime `serve` runs by
//! default on this machine's CPUs (tokio's current-thread runtime where half the CPUs is
//! one or none, else a worker per two CPUs); `LOAD_FLOOR_RUNTIME=current_thread` or
//! `multi_thread` (one worker) chooses, to see whether the lower bound moves with it.
//!
//! With `--floor-stack-libs` it does the same through the libraries the service is built
//! on instead of bare sockets: an axum router on hyper's server (one route, the body read
//! as bytes) and one shared reqwest client (the body posted as bytes, the reply read as
//! bytes). The difference between the two floors is what those layers cost per answer
//! before any of the service's own work.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The argument that makes the bench binary run as the floor.
pub const FLAG: &str = "--floor-proxy";
/// The argument (before the URL) that makes it the libraries' floor.
pub const LIBS: &str = "--floor-stack-libs";

/// For each caller body (by its length), the upstream bodies to send for it.
pub type Plan = Vec<(usize, Vec<String>)>;

/// Runs the floor against the vLLM server at `base_url` (`http://host:port/v1`), sending
/// what the plan at `plan` says, on bare sockets or (`libs`) through axum and reqwest;
/// prints `floor listening on <addr>` to stderr and serves until killed.
pub fn run(base_url: &str, plan: &std::path::Path, libs: bool) {
    let plan: Plan =
        serde_json::from_slice(&std::fs::read(plan).expect("the plan file")).expect("a plan");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = match std::env::var("LOAD_FLOOR_RUNTIME").as_deref() {
        Ok("current_thread") => 0,
        Ok("multi_thread") => 1,
        _ if cpus / 2 > 1 => cpus / 2,
        _ => 0,
    };
    let mut builder = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut multi = tokio::runtime::Builder::new_multi_thread();
        multi.worker_threads(workers);
        multi
    };
    let runtime = builder.enable_all().build().expect("runtime");
    if libs {
        runtime.block_on(serve_libs(base_url, plan));
    } else {
        runtime.block_on(serve(base_url, plan));
    }
}

/// The upstream bodies of `plan` for a caller body of `len` bytes (none for an unknown one).
fn upstream_for<T>(plan: &[(usize, Vec<T>)], len: usize) -> &[T] {
    plan.iter()
        .find(|(l, _)| *l == len)
        .map_or(&[], |(_, bodies)| bodies.as_slice())
}

/// The libraries' floor: axum on hyper in front, reqwest behind.
async fn serve_libs(base_url: &str, plan: Plan) {
    use axum::body::Bytes;
    use axum::http::StatusCode;
    use axum::serve::ListenerExt;
    let url = format!("{base_url}/chat/completions");
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let plan: Arc<Vec<(usize, Vec<Bytes>)>> = Arc::new(
        plan.into_iter()
            .map(|(len, bodies)| (len, bodies.into_iter().map(Bytes::from).collect()))
            .collect(),
    );
    let route = move |body: Bytes| {
        let (client, url, plan) = (client.clone(), url.clone(), plan.clone());
        async move {
            let one = |upstream: Bytes| {
                let call = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(upstream);
                async move { call.send().await?.bytes().await }
            };
            let upstream = upstream_for(&plan, body.len());
            let replies = futures::future::join_all(upstream.iter().cloned().map(one)).await;
            match replies.into_iter().collect::<Result<Vec<_>, _>>() {
                Ok(mut replies) if !replies.is_empty() => Ok((
                    [("content-type", "application/json")],
                    replies.swap_remove(0),
                )),
                _ => Err(StatusCode::BAD_GATEWAY),
            }
        }
    };
    let app = axum::Router::new().route("/v1/systemone", axum::routing::post(route));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    eprintln!(
        "floor listening on {}",
        listener.local_addr().expect("addr")
    );
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await.expect("serves");
}

/// The bare floor: tokio sockets both ways, heads read with `httparse`.
async fn serve(base_url: &str, plan: Plan) {
    let authority = base_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .expect("an http:// base url");
    let upstream: SocketAddr = authority.parse().expect("host:port");
    let request = |body: String| {
        let mut request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {authority}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body.as_bytes());
        request
    };
    let upstream = Arc::new(Upstream {
        addr: upstream,
        plan: plan
            .into_iter()
            .map(|(len, bodies)| (len, bodies.into_iter().map(request).collect()))
            .collect(),
        idle: Mutex::new(Vec::new()),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    eprintln!(
        "floor listening on {}",
        listener.local_addr().expect("addr")
    );
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(caller(stream, upstream.clone()));
    }
}

/// The upstream server, the whole requests to send per caller body length, and the idle
/// keep-alive connections to it.
struct Upstream {
    addr: SocketAddr,
    plan: Vec<(usize, Vec<Vec<u8>>)>,
    idle: Mutex<Vec<TcpStream>>,
}

impl Upstream {
    /// One exchange of `request` on an idle connection (or a new one); the reply's body.
    async fn exchange(&self, request: &[u8]) -> std::io::Result<Vec<u8>> {
        let idle = self.idle.lock().expect("lock").pop();
        let mut stream = match idle {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(self.addr).await?;
                s.set_nodelay(true)?;
                s
            }
        };
        stream.write_all(request).await?;
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
        let requests = upstream_for(&upstream.plan, length);
        let replies =
            futures::future::join_all(requests.iter().map(|r| upstream.exchange(r))).await;
        let reply = match replies.into_iter().collect::<std::io::Result<Vec<_>>>() {
            Ok(mut replies) if !replies.is_empty() => replies.swap_remove(0),
            _ => return,
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
