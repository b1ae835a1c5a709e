//! Per-key limits without Redis: a service restarted mid-day keeps the day's count in its
//! `--state-dir` (the embedded `redb` store), an open service reports the anonymous caller's
//! usage from memory, and unusable limit-store settings are refused at startup. The limits
//! shared by replicas through a real `redis-server` are in the live tier
//! (`tests/live/limits_shared.rs`).

use serde_json::json;

use crate::support;
use crate::support::bodies::choices;
use crate::support::fake_vllm::FakeVllm;
use crate::support::limits::{config, restart_keeps_the_count, user_and_admin_keys, KEY};
use crate::support::replicas::{unique_prefix, Stoppable};
use crate::support::{ask_as, get_as};

/// A service restarted mid-day keeps the day's count in its `--state-dir` (the `redb`
/// file), and its usage too.
#[tokio::test]
async fn a_restarted_service_keeps_the_days_count_in_its_state_dir() {
    let fake = FakeVllm::start().await;
    let dir = std::env::temp_dir().join(format!("systemone-state-{}", unique_prefix()));
    let config = config(
        &fake,
        "daily_questions = 6",
        &["--state-dir", dir.to_str().expect("utf-8")],
    );
    restart_keeps_the_count(&config, &fake).await;
    let service = Stoppable::start(systemone::build_state(&config).expect("reopens")).await;
    let usage = get_as(&service.service, "/v1/usage", Some(KEY)).await;
    assert_eq!(usage.status, 200, "{}", usage.text);
    assert_eq!(usage.body["total"]["questions"], json!(6), "{}", usage.text);
    assert_eq!(usage.body["total"]["requests"], json!(3), "{}", usage.text);
    service.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without Redis or a state directory the usage endpoint reads this process's memory, and
/// in an open service it reports the `anonymous` caller.
#[tokio::test]
async fn an_open_service_reports_the_anonymous_callers_usage_from_memory() {
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    let answered = ask_as(&service, None, &choices(2)).await;
    assert_eq!(answered.status, 200, "{}", answered.text);
    let usage = get_as(&service, "/v1/usage", None).await;
    assert_eq!(usage.status, 200, "{}", usage.text);
    assert_eq!(usage.body["usage"][0]["key"], json!("anonymous"));
    assert_eq!(usage.body["total"]["questions"], json!(2));
    assert_eq!(
        usage.body["total"]["input_tokens"],
        answered.body["usage"]["input_tokens"]
    );
    let ready = get_as(&service, "/readyz", None).await;
    assert_eq!(
        ready.body["limits"]["store"],
        json!("memory"),
        "{}",
        ready.text
    );
}

/// Settings that cannot work stop the service at startup with a message naming the flag
/// and the value (never a password from the URL).
#[tokio::test]
async fn unusable_limit_store_settings_are_refused_at_startup() {
    let fake = FakeVllm::start().await;
    let dir = std::env::temp_dir().join(format!("systemone-state-{}", unique_prefix()));
    let dir = dir.to_str().expect("utf-8");
    for (flags, names) in [
        (
            vec!["--redis-url", "redis://127.0.0.1:1", "--state-dir", dir],
            "not both",
        ),
        (
            vec!["--redis-url", "http://:hunter2-canary@127.0.0.1:1"],
            "--redis-url",
        ),
        (
            vec![
                "--redis-url",
                "redis://127.0.0.1:1",
                "--redis-prefix",
                "a b",
            ],
            "\"a b\"",
        ),
    ] {
        let config = config(&fake, "", &flags);
        let e = systemone::build_state(&config)
            .expect_err("refused")
            .to_string();
        assert!(e.contains(names), "{flags:?}: {e}");
        assert!(!e.contains("hunter2-canary"), "{e}");
    }
    let keys = user_and_admin_keys("");
    let config = support::config(
        &fake.base_url(),
        &[
            "--keys-file",
            keys.to_str().expect("utf-8"),
            "--admin-key",
            "nobody",
        ],
    );
    let e = systemone::build_state(&config)
        .expect_err("refused")
        .to_string();
    assert!(e.contains("--admin-key \"nobody\""), "{e}");
}
