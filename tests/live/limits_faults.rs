//! The shared limit store failing (issue 13): a real `redis-server` of the test's own,
//! killed, restarted and paused under load, with two replicas on it, one `fail_open` (the
//! default) and one `fail_closed`, both with the default 50 ms bound on a Redis call.
//!
//! * Killed: the `fail_open` replica keeps answering every request 200 and counts the
//!   key's limits in its own memory (a 3-question cap refuses the 4th); the `fail_closed`
//!   one answers 503 `system_one_limits_unavailable` with `Retry-After: 2`. `/readyz`
//!   shows the store disconnected (503 only for `fail_closed`); `/metrics` counts the
//!   errors and both policies' decisions.
//! * Restarted (same port, empty): both replicas reconnect by themselves, without a
//!   restart; `fail_closed` answers 200 again and shared counting resumes (both replicas
//!   read the same count from the new Redis).
//! * Paused (`CLIENT PAUSE`, so calls hang rather than fail): the 50 ms bound applies, the
//!   same policies follow, and the errors are counted as timeouts.
//!
//! Waits poll with a deadline; no assertion depends on a fixed sleep.

use crate::support;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::setup::redis::RedisServer;
use crate::setup::redis::{eventually, replica};
use crate::support::fake_vllm::FakeVllm;
use crate::support::replicas::{unique_prefix, used_today};
use crate::support::{ask_as, get_as, Service};

/// The key the load uses (limits far above what the test sends, so every check is made
/// and none refuses while Redis answers).
const KEY: &str = "sk-limits-faults-load-4d2e";
/// A key with a 3-question daily cap, used only while Redis is down.
const SMALL: &str = "sk-limits-faults-small-8a1f";
/// How long any one wait may take.
const WAIT: Duration = Duration::from_secs(30);

/// One reply of the load, with the phase it was sent in.
#[derive(Debug, Clone)]
struct Seen {
    phase: u8,
    status: u16,
    code: String,
    retry_after: Option<String>,
}

/// Requests sent in a loop to one replica by a few workers until stopped.
struct Load {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(service: &Service, phase: &Arc<AtomicU8>) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..4)
            .map(|_| {
                let (seen, stop, phase) = (seen.clone(), stop.clone(), phase.clone());
                let (client, url) = (service.client.clone(), service.url("/v1/systemone"));
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let sent_in = phase.load(Ordering::SeqCst);
                        let reply = support::Reply::read(
                            client
                                .post(&url)
                                .bearer_auth(KEY)
                                .header("content-type", "application/json")
                                .body(one_question().to_string())
                                .send()
                                .await
                                .expect("the replica answers"),
                        )
                        .await;
                        seen.lock().expect("lock").push(Seen {
                            phase: sent_in,
                            status: reply.status,
                            code: reply.body["error"]["code"]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                            retry_after: reply.header("retry-after").map(str::to_string),
                        });
                    }
                })
            })
            .collect();
        Load {
            seen,
            stop,
            workers,
        }
    }

    /// The replies sent in `phase` so far.
    fn in_phase(&self, phase: u8) -> Vec<Seen> {
        let seen = self.seen.lock().expect("lock");
        seen.iter().filter(|s| s.phase == phase).cloned().collect()
    }

    /// How many replies sent in `phase` had `status` (and `code`, `""` for none).
    fn count(&self, phase: u8, status: u16, code: &str) -> usize {
        self.in_phase(phase)
            .iter()
            .filter(|s| s.status == status && s.code == code)
            .count()
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.workers {
            w.await.expect("worker");
        }
    }
}

fn one_question() -> Value {
    json!({"state": "A customer writes: my invoice is wrong.",
           "questions": {"q": {"type": "choice", "instructions": "Which team?",
                               "criteria": {"a": "billing", "b": "bugs", "c": "other"}}}})
}

/// A replica on `redis` with `policy`.
async fn replica_on(fake: &FakeVllm, redis: &RedisServer, prefix: &str, policy: &str) -> Service {
    let keys = support::keys_file(
        &(support::key_entry(
            "load",
            KEY,
            "requests_per_minute = 1000000\nquestions_per_minute = 1000000\ndaily_questions = 100000000",
        ) + &support::key_entry("small", SMALL, "daily_questions = 3")),
    );
    let config = support::config(
        &fake.base_url(),
        &[
            "--keys-file",
            keys.to_str().expect("utf-8"),
            "--redis-url",
            &redis.url(),
            "--redis-prefix",
            prefix,
            "--limits-policy",
            policy,
        ],
    );
    replica(systemone::build_state(&config).expect("state")).await
}

/// `/readyz`'s status and its `limits` object.
async fn readiness(service: &Service) -> (u16, Value) {
    let reply = get_as(service, "/readyz", None).await;
    (reply.status, reply.body["limits"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_under_load() {
    let mut redis = RedisServer::start();
    let fake = FakeVllm::start().await;
    let prefix = unique_prefix();
    let open = replica_on(&fake, &redis, &prefix, "fail_open").await;
    let closed = replica_on(&fake, &redis, &prefix, "fail_closed").await;
    let phase = Arc::new(AtomicU8::new(0));
    let (open_load, closed_load) = (Load::start(&open, &phase), Load::start(&closed, &phase));

    eventually("both replicas answer on Redis", WAIT, || async {
        open_load.count(0, 200, "") >= 20 && closed_load.count(0, 200, "") >= 20
    })
    .await;
    assert_eq!(readiness(&closed).await.0, 200);

    // Killed.
    redis.kill();
    phase.store(1, Ordering::SeqCst);
    eventually("fail_closed refuses and fail_open serves", WAIT, || async {
        closed_load.count(1, 503, "system_one_limits_unavailable") >= 10
            && open_load.count(1, 200, "") >= 20
    })
    .await;
    let open_down = open_load.in_phase(1);
    assert!(
        open_down.iter().all(|s| s.status == 200),
        "fail_open answers every request: {:?}",
        open_down.iter().find(|s| s.status != 200)
    );
    for s in closed_load.in_phase(1).iter().filter(|s| s.status != 200) {
        assert_eq!(
            (s.status, s.code.as_str(), s.retry_after.as_deref()),
            (503, "system_one_limits_unavailable", Some("2")),
            "{s:?}"
        );
    }
    let (status, limits) = readiness(&open).await;
    assert_eq!(status, 200, "fail_open stays ready: {limits}");
    assert_eq!(limits["connected"], json!(false), "{limits}");
    assert_eq!(limits["policy"], json!("fail_open"), "{limits}");
    let (status, limits) = readiness(&closed).await;
    assert_eq!(status, 503, "fail_closed is not ready: {limits}");
    assert_eq!(limits["store"], json!("redis"), "{limits}");
    for (service, decision) in [(&open, "fail_open"), (&closed, "fail_closed")] {
        let text = support::metrics(service).await;
        let line = format!(
            "systemone_limit_store_decisions_total{{decision=\"{decision}\",store=\"redis\"}}"
        );
        assert!(text.contains(&line), "{line} missing:\n{text}");
        assert!(
            text.contains("systemone_limit_store_errors_total{"),
            "{text}"
        );
        assert!(
            text.contains("systemone_limit_store_up{store=\"redis\"} 0"),
            "{text}"
        );
    }

    // fail_open counts in its own memory meanwhile: the 3-question cap refuses the 4th.
    for _ in 0..3 {
        let reply = ask_as(&open, Some(SMALL), &one_question()).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    ask_as(&open, Some(SMALL), &one_question())
        .await
        .assert_code(429, "system_one_daily_cap", "quota");

    // Restarted, empty: both reconnect by themselves and count in Redis again.
    redis.restart();
    phase.store(2, Ordering::SeqCst);
    eventually("fail_closed answers again", WAIT, || async {
        closed_load.count(2, 200, "") >= 20
    })
    .await;
    eventually("both ready and connected", WAIT, || async {
        let (a, la) = readiness(&open).await;
        let (b, lb) = readiness(&closed).await;
        a == 200 && b == 200 && la["connected"] == json!(true) && lb["connected"] == json!(true)
    })
    .await;
    open_load.stop().await;
    closed_load.stop().await;
    let (a, b) = (used_today(&open, KEY).await, used_today(&closed, KEY).await);
    assert_eq!(a, b, "both replicas read one shared count");
    assert!(a.is_some_and(|n| n > 0), "counting resumed in Redis: {a:?}");
}

/// Sends `CLIENT PAUSE ms` to Redis (every client's commands wait that long).
fn pause(redis: &RedisServer, ms: u64) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", redis.port)).expect("connect");
    s.write_all(format!("CLIENT PAUSE {ms}\r\n").as_bytes())
        .expect("write");
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).expect("read");
    assert_eq!(&ok, b"+OK\r\n");
}

/// Redis paused for 3 s: a request to either replica is answered by the policy (200 for
/// `fail_open`, 503 for `fail_closed`) while Redis is still paused, and the failure is
/// counted as a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_is_bounded_by_the_timeout() {
    let redis = RedisServer::start();
    let fake = FakeVllm::start().await;
    let prefix = unique_prefix();
    let open = replica_on(&fake, &redis, &prefix, "fail_open").await;
    let closed = replica_on(&fake, &redis, &prefix, "fail_closed").await;
    for service in [&open, &closed] {
        let reply = ask_as(service, Some(KEY), &one_question()).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    pause(&redis, 3000);
    let served = ask_as(&open, Some(KEY), &one_question()).await;
    assert_eq!(served.status, 200, "{}", served.text);
    let refused = ask_as(&closed, Some(KEY), &one_question()).await;
    support::assert_error(
        &refused,
        503,
        "system_one_limits_unavailable",
        "unavailable",
    );
    assert_eq!(refused.retry_secs(), 2);
    // Redis is still paused (its PING does not answer): the replies did not wait for it.
    assert!(!redis.answers(), "answered only after Redis resumed");
    for service in [&open, &closed] {
        let text = support::metrics(service).await;
        assert!(
            text.contains("kind=\"timeout\",op=\"take_request\",store=\"redis\"}"),
            "{text}"
        );
    }
    eventually("Redis answers again", WAIT, || async {
        ask_as(&closed, Some(KEY), &one_question()).await.status == 200
    })
    .await;
}
