//! A TCP proxy that counts what a backend is working on by connection: a connection is
//! busy from the first byte of a request until its response has come from the backend whole
//! (by its `Content-Length`), or until the backend has closed it (a client's close is
//! passed on to the backend as a half-close, and the backend's close back). What it sees is what a backend
//! sees: a request whose caller gave up still counts until its connection is gone.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Default)]
struct Counts {
    busy: AtomicUsize,
    max_busy: AtomicUsize,
    connections: AtomicUsize,
}

impl Counts {
    fn start(&self) {
        let now = self.busy.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_busy.fetch_max(now, Ordering::SeqCst);
    }

    fn end(&self) {
        self.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The proxy, forwarding 127.0.0.1:`port` to `target`.
pub struct TcpCounter {
    addr: SocketAddr,
    counts: Arc<Counts>,
}

impl TcpCounter {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let counts = Arc::new(Counts::default());
        let shared = counts.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(relay(client, target, shared.clone()));
            }
        });
        TcpCounter { addr, counts }
    }

    /// The proxy in front of the server whose base URL is `base_url` (`http://addr/v1`).
    pub async fn in_front_of(base_url: &str) -> Self {
        let target: SocketAddr = base_url
            .trim_start_matches("http://")
            .trim_end_matches("/v1")
            .parse()
            .expect("the server's address");
        Self::start(target).await
    }

    /// The proxy's base URL with `path` (e.g. `/v1`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The most connections ever busy at once.
    pub fn max_busy(&self) -> usize {
        self.counts.max_busy.load(Ordering::SeqCst)
    }

    /// Connections busy now.
    pub fn busy(&self) -> usize {
        self.counts.busy.load(Ordering::SeqCst)
    }
}

/// Whether a connection has a request outstanding, shared by its two pumps.
#[derive(Debug, Default)]
struct Outstanding(std::sync::Mutex<bool>);

impl Outstanding {
    fn set(&self, counts: &Counts, busy: bool) {
        let mut now = self.0.lock().expect("lock");
        if *now != busy {
            *now = busy;
            if busy {
                counts.start();
            } else {
                counts.end();
            }
        }
    }
}

async fn relay(client: TcpStream, target: SocketAddr, counts: Arc<Counts>) {
    let Ok(backend) = TcpStream::connect(target).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut backend_read, mut backend_write) = backend.into_split();
    let outstanding = Arc::new(Outstanding::default());
    // The client's close is passed on to the backend (a half-close, as a TCP proxy does);
    // the connection ends when the backend has closed its side too.
    let up = {
        let (counts, outstanding) = (counts.clone(), outstanding.clone());
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = client_read.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                outstanding.set(&counts, true);
                if backend_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = backend_write.shutdown().await;
            std::future::pending::<()>().await;
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut response = Vec::new();
        loop {
            let n = backend_read.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            // The backend is done with a request once it has written the whole answer:
            // counted before the last bytes reach the client, which may send the next.
            response.extend_from_slice(&buf[..n]);
            while let Some(len) = whole_response_len(&response) {
                response.drain(..len);
                outstanding.set(&counts, false);
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        // Not busy before the client can see the close (dropping `client_write` sends it).
        outstanding.set(&counts, false);
        drop(client_write);
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// The length of the first whole response in `bytes` (head plus `Content-Length` body).
fn whole_response_len(bytes: &[u8]) -> Option<usize> {
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let body: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (bytes.len() >= head_end + body).then_some(head_end + body)
}
