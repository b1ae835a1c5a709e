//! A hung backend holds the in-flight slots only for the read timeout:
//! the real binary with 16 slots in front of the fake vLLM through a connection-counting
//! proxy. 16 requests arrive while the backend accepts and never answers; each read times
//! out (504), which closes its connection, and the slot is free once the socket is closed.
//! When the backend is healthy again the next request is answered at once, where before a
//! timed-out read kept its slot until the backend answered or 60 s passed. The proxy's
//! count of connections with a request outstanding never exceeds the cap.

use crate::support;
use std::net::SocketAddr;
use std::process::Child;
use std::time::Duration;

use serde_json::{json, Value};

use crate::setup::tcp_counter::TcpCounter;
use crate::support::fake_vllm::{FakeVllm, Fault};

const CAP: usize = 16;

/// The fake, the proxy in front of it and the real binary in front of that.
struct Setup {
    fake: FakeVllm,
    counter: TcpCounter,
    service: Child,
    addr: SocketAddr,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.service.kill();
        let _ = self.service.wait();
    }
}

async fn setup() -> Setup {
    let fake = FakeVllm::start().await;
    let counter = TcpCounter::in_front_of(&fake.base_url()).await;
    let backend_url = counter.url("/v1");
    let (service, addr) = tokio::task::spawn_blocking(move || {
        let cap = CAP.to_string();
        support::spawn_serve(&[
            "--backend",
            "vllm",
            "--backend-url",
            &backend_url,
            "--token-table",
            "golden-fake",
            "--model",
            "glm-5.3-flash",
            "--max-in-flight",
            &cap,
            "--read-timeout-secs",
            "0.5",
        ])
    })
    .await
    .expect("stderr reader");
    Setup {
        fake,
        counter,
        service,
        addr,
    }
}

fn one_question(i: usize) -> Value {
    json!({
        "state": format!("Ticket {i}: my card was charged twice."),
        "questions": {"q": {"type": "choice", "instructions": "Refund?", "criteria": support::criteria(3)}},
    })
}

/// The status of one request, or `None` when the client gave up after `give_up`.
async fn ask(addr: SocketAddr, i: usize, give_up: Duration) -> Option<u16> {
    let reply = reqwest::Client::new()
        .post(format!("http://{addr}/v1/systemone"))
        .timeout(give_up)
        .json(&one_question(i))
        .send()
        .await;
    reply.ok().map(|r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_backend_holds_slots_only_for_the_read_timeout() {
    let setup = setup().await;
    // The service is up (its token table is fixed): a first answer proves the path.
    assert_eq!(ask(setup.addr, 0, Duration::from_secs(30)).await, Some(200));

    // The backend accepts every read and never answers; 16 requests fill every slot and
    // each read times out.
    setup.fake.set_fault(Fault::Slow(Duration::from_secs(3600)));
    let hung =
        futures::future::join_all((1..=CAP).map(|i| ask(setup.addr, i, Duration::from_secs(30))))
            .await;
    assert!(hung.iter().all(|s| *s == Some(504)), "{hung:?}");

    // Healthy again. Every timed-out read's connection is closed (the backend sees none
    // outstanding) well before a 60 s hold would have ended...
    setup.fake.set_fault(Fault::None);
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        while setup.counter.busy() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "{} hung reads still outstanding at the backend",
        setup.counter.busy()
    );
    // ... and the next request finds a free slot and is answered.
    assert_eq!(
        ask(setup.addr, CAP + 1, Duration::from_secs(15)).await,
        Some(200),
        "a request after the backend recovered"
    );
    assert!(
        setup.counter.max_busy() <= CAP,
        "the backend saw {} requests outstanding at once (cap {CAP})",
        setup.counter.max_busy()
    );
}
