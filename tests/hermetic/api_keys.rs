//! API keys over HTTP against the fake vLLM server (`docs/operations/keys-and-limits.md`).
//!
//! * With no key configured the service is open: no `Authorization`, or any bearer, is
//!   answered.
//! * With keys (a file of sha256 digests and `key_env` names, and/or `SYSTEMONE_API_KEYS`):
//!   no key is a 403 `system_one_missing_key`, a wrong one a 401 `system_one_invalid_key`,
//!   a right one a 200; `/v1/models` is guarded too, `/healthz` and `/metrics` are not.
//! * Per-key limits: requests per minute and questions per minute are 429
//!   `system_one_rate_limited` with `Retry-After` from governor's wait (paused tokio
//!   clock: `tokio::time::advance` refills them); the daily question cap is 429
//!   `system_one_daily_cap` with `Retry-After` running to the next UTC midnight. Refused
//!   requests never reach the backend; questions are counted only for valid requests.
//! * Keys never appear in error bodies, headers or the configuration's `Debug`; `/metrics`
//!   counts requests and rejections by key name. (The log canary is in
//!   `tests/hermetic/keys_in_logs.rs`, which captures the log.)

use crate::support;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::support::bodies::choices;
use crate::support::config;
use crate::support::fake_vllm::FakeVllm;
use crate::support::keys_file;
use crate::support::{ask_as, get_as, sha256_hex, Reply, Service};

/// A key configured by its sha256 in the keys file.
const FILE_KEY: &str = "sk-gateway-file-key-1a2b";
/// A key the keys file names through `key_env`.
const ENV_NAMED_KEY: &str = "sk-gateway-env-named-3c4d";
/// The env variable holding [`ENV_NAMED_KEY`].
const ENV_NAMED_VAR: &str = "SYSTEMONE_TEST_GATEWAY_AUTH_KEY";
/// A key given through `SYSTEMONE_API_KEYS`.
const LIST_KEY: &str = "sk-gateway-list-key-5e6f";

/// A fake plus a service in front of it whose keys file holds `keys` (TOML).
async fn keyed_service(keys: &str) -> (FakeVllm, Service) {
    let path = keys_file(keys);
    let fake = FakeVllm::start().await;
    let service = support::start(config(
        &fake.base_url(),
        &["--keys-file", path.to_str().expect("utf-8")],
    ))
    .await;
    (fake, service)
}

impl Reply {
    /// Asserts a refusal: status, code in the header and the body, type; and that no
    /// configured key (nor the wrong one tried) appears in its headers or body.
    fn assert_refused(&self, status: u16, code: &str, kind: &str) {
        self.assert_code(status, code, kind);
        assert_eq!(
            self.header("x-systemone-error-code"),
            Some(code),
            "{}",
            self.text
        );
        let everything = format!("{:?} {}", self.headers, self.text);
        for key in [FILE_KEY, ENV_NAMED_KEY, LIST_KEY, "sk-wrong"] {
            assert!(!everything.contains(key), "{key} leaked: {everything}");
        }
    }
}

/// With no key configured, no `Authorization` header and any bearer are answered, and the
/// caller is counted as `anonymous`.
#[tokio::test]
async fn an_open_service_accepts_any_bearer_or_none() {
    let fake = FakeVllm::start().await;
    let service = support::start(config(&fake.base_url(), &[])).await;
    assert!(service.state.keys.is_open());
    for bearer in [None, Some("anything"), Some("sk-wrong"), Some("")] {
        let reply = ask_as(&service, bearer, &choices(1)).await;
        assert_eq!(reply.status, 200, "{bearer:?}: {}", reply.text);
    }
    let plain = service
        .client
        .post(service.url("/v1/systemone"))
        .header("content-type", "application/json")
        .header("authorization", "Basic dXNlcjpwYXNz")
        .body(choices(1).to_string())
        .send()
        .await
        .expect("answers");
    assert_eq!(plain.status(), 200);
    assert_eq!(get_as(&service, "/v1/models", None).await.status, 200);
    let metrics = get_as(&service, "/metrics", None).await.text;
    assert!(
        metrics.contains("systemone_key_requests_total{key=\"anonymous\"} 6"),
        "{metrics}"
    );
}

/// With keys from a file (one by sha256, one through `key_env`) and from
/// `SYSTEMONE_API_KEYS`: no key is 403, a wrong key 401, each right key 200; `/v1/models`
/// is guarded the same way; `/healthz` and `/metrics` stay open; refused requests never
/// reach the backend. The configuration's `Debug` holds no key.
#[tokio::test]
async fn keys_from_the_file_and_the_env_are_required_and_checked() {
    std::env::set_var(ENV_NAMED_VAR, ENV_NAMED_KEY);
    let path = keys_file(&format!(
        "[[key]]\nname = \"hashed\"\nsha256 = \"{}\"\n\n[[key]]\nname = \"named\"\nkey_env = \"{ENV_NAMED_VAR}\"\n",
        sha256_hex(FILE_KEY)
    ));
    let fake = FakeVllm::start().await;
    let config =
        crate::setup::with_api_keys_env(&format!("{LIST_KEY}, sk-second-list-key"), || {
            support::config(
                &fake.base_url(),
                &["--keys-file", path.to_str().expect("utf-8 path")],
            )
        });
    let debug = format!("{config:?}");
    for key in [FILE_KEY, ENV_NAMED_KEY, LIST_KEY, "sk-second-list-key"] {
        assert!(!debug.contains(key), "Debug shows {key}: {debug}");
    }
    let service = support::start(config).await;
    assert_eq!(service.state.keys.len(), 4);

    ask_as(&service, None, &choices(1))
        .await
        .assert_refused(403, "system_one_missing_key", "auth");
    let basic = service
        .client
        .post(service.url("/v1/systemone"))
        .header("content-type", "application/json")
        .header("authorization", format!("Basic {FILE_KEY}"))
        .body(choices(1).to_string())
        .send()
        .await
        .expect("answers");
    Reply::read(basic)
        .await
        .assert_refused(403, "system_one_missing_key", "auth");
    ask_as(&service, Some("sk-wrong"), &choices(1))
        .await
        .assert_refused(401, "system_one_invalid_key", "auth");
    ask_as(&service, Some(&format!("{FILE_KEY}x")), &choices(1))
        .await
        .assert_refused(401, "system_one_invalid_key", "auth");
    assert_eq!(fake.chat_requests(), 0, "refused requests reach no backend");

    for key in [FILE_KEY, ENV_NAMED_KEY, LIST_KEY, "sk-second-list-key"] {
        let reply = ask_as(&service, Some(key), &choices(1)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    get_as(&service, "/v1/models", None).await.assert_refused(
        403,
        "system_one_missing_key",
        "auth",
    );
    get_as(&service, "/v1/models", Some("sk-wrong"))
        .await
        .assert_refused(401, "system_one_invalid_key", "auth");
    assert_eq!(
        get_as(&service, "/v1/models", Some(FILE_KEY)).await.status,
        200
    );
    assert_eq!(get_as(&service, "/healthz", None).await.status, 200);
    let metrics = get_as(&service, "/metrics", None).await;
    assert_eq!(metrics.status, 200);
    for line in [
        "systemone_key_requests_total{key=\"hashed\"} 2",
        "systemone_key_requests_total{key=\"named\"} 1",
        "systemone_key_requests_total{key=\"key-1\"} 1",
        "systemone_key_requests_total{key=\"key-2\"} 1",
        "systemone_requests_total{code=\"system_one_missing_key\",route=\"/v1/systemone\",status=\"403\"} 2",
        "systemone_requests_total{code=\"system_one_invalid_key\",route=\"/v1/systemone\",status=\"401\"} 2",
    ] {
        assert!(metrics.text.contains(line), "{line} missing:\n{}", metrics.text);
    }
    for key in [FILE_KEY, ENV_NAMED_KEY, LIST_KEY, "sk-wrong"] {
        assert!(!metrics.text.contains(key), "metrics show {key}");
    }
}

/// Requests per minute: with a limit of 2, the third request within the minute is a 429
/// `system_one_rate_limited` with `Retry-After: 30` (one request refills every 30 s), does
/// not reach the backend, and is answered again once 30 s have passed (paused clock).
/// Another key is not affected. `/metrics` counts the rejection by key name and kind.
#[tokio::test(start_paused = true)]
async fn requests_per_minute_are_limited_per_key() {
    let (fake, service) = keyed_service(&format!(
        "[[key]]\nname = \"limited\"\nsha256 = \"{}\"\nrequests_per_minute = 2\n\n[[key]]\nname = \"free\"\nsha256 = \"{}\"\n",
        sha256_hex(FILE_KEY),
        sha256_hex(LIST_KEY)
    ))
    .await;
    for _ in 0..2 {
        let reply = ask_as(&service, Some(FILE_KEY), &choices(1)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let sent = fake.chat_requests();
    let refused = ask_as(&service, Some(FILE_KEY), &choices(1)).await;
    refused.assert_refused(429, "system_one_rate_limited", "rate_limited");
    let retry = refused.retry_secs();
    assert!((1..=30).contains(&retry), "Retry-After {retry}");
    assert_eq!(
        fake.chat_requests(),
        sent,
        "a refused request reaches no backend"
    );
    // A wrong key is refused as such, not as rate limited, and other keys are unaffected.
    ask_as(&service, Some("sk-wrong"), &choices(1))
        .await
        .assert_refused(401, "system_one_invalid_key", "auth");
    for _ in 0..3 {
        assert_eq!(
            ask_as(&service, Some(LIST_KEY), &choices(1)).await.status,
            200
        );
    }

    tokio::time::advance(Duration::from_secs(retry)).await;
    let again = ask_as(&service, Some(FILE_KEY), &choices(1)).await;
    assert_eq!(again.status, 200, "{}", again.text);
    ask_as(&service, Some(FILE_KEY), &choices(1))
        .await
        .assert_refused(429, "system_one_rate_limited", "rate_limited");

    let metrics = get_as(&service, "/metrics", None).await.text;
    assert!(
        metrics.contains("systemone_key_rejections_total{key=\"limited\",kind=\"requests\"} 2"),
        "{metrics}"
    );
}

/// Questions per minute: with a limit of 3, a 2-question request passes, a second one is a
/// 429 `system_one_rate_limited` with `Retry-After` and reaches no backend, and after the
/// wait (paused clock) it passes. A request refused by validation costs no questions. A
/// request with more questions than the limit can never pass and says so.
#[tokio::test(start_paused = true)]
async fn questions_per_minute_are_counted_after_validation() {
    let (fake, service) = keyed_service(&format!(
        "[[key]]\nname = \"asker\"\nsha256 = \"{}\"\nquestions_per_minute = 3\n",
        sha256_hex(FILE_KEY)
    ))
    .await;
    // Three invalid questions: a 422, and nothing is counted.
    let mut invalid = choices(3);
    invalid["questions"]["q0"]["type"] = json!("box");
    assert_eq!(ask_as(&service, Some(FILE_KEY), &invalid).await.status, 422);
    assert_eq!(
        ask_as(&service, Some(FILE_KEY), &choices(2)).await.status,
        200
    );
    let sent = fake.chat_requests();
    let refused = ask_as(&service, Some(FILE_KEY), &choices(2)).await;
    refused.assert_refused(429, "system_one_rate_limited", "rate_limited");
    let retry = refused.retry_secs();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert!(
        refused.text.contains("3 questions per minute"),
        "{}",
        refused.text
    );
    assert_eq!(fake.chat_requests(), sent);
    tokio::time::advance(Duration::from_secs(retry)).await;
    assert_eq!(
        ask_as(&service, Some(FILE_KEY), &choices(2)).await.status,
        200
    );

    let too_big = ask_as(&service, Some(FILE_KEY), &choices(4)).await;
    too_big.assert_refused(429, "system_one_rate_limited", "rate_limited");
    assert!(too_big.text.contains("4 questions"), "{}", too_big.text);
    let metrics = get_as(&service, "/metrics", None).await.text;
    assert!(
        metrics.contains("systemone_key_rejections_total{key=\"asker\",kind=\"questions\"} 2"),
        "{metrics}"
    );
}

fn secs_to_utc_midnight() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    86_400 - now % 86_400
}

/// The daily cap: with 3 questions a day, 2 + 1 questions pass and the next request is a
/// 429 `system_one_daily_cap` (type `quota`) whose `Retry-After` is the time to the next
/// UTC midnight, not a per-minute wait; it reaches no backend.
#[tokio::test]
async fn the_daily_cap_answers_429_until_utc_midnight() {
    let (fake, service) = keyed_service(&format!(
        "[[key]]\nname = \"capped\"\nsha256 = \"{}\"\ndaily_questions = 3\n",
        sha256_hex(FILE_KEY)
    ))
    .await;
    assert_eq!(
        ask_as(&service, Some(FILE_KEY), &choices(2)).await.status,
        200
    );
    assert_eq!(
        ask_as(&service, Some(FILE_KEY), &choices(1)).await.status,
        200
    );
    let sent = fake.chat_requests();
    let before = secs_to_utc_midnight();
    let capped = ask_as(&service, Some(FILE_KEY), &choices(1)).await;
    let after = secs_to_utc_midnight();
    capped.assert_refused(429, "system_one_daily_cap", "quota");
    let retry = capped.retry_secs();
    // `after` ≤ retry ≤ `before`, unless midnight passed in between (then a full day).
    assert!(
        (after..=before).contains(&retry) || before < after,
        "Retry-After {retry}, expected between {after} and {before}"
    );
    assert!(capped.text.contains("00:00 UTC"), "{}", capped.text);
    assert_eq!(fake.chat_requests(), sent);
    let metrics = get_as(&service, "/metrics", None).await.text;
    assert!(
        metrics.contains("systemone_key_rejections_total{key=\"capped\",kind=\"daily\"} 1"),
        "{metrics}"
    );
}

/// A keys file that cannot be used stops the service at startup with a message that
/// names the file and the entry but never a key.
#[test]
fn a_bad_keys_file_is_refused_without_echoing_keys() {
    std::env::set_var("SYSTEMONE_TEST_GATEWAY_AUTH_OTHER", FILE_KEY);
    let path = keys_file(
        "[[key]]\nname = \"one\"\nkey_env = \"SYSTEMONE_TEST_GATEWAY_AUTH_OTHER\"\n\n[[key]]\nname = \"two\"\nkey_env = \"SYSTEMONE_TEST_GATEWAY_AUTH_OTHER\"\n",
    );
    let config = config(
        "http://127.0.0.1:9/v1",
        &["--keys-file", path.to_str().expect("utf-8")],
    );
    let error = systemone::build_state(&config)
        .expect_err("refused")
        .to_string();
    assert!(error.contains("keys.toml"), "{error}");
    assert!(error.contains("\"two\""), "{error}");
    assert!(!error.contains(FILE_KEY), "{error}");
}
