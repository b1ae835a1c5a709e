//! Signed tokens: a P-256 key pair made by the test, a JWKS served by the test on
//! 127.0.0.1 (`tests/support/fake_jwks.rs`), tokens signed by the test.
//!
//! * A valid token is answered; an API key keeps working beside tokens.
//! * Expired, not yet valid, wrong issuer, wrong audience, a tampered payload, an unknown
//!   `kid`, `alg: none`, HS256 signed with the public key, an `nbf` of the wrong JSON type,
//!   a token without its identity claim: each its own 401 code in the contract's body, none
//!   reaching the backend, none echoing the token.
//! * An unknown `kid` makes at most one refetch per `jwks_refetch_secs`; a key rotated into
//!   the JWKS is picked up without a restart.
//! * With the JWKS down, cached keys keep serving until they expire, and `/readyz` says so
//!   (`stale`, then unready and 503 `system_one_token_keys_unavailable`).
//! * A name claim never takes another caller's name: a `client_id` that is another
//!   subject's `sub-…` name or a key's name reads neither's records nor usage.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::bodies::choices;
use crate::support::fake_jwks::{b64, claims, FakeJwks, Signer, AUDIENCE, ISSUER};
use crate::support::fake_vllm::FakeVllm;
use crate::support::{
    self, ask_as, assert_error, get, get_as, key_entry, keys_file, Reply, Service,
};

/// The API key configured beside the tokens.
const KEY: &str = "sk-tokens-test-key-9f8e";

/// The `[jwt]` section for `jwks`, with `extra` lines.
pub fn jwt_section(jwks: &FakeJwks, extra: &str) -> String {
    format!(
        "[jwt]\njwks_url = \"{}\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n{extra}\n",
        jwks.url()
    )
}

/// A fake vLLM and a service in front of it with the keys file `keys`, once its first JWKS
/// fetch has landed.
pub async fn token_service(keys: &str) -> (FakeVllm, Service) {
    let path = keys_file(keys);
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(
        &fake.base_url(),
        &["--keys-file", path.to_str().expect("utf-8")],
    ))
    .await;
    keys_ready(&service).await;
    (fake, service)
}

/// Waits until `/readyz` says the token keys are cached.
pub async fn keys_ready(service: &Service) {
    for _ in 0..500 {
        let ready = get(service, "/readyz").await;
        let body: Value = serde_json::from_str(&ready.text).unwrap_or_default();
        if body["tokens"]["ready"] == true {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the JWKS was not fetched within 5 s");
}

/// `/readyz`'s `tokens` line and status.
pub async fn tokens_line(service: &Service) -> (u16, Value) {
    let reply = get(service, "/readyz").await;
    let body: Value = serde_json::from_str(&reply.text).expect("json");
    (reply.status, body["tokens"].clone())
}

/// Asserts a 401/403/503 refusal in the contract's shape that does not hold `token`.
fn assert_refused(reply: &Reply, status: u16, code: &str, token: &str) {
    let kind = if status == 503 { "unavailable" } else { "auth" };
    assert_error(reply, status, code, kind);
    let everything = format!("{:?} {}", reply.headers, reply.text);
    assert!(
        !everything.contains(token),
        "the token leaked: {everything}"
    );
    for part in token.split('.').filter(|p| p.len() > 8) {
        assert!(
            !everything.contains(part),
            "a part of the token leaked: {everything}"
        );
    }
}

/// A valid token and the API key are answered; every bad token gets its own 401 code, and
/// none reaches the backend.
#[tokio::test]
async fn a_valid_token_is_answered_and_each_bad_one_has_its_own_code() {
    let signer = Signer::new("k1");
    let stranger = Signer::new("k-unknown");
    let jwks = FakeJwks::start(&[&signer]).await;
    let keys = format!(
        "{}{}",
        key_entry("plain", KEY, ""),
        jwt_section(&jwks, "jwks_refetch_secs = 3600")
    );
    let (fake, service) = token_service(&keys).await;
    let good = signer.token(&claims("alice@example.com", json!({})));
    let reply = ask_as(&service, Some(&good), &choices(2)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reply = ask_as(&service, Some(KEY), &choices(2)).await;
    assert_eq!(reply.status, 200, "the API key still works: {}", reply.text);
    let sent = fake.chat_requests();
    let fetched = jwks.fetches();

    let now = jsonwebtoken::get_current_timestamp();
    let valid = claims("alice@example.com", json!({}));
    let tampered = {
        let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        parts[1] = b64(claims("mallory@example.com", json!({}))
            .to_string()
            .as_bytes());
        parts.join(".")
    };
    let none = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT"}"#),
        b64(valid.to_string().as_bytes())
    );
    let hs256 = {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.kid = Some("k1".into());
        let secret = jsonwebtoken::EncodingKey::from_secret(&signer.public_bytes());
        jsonwebtoken::encode(&header, &valid, &secret).expect("signs")
    };
    let mut no_sub = valid.clone();
    no_sub.as_object_mut().expect("object").remove("sub");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            signer.token(&claims("a", json!({"exp": now - 600, "nbf": now - 1200}))),
            "system_one_token_expired",
        ),
        (
            "not yet valid",
            signer.token(&claims("a", json!({"nbf": now + 600}))),
            "system_one_token_not_yet_valid",
        ),
        (
            "nbf of the wrong type",
            signer.token(&claims("a", json!({"nbf": (now + 600).to_string()}))),
            "system_one_token_bad_claims",
        ),
        (
            "wrong issuer",
            signer.token(&claims("a", json!({"iss": "https://evil.test/"}))),
            "system_one_token_wrong_issuer",
        ),
        (
            "iss as a list",
            signer.token(&claims("a", json!({"iss": [ISSUER]}))),
            "system_one_token_bad_claims",
        ),
        (
            "wrong audience",
            signer.token(&claims("a", json!({"aud": "another-service"}))),
            "system_one_token_wrong_audience",
        ),
        ("tampered payload", tampered, "system_one_token_invalid"),
        (
            "unknown kid",
            stranger.token(&valid),
            "system_one_token_unknown_key",
        ),
        ("alg none", none, "system_one_token_algorithm_refused"),
        (
            "HS256 signed with the public key",
            hs256,
            "system_one_token_algorithm_refused",
        ),
        (
            "no identity claim",
            signer.token(&no_sub),
            "system_one_token_bad_claims",
        ),
    ];
    for (why, token, code) in &cases {
        let reply = ask_as(&service, Some(token), &choices(2)).await;
        assert_eq!(reply.status, 401, "{why}: {}", reply.text);
        assert_refused(&reply, 401, code, token);
    }
    assert_eq!(
        fake.chat_requests(),
        sent,
        "no refused token reached the backend"
    );
    assert_eq!(
        jwks.fetches(),
        fetched,
        "within jwks_refetch_secs an unknown kid makes no refetch"
    );
}

/// With `jwks_refetch_secs = 0` every unknown `kid` makes exactly one refetch, and a key
/// rotated into the JWKS is picked up without a restart.
#[tokio::test]
async fn a_rotated_key_is_picked_up_and_an_unknown_kid_refetches_once() {
    let old = Signer::new("old");
    let new = Signer::new("new");
    let jwks = FakeJwks::start(&[&old]).await;
    let (_fake, service) = token_service(&jwt_section(&jwks, "jwks_refetch_secs = 0")).await;
    let rotated = new.token(&claims("bob", json!({})));
    let before = jwks.fetches();
    let reply = ask_as(&service, Some(&rotated), &choices(2)).await;
    assert_refused(&reply, 401, "system_one_token_unknown_key", &rotated);
    assert_eq!(jwks.fetches(), before + 1, "one refetch, then the refusal");

    jwks.publish(&new);
    let reply = ask_as(&service, Some(&rotated), &choices(2)).await;
    assert_eq!(reply.status, 200, "the rotated key: {}", reply.text);
    assert_eq!(jwks.fetches(), before + 2);
    let reply = ask_as(
        &service,
        Some(&old.token(&claims("bob", json!({})))),
        &choices(2),
    )
    .await;
    assert_eq!(
        reply.status, 200,
        "the old key is still published: {}",
        reply.text
    );
    assert_eq!(jwks.fetches(), before + 2, "a cached kid needs no fetch");
}

/// With the JWKS down, the cached keys keep serving until they expire (`jwks_ttl_secs`),
/// `/readyz` says the keys are stale and then unready, and tokens get 503
/// `system_one_token_keys_unavailable` until the JWKS is back.
#[tokio::test]
async fn cached_keys_serve_while_the_jwks_is_down_until_they_expire() {
    let signer = Signer::new("k1");
    let jwks = FakeJwks::start(&[&signer]).await;
    let (_fake, service) = token_service(&jwt_section(
        &jwks,
        "jwks_ttl_secs = 3\njwks_refetch_secs = 0",
    ))
    .await;
    let token = signer.token(&claims("carol", json!({})));
    jwks.set_down(true);
    let reply = ask_as(&service, Some(&token), &choices(2)).await;
    assert_eq!(reply.status, 200, "cached keys serve: {}", reply.text);

    // Past half the TTL a request starts a refresh, which fails: stale, still ready.
    let mut seen_stale = false;
    let mut expired = false;
    for _ in 0..1000 {
        let reply = ask_as(&service, Some(&token), &choices(2)).await;
        let (status, line) = tokens_line(&service).await;
        if line["stale"] == true && line["ready"] == true {
            seen_stale = true;
            assert_eq!(status, 200, "{line}");
        }
        if line["ready"] == false {
            assert_eq!(status, 503, "{line}");
            expired = true;
            break;
        }
        assert!(reply.status == 200 || reply.status == 503, "{}", reply.text);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        seen_stale && expired,
        "stale {seen_stale}, expired {expired}"
    );
    let reply = ask_as(&service, Some(&token), &choices(2)).await;
    assert_refused(&reply, 503, "system_one_token_keys_unavailable", &token);
    assert!(reply.retry_after().is_some());

    jwks.set_down(false);
    let reply = ask_as(&service, Some(&token), &choices(2)).await;
    assert_eq!(reply.status, 200, "back: {}", reply.text);
    assert_eq!(tokens_line(&service).await.0, 200);
}

/// The ledger records a token caller under its hashed subject, never the subject or the
/// token, and shows each subject only its own records.
#[tokio::test]
async fn the_ledger_names_a_token_caller_by_its_hashed_subject() {
    use crate::support::ledger::{Backend, LedgerDb};
    let signer = Signer::new("k1");
    let jwks = FakeJwks::start(&[&signer]).await;
    let keys = keys_file(&jwt_section(
        &jwks,
        "default_scopes = [\"ask\", \"ledger:read\"]",
    ));
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (_fake, service) =
        crate::support::ledger_suite::service(&db, &["--keys-file", keys.to_str().expect("utf-8")])
            .await;
    keys_ready(&service).await;
    let alice = signer.token(&claims("alice@example.com", json!({})));
    let reply = ask_as(&service, Some(&alice), &choices(2)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let id = reply.header("x-request-id").expect("an id").to_owned();
    let store = service.state.ledger.store().expect("the ledger is on");
    let mut record = None;
    for _ in 0..500 {
        record = store.decision(&id).await.expect("reads");
        if record.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let record = record.expect("on record");
    assert!(
        record.key.starts_with("sub-") && record.key.len() == 36,
        "{}",
        record.key
    );
    assert!(!record.key.contains("alice"));
    let mine = get_as(&service, "/v1/ledger/decisions", Some(&alice)).await;
    assert_eq!(
        mine.body["decisions"].as_array().map(Vec::len),
        Some(1),
        "{}",
        mine.text
    );
    assert!(!mine.text.contains("alice@example.com"));
    let bob = signer.token(&claims("bob@example.com", json!({})));
    let theirs = get_as(&service, "/v1/ledger/decisions", Some(&bob)).await;
    assert_eq!(
        theirs.body["decisions"].as_array().map(Vec::len),
        Some(0),
        "{}",
        theirs.text
    );
}

/// A name claim that is another subject's `sub-…` name or a key's name does not make its
/// bearer that caller: it reads neither one's ledger records nor their usage, and is
/// named `<value>@<issuer tag>` itself.
#[tokio::test]
async fn a_name_claim_cannot_take_another_callers_name() {
    use crate::support::ledger::{Backend, LedgerDb};
    let signer = Signer::new("k1");
    let jwks = FakeJwks::start(&[&signer]).await;
    let keys = keys_file(&format!(
        "{}{}",
        key_entry("acme", KEY, ""),
        jwt_section(
            &jwks,
            "name_claim = \"client_id\"\ndefault_scopes = [\"ask\", \"ledger:read\", \"usage:own\"]"
        )
    ));
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (_fake, service) =
        crate::support::ledger_suite::service(&db, &["--keys-file", keys.to_str().expect("utf-8")])
            .await;
    keys_ready(&service).await;
    let store = service.state.ledger.store().expect("the ledger is on");
    let mut victims = Vec::new();
    for bearer in [signer.token(&claims("alice", json!({}))), KEY.to_owned()] {
        let reply = ask_as(&service, Some(&bearer), &choices(2)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let id = reply.header("x-request-id").expect("an id").to_owned();
        let mut record = None;
        for _ in 0..500 {
            record = store.decision(&id).await.expect("reads");
            if record.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        victims.push((record.expect("on record").key, id));
    }
    assert_eq!(victims[1].0, "acme");
    for (name, id) in &victims {
        let mallory = signer.token(&claims("mallory", json!({"client_id": name})));
        let one = get_as(
            &service,
            &format!("/v1/ledger/decisions/{id}"),
            Some(&mallory),
        )
        .await;
        assert_eq!(one.status, 404, "{name}'s record: {}", one.text);
        let list = get_as(&service, "/v1/ledger/decisions", Some(&mallory)).await;
        assert_eq!(
            list.body["decisions"].as_array().map(Vec::len),
            Some(0),
            "{}",
            list.text
        );
        let usage = get_as(&service, "/v1/usage", Some(&mallory)).await;
        assert_eq!(usage.status, 200, "{}", usage.text);
        let own = usage.body["keys"][0].as_str().expect("its own name");
        assert!(own.starts_with(&format!("{name}@")) && own != name, "{own}");
        let theirs = get_as(&service, &format!("/v1/usage?key={name}"), Some(&mallory)).await;
        assert_eq!(theirs.status, 403, "{name}'s usage: {}", theirs.text);
    }
}
