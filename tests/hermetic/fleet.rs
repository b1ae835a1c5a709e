//! A model with several replicas (`--backend-url a,b,c`, docs/fleet.md), each a fake vLLM
//! server on its own port: every read of a request goes to one replica, a state asked
//! again goes back there, a replica past the bounded-load cap is passed over, one that
//! refuses connections is skipped for the request, one whose tokenizer differs from the
//! table is taken out (with the reason in `/readyz`), one that answers garbage or hangs is
//! taken out by its circuit, and every read carries the request's routing key in the
//! routers' headers (never caller text, never the backend key).

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::bodies::choices;
use crate::support::fake_vllm::{FakeVllm, Fault};
use crate::support::{ask, config, get, metrics, settled, start, until, Service};

/// The model the test configuration serves.
const MODEL: &str = "glm-5.3-flash";

/// `n` fake replicas.
async fn fakes(n: usize) -> Vec<FakeVllm> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(FakeVllm::start().await);
    }
    out
}

/// The comma-separated base URLs of `fakes`.
fn urls(fakes: &[FakeVllm]) -> String {
    fakes
        .iter()
        .map(FakeVllm::base_url)
        .collect::<Vec<_>>()
        .join(",")
}

/// A service over `fakes` as replicas of one model, with extra flags, once every replica's
/// first token-table check has finished.
async fn fleet(fakes: &[FakeVllm], extra: &[&str]) -> Service {
    let service = start(config(&urls(fakes), extra)).await;
    settled(&service).await;
    service
}

/// A 3-question request about state number `i`.
fn about(i: usize) -> Value {
    let mut body = choices(3);
    body["state"] = json!(format!(
        "Ticket {i}: the customer writes that the invoice is wrong."
    ));
    body
}

/// Asserts a 200 answering the three questions of [`about`].
fn answered(reply: &crate::support::Reply) {
    assert_eq!(reply.status, 200, "{}", reply.text);
    for q in ["q0", "q1", "q2"] {
        assert!(reply.body["answers"][q].is_object(), "{}", reply.text);
    }
}

/// Each fake's chat requests so far.
fn counts(fakes: &[FakeVllm]) -> Vec<usize> {
    fakes.iter().map(FakeVllm::chat_requests).collect()
}

/// Asks `body` and says which single fake got its reads (panics if they were split).
async fn served_by(service: &Service, fakes: &[FakeVllm], body: &Value) -> usize {
    let before = counts(fakes);
    let reply = ask(service, body).await;
    answered(&reply);
    let after = counts(fakes);
    let grew: Vec<usize> = (0..fakes.len())
        .filter(|i| after[*i] > before[*i])
        .collect();
    assert_eq!(grew.len(), 1, "one request's reads went to {grew:?}");
    assert_eq!(
        after[grew[0]] - before[grew[0]],
        3,
        "three questions, three reads"
    );
    grew[0]
}

/// Every read of a request goes to one replica; asked again, the same state goes back to
/// the same replica; different states spread over the replicas.
#[tokio::test]
async fn a_requests_reads_stay_on_one_replica_and_a_state_returns_to_it() {
    let fakes = fakes(3).await;
    let service = fleet(&fakes, &[]).await;
    let mut first = Vec::new();
    for i in 0..12 {
        first.push(served_by(&service, &fakes, &about(i)).await);
    }
    for (i, replica) in first.iter().enumerate() {
        assert_eq!(
            served_by(&service, &fakes, &about(i)).await,
            *replica,
            "state {i}"
        );
    }
    let used: std::collections::BTreeSet<usize> = first.iter().copied().collect();
    assert!(
        used.len() >= 2,
        "12 states all went to one replica: {first:?}"
    );
    // The per-replica metrics name each replica by host:port, never by caller text.
    let text = metrics(&service).await;
    for fake in &fakes {
        let line = format!(
            "systemone_replica_reads_total{{model=\"{MODEL}\",replica=\"{}\",status=\"2xx\"}}",
            fake.addr
        );
        let served = fake.chat_requests();
        if served > 0 {
            assert!(
                text.contains(&format!("{line} {served}")),
                "{line} in:\n{text}"
            );
        }
        let in_flight = format!(
            "systemone_replica_in_flight{{model=\"{MODEL}\",replica=\"{}\"}} 0",
            fake.addr
        );
        assert!(text.contains(&in_flight), "{in_flight}");
    }
    assert!(!text.contains("Ticket"), "caller text in the metrics");
}

/// Every read carries the same routing key, 32 hex digits, in both default headers; the
/// same state gives the same key and another state another; the backend's bearer and the
/// caller's text are never in it. With one URL too (a router in front of it).
#[tokio::test]
async fn every_read_carries_the_requests_routing_key_in_the_routers_headers() {
    let fake = FakeVllm::start().await;
    let service = start(config(
        &fake.base_url(),
        &["--backend-api-key", "sk-canary-key"],
    ))
    .await;
    let key_of = |from: usize| {
        let seen = fake.routing_headers();
        let mut keys = std::collections::BTreeSet::new();
        for headers in &seen[from..] {
            let get = |name: &str| {
                headers
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let key = get("x-session-id");
            assert_eq!(key, get("x-smg-routing-key"), "both headers, one key");
            assert_eq!(key.len(), 32, "{key:?}");
            assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{key:?}");
            assert_eq!(get("authorization"), "Bearer sk-canary-key");
            assert!(!key.contains("canary") && !key.contains("Ticket"));
            keys.insert(key);
        }
        assert_eq!(keys.len(), 1, "one request, one key: {keys:?}");
        keys.into_iter().next().expect("a key")
    };
    let mut keys = Vec::new();
    for state in [1, 1, 2] {
        let seen = fake.routing_headers().len();
        answered(&ask(&service, &about(state)).await);
        keys.push(key_of(seen));
    }
    assert_eq!(keys[0], keys[1], "the same state, the same key");
    assert_ne!(keys[0], keys[2], "another state, another key");
}

/// `--routing-key-header` names the headers; an empty value sends none.
#[tokio::test]
async fn the_routing_key_headers_are_configurable_and_can_be_turned_off() {
    for (flag, want) in [("x-route", vec!["x-route"]), ("", vec![])] {
        let fake = FakeVllm::start().await;
        let service = start(config(&fake.base_url(), &["--routing-key-header", flag])).await;
        answered(&ask(&service, &about(1)).await);
        for headers in fake.routing_headers() {
            let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, want, "--routing-key-header {flag:?}");
        }
    }
}

/// A replica that refuses connections costs no caller anything: each request whose order
/// puts it first is read from the next replica, and its errors show under its own label.
#[tokio::test]
async fn a_replica_that_refuses_connections_is_skipped_for_the_request() {
    let fakes = fakes(2).await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_addr = dead.local_addr().expect("addr");
    drop(dead);
    let list = format!("{},http://{dead_addr}/v1", urls(&fakes));
    let service = start(config(&list, &["--token-check-interval-secs", "0"])).await;
    let dead_errors =
        format!("systemone_replica_errors_total{{model=\"{MODEL}\",replica=\"{dead_addr}\"}}");
    for i in 0..60 {
        let reply = ask(&service, &about(i)).await;
        answered(&reply);
        if metrics(&service).await.contains(&dead_errors) {
            let ready = get(&service, "/readyz").await;
            let replicas = ready.body["models"][0]["replicas"].as_array().cloned();
            assert_eq!(replicas.map(|r| r.len()), Some(3), "{}", ready.text);
            return;
        }
    }
    panic!("60 states and none was first sent to the dead replica");
}

/// A replica that accepts no connection (its accept queue is full, so the kernel drops
/// the connection attempts) costs a request the connect timeout, not an error: the next
/// replica in its order serves it.
#[tokio::test]
async fn a_replica_that_accepts_no_connection_is_skipped_after_the_connect_timeout() {
    let fakes = fakes(1).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let silent = socket.listen(0).expect("listen");
    let silent_addr = silent.local_addr().expect("addr");
    // A backlog of 0 queues one connection; held unaccepted, it leaves no room for more.
    let _held = tokio::net::TcpStream::connect(silent_addr)
        .await
        .expect("the one queued connection");
    let list = format!("{},http://{silent_addr}/v1", urls(&fakes));
    let flags = [
        "--token-check-interval-secs",
        "0",
        "--connect-timeout-secs",
        "0.5",
    ];
    let service = start(config(&list, &flags)).await;
    let silent_errors =
        format!("systemone_replica_errors_total{{model=\"{MODEL}\",replica=\"{silent_addr}\"}}");
    for i in 0..40 {
        answered(&ask(&service, &about(i)).await);
        if metrics(&service).await.contains(&silent_errors) {
            return;
        }
    }
    panic!("40 states and none was first sent to the silent replica");
}

/// A replica that closes every connection without answering (a killed server whose pooled
/// connections are stale, a reset) costs no caller an error: no read was answered, so the
/// next replica in the request's order serves it.
#[tokio::test]
async fn a_replica_that_drops_the_connection_before_answering_is_skipped() {
    let fakes = fakes(1).await;
    let closer = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let closer_addr = closer.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = closer.accept().await {
            use tokio::io::AsyncReadExt;
            let mut request = [0u8; 1024];
            let _ = conn.read(&mut request).await;
            // Dropped here: the connection closes with no answer.
        }
    });
    let list = format!("{},http://{closer_addr}/v1", urls(&fakes));
    let service = start(config(&list, &["--token-check-interval-secs", "0"])).await;
    let dropped = format!(
        "systemone_replica_reads_total{{model=\"{MODEL}\",replica=\"{closer_addr}\",status=\"protocol\"}}"
    );
    for i in 0..40 {
        answered(&ask(&service, &about(i)).await);
        if metrics(&service).await.contains(&dropped) {
            return;
        }
    }
    panic!("40 states and none was first sent to the replica that drops connections");
}

/// A replica whose tokenizer no longer matches the table is taken out: `/readyz` says why
/// for that replica (the model stays ready on the others), and it gets no reads.
#[tokio::test]
async fn a_replica_whose_tokenizer_differs_is_taken_out_with_the_reason_in_readyz() {
    let fakes = fakes(2).await;
    fakes[1].set_token_id_offset(7);
    let service = fleet(&fakes, &[]).await;
    let ready = get(&service, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    let replicas = ready.body["models"][0]["replicas"].clone();
    let odd = &replicas[1];
    assert_eq!(
        odd["replica"],
        json!(fakes[1].addr.to_string()),
        "{replicas}"
    );
    assert_eq!(odd["ready"], json!(false));
    assert_eq!(odd["token_table"], json!("mismatch"));
    assert!(
        odd["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("token table mismatch: label")),
        "{odd}"
    );
    assert_eq!(replicas[0]["ready"], json!(true), "{replicas}");
    let reads = fakes[1].chat_requests();
    for i in 0..10 {
        answered(&ask(&service, &about(i)).await);
    }
    assert_eq!(
        fakes[1].chat_requests(),
        reads,
        "the mismatched replica got reads"
    );
    let text = metrics(&service).await;
    let verdict = format!(
        "systemone_replica_token_table_verdict{{model=\"{MODEL}\",replica=\"{}\"}} -1",
        fakes[1].addr
    );
    assert!(text.contains(&verdict), "{verdict}");
}

/// Bounded load: with one hot state, a request goes to the next replica in its order while
/// the first has more in flight than the factor allows (factor 1: the mean).
#[tokio::test]
async fn a_hot_state_moves_off_a_replica_loaded_past_the_factor() {
    let fakes = fakes(2).await;
    let service = fleet(&fakes, &["--replica-load-factor", "1"]).await;
    let hot = about(7);
    let home = served_by(&service, &fakes, &hot).await;
    let other = 1 - home;
    // Its home replica holds the next request a while: it is then loaded at the mean's cap.
    fakes[home].set_delay(Duration::from_secs(3));
    let before = counts(&fakes);
    let held = tokio::spawn({
        let (client, url, body) = (
            service.client.clone(),
            service.url("/v1/systemone"),
            hot.clone(),
        );
        async move {
            client
                .post(url)
                .json(&body)
                .send()
                .await
                .map(|r| r.status().as_u16())
        }
    });
    until(
        "the held request reached its home replica",
        Duration::from_secs(10),
        || fakes[home].chat_requests() > before[home],
    )
    .await;
    let moved = served_by(&service, &fakes, &hot).await;
    assert_eq!(
        moved, other,
        "the hot state stayed on its loaded home replica"
    );
    assert_eq!(held.await.expect("joined").expect("answered"), 200);
    fakes[home].set_delay(Duration::ZERO);
    assert_eq!(
        served_by(&service, &fakes, &hot).await,
        home,
        "back home once it is free"
    );
}

/// `/readyz`'s `circuit` of each replica of the model.
async fn circuits(service: &Service) -> Vec<String> {
    let ready = get(service, "/readyz").await;
    let replicas = ready.body["models"][0]["replicas"].as_array().cloned();
    replicas
        .unwrap_or_default()
        .iter()
        .map(|r| r["circuit"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// A replica that answers 200 with a body that is not a completion is taken out: each
/// request it garbles goes on to the next replica (every caller is answered), its circuit
/// counts the failures and opens, and its keys go to the other replica.
#[tokio::test]
async fn a_replica_answering_garbage_is_taken_out_and_its_requests_answered_elsewhere() {
    let fakes = fakes(2).await;
    fakes[1].set_fault(Fault::MalformedJson);
    let service = fleet(&fakes, &["--circuit-cooldown-secs", "600"]).await;
    for i in 0..40 {
        answered(&ask(&service, &about(i)).await);
    }
    assert!(fakes[1].chat_requests() > 0, "no state went to the garbler");
    assert_eq!(circuits(&service).await, ["closed", "open"]);
    let reads = fakes[1].chat_requests();
    for i in 40..60 {
        answered(&ask(&service, &about(i)).await);
    }
    assert_eq!(
        fakes[1].chat_requests(),
        reads,
        "keys stayed on the garbler"
    );
}

/// A request that every replica answers with garbage may be the request's fault: the
/// caller gets the 502, and no replica's circuit counts it, so requests no replica can
/// answer cannot take the replicas out.
#[tokio::test]
async fn garbage_from_every_replica_opens_no_circuit() {
    let fakes = fakes(2).await;
    for fake in &fakes {
        fake.set_fault(Fault::MalformedJson);
    }
    let service = fleet(&fakes, &[]).await;
    for i in 0..30 {
        ask(&service, &about(i))
            .await
            .assert_code(502, "system_one_upstream_protocol", "protocol");
    }
    assert_eq!(circuits(&service).await, ["closed", "closed"]);
}

/// A hung replica (it takes the request and never answers) is taken out after a few read
/// timeouts with the default circuit flags: the requests of the first waves that landed on
/// it wait for the read timeout (504), the later waves are answered by the others (at most
/// one 504 each: the probe after the cool-down), and fewer than the window's minimum of
/// calls (20) fail in all. Paused time: the 30 s read timeouts pass at once.
#[tokio::test(start_paused = true)]
async fn a_hung_replica_is_skipped_after_a_few_read_timeouts_with_the_default_flags() {
    let fakes = fakes(3).await;
    fakes[2].set_fault(Fault::Slow(Duration::from_secs(3600)));
    let service = fleet(&fakes, &["--max-in-flight", "512"]).await;
    let mut timeouts = Vec::new();
    for wave in 0..5 {
        let bodies: Vec<Value> = (0..30).map(|i| about(wave * 30 + i)).collect();
        let replies = futures::future::join_all(bodies.iter().map(|b| ask(&service, b))).await;
        for reply in replies.iter().filter(|r| r.status != 200) {
            reply.assert_code(504, "system_one_upstream_timeout", "timeout");
        }
        timeouts.push(replies.iter().filter(|r| r.status == 504).count());
    }
    let total: usize = timeouts.iter().sum();
    assert!(total > 0, "no state went to the hung replica: {timeouts:?}");
    assert!(total < 20, "{timeouts:?}");
    assert!(timeouts[3] <= 1 && timeouts[4] <= 1, "{timeouts:?}");
}
