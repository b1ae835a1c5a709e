//! A real `redis-server` for the limit-store tests, and replicas of the service sharing it.
//!
//! [`RedisServer::start`] runs the `redis-server` on `PATH` (Debian's `redis-server`;
//! `scripts/test.sh` installs it) on a free loopback port with no persistence, waits
//! until it answers `PING` (polling with a deadline), and kills it when dropped; `kill` and
//! `restart` (same port) are the fault tests' levers. [`shared_url`] is the server
//! `scripts/start-redis.sh` started (`SYSTEMONE_REDIS_URL_FOR_TESTS`); without it every
//! Redis test fails at once. Every test uses its own `--redis-prefix`, so tests sharing one Redis never
//! see each other's counts.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use systemone::config::ServeConfig;
use systemone::quota::{LimitClock, Quotas};
use systemone::AppState;

use crate::support::{spawn_app, Service};

/// How long a started or restarted `redis-server` may take to answer.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// One `redis-server` child on 127.0.0.1.
pub struct RedisServer {
    /// Its port (kept across restarts).
    pub port: u16,
    /// The process, while running.
    child: Option<Child>,
}

/// A free loopback port (bound, read, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl RedisServer {
    /// Starts `redis-server` on a free port with no persistence.
    pub fn start() -> Self {
        // Set by scripts/start-redis.sh, which installs the `redis-server` this runs.
        shared_url();
        let mut server = RedisServer {
            port: free_port(),
            child: None,
        };
        server.spawn();
        server
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-server ({e}): install it (apt-get install redis-server) or run scripts/test.sh")
            });
        self.child = Some(child);
        let deadline = Instant::now() + START_DEADLINE;
        while !self.answers() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer within {START_DEADLINE:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether it answers `PING` with `+PONG` now.
    pub fn answers(&self) -> bool {
        ping(self.port)
    }

    /// Kills it (SIGKILL) and waits for the process to end.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty (no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One `PING` over a plain socket.
fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// The Redis every test of a run shares: `SYSTEMONE_REDIS_URL_FOR_TESTS`, started by
/// `scripts/start-redis.sh`.
pub fn shared_url() -> String {
    crate::support::require("SYSTEMONE_REDIS_URL_FOR_TESTS", "scripts/start-redis.sh")
}

/// A clock the test moves: µs since the epoch, starting at `unix_secs`.
pub fn manual_clock(unix_secs: u64) -> (LimitClock, Arc<AtomicU64>) {
    let micros = Arc::new(AtomicU64::new(unix_secs * 1_000_000));
    (LimitClock::Manual(micros.clone()), micros)
}

/// The state for `config`, its limits read on `clock`.
pub fn state_with_clock(config: &ServeConfig, clock: LimitClock) -> AppState {
    let mut state = systemone::build_state(config).expect("state builds");
    let quotas = Quotas::from_settings(
        &config.limit_store,
        config.redis_url().expect("url").as_ref(),
        state.metrics.clone(),
    )
    .expect("store opens")
    .with_clock(clock);
    state.quotas = Arc::new(quotas);
    state
}

/// A replica serving `state` on 127.0.0.1:0.
pub async fn replica(state: AppState) -> Service {
    let addr = spawn_app(systemone::app(state.clone())).await;
    Service {
        addr,
        state,
        client: reqwest::Client::new(),
    }
}

/// Polls `cond` every 20 ms until it holds, failing with `what` after `within`.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if cond().await {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
