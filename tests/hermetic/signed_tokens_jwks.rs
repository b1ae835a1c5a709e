//! Fetching the token keys (JWKS), against the fake identity provider
//! (`support/fake_jwks.rs`):
//!
//! * A JWKS body that never ends is dropped at the 1 MiB bound: the fetch fails, and the
//!   server handed it the bound plus what the sockets buffer, not the 5 s timeout's worth.
//! * Keys that could not be fetched at start-up are fetched in the background once the
//!   JWKS answers: `/readyz` turns ready with no token request (which a readiness-gated
//!   balancer would never send), and says when the keys were fetched.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::signed_tokens::{jwt_section, tokens_line};
use crate::support::fake_jwks::{FakeJwks, Signer};
use crate::support::fake_vllm::FakeVllm;
use crate::support::{self, keys_file, Service};

/// The most bytes of a JWKS.
const BOUND: usize = 1 << 20;

/// A service whose `[jwt]` fetches from `jwks`, started without waiting for its keys.
async fn service(jwks: &FakeJwks) -> (FakeVllm, Service) {
    let path = keys_file(&jwt_section(jwks, "jwks_refetch_secs = 0"));
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(
        &fake.base_url(),
        &["--keys-file", path.to_str().expect("utf-8")],
    ))
    .await;
    (fake, service)
}

/// Polls `/readyz` until its `tokens` line satisfies `done` (for at most 10 s).
async fn until_tokens(service: &Service, what: &str, done: impl Fn(u16, &Value) -> bool) -> Value {
    for _ in 0..1000 {
        let (status, line) = tokens_line(service).await;
        if done(status, &line) {
            return line;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 10 s: {:?}", tokens_line(service).await);
}

/// An endless JWKS costs the bound, not what 5 s of reading would bring.
#[tokio::test]
async fn an_endless_jwks_is_dropped_at_the_bound() {
    let jwks = FakeJwks::start(&[&Signer::new("k1")]).await;
    jwks.set_endless(true);
    let (_fake, service) = service(&jwks).await;
    let line = until_tokens(&service, "the fetch failed", |status, line| {
        status == 503 && line["stale"] == true
    })
    .await;
    assert_eq!(line["ready"], false, "{line}");
    // What the fetcher read (at most the bound and a chunk) plus what the two sockets'
    // buffers held when it stopped reading (a few MiB on loopback).
    let handed = jwks.most_handed();
    eprintln!("{handed} bytes of an endless JWKS handed to one fetch");
    assert!(
        handed > BOUND,
        "{handed} bytes: the body was read to the bound"
    );
    assert!(
        handed < BOUND + 16 * BOUND,
        "{handed} bytes handed to one fetch"
    );
}

/// JWKS down at start-up, then up: `/readyz` turns ready with no token request.
#[tokio::test]
async fn keys_down_at_start_up_are_fetched_once_the_jwks_answers() {
    let jwks = FakeJwks::start(&[&Signer::new("k1")]).await;
    jwks.set_down(true);
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let (_fake, service) = service(&jwks).await;
    let down = until_tokens(&service, "the first fetch failed", |status, line| {
        status == 503 && line["stale"] == true
    })
    .await;
    jwks.set_down(false);
    let line = until_tokens(&service, "ready without a token", |status, line| {
        status == 200 && line["ready"] == true
    })
    .await;
    assert!(down["fetched_unix"].is_null(), "{down}");
    assert!(down["failures"].as_u64() >= Some(1), "{down}");
    assert!(down["next_fetch_secs"].as_u64().is_some(), "{down}");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let fetched = line["fetched_unix"]
        .as_u64()
        .expect("when the keys were fetched");
    assert!((started..=now).contains(&fetched), "{line}");
    assert_eq!(line["keys"], 1, "{line}");
    assert_eq!(line["stale"], false, "{line}");
    assert_eq!(line["failures"], 0, "{line}");
    assert!(jwks.fetches() >= 2, "fetched again: {}", jwks.fetches());
}
