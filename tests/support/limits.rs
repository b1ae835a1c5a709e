//! What the per-key limit suites share (tests/hermetic/limits_shared.rs on the embedded and
//! in-memory stores, tests/live/limits_shared.rs on a real Redis): the user and admin keys,
//! their keys file, the replica configuration and the restart-keeps-the-count scenario.

use serde_json::{json, Map, Value};
use systemone::config::ServeConfig;

use super::fake_vllm::FakeVllm;
use super::replicas::Stoppable;
use super::{ask_as, sha256_hex};

/// The key whose limits are under test.
pub const KEY: &str = "sk-limits-shared-user-7f3a";

/// The admin key (`--admin-key admin`).
pub const ADMIN: &str = "sk-limits-shared-admin-91bc";

/// A request of `k` choice questions with 3 options each (one upstream read per question).
pub fn questions(k: usize) -> Value {
    let qs: Map<String, Value> = (0..k)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "choice", "instructions": format!("Question {i}?"),
                       "criteria": {"a": "first", "b": "second", "c": "third"}}),
            )
        })
        .collect();
    json!({"state": "A customer writes: my invoice is wrong.", "questions": qs})
}

/// A keys file: `user` (KEY) with `limits` (TOML lines), and `admin` (ADMIN) without.
pub fn keys_file(limits: &str) -> std::path::PathBuf {
    super::temp_file(
        "keys.toml",
        &format!(
            "[[key]]\nname = \"user\"\nsha256 = \"{}\"\n{limits}\n\n[[key]]\nname = \"admin\"\nsha256 = \"{}\"\n",
            sha256_hex(KEY),
            sha256_hex(ADMIN)
        ),
    )
}

/// The serve configuration of a replica on `fake` with `limits` for the user key, plus
/// `extra` flags.
pub fn config(fake: &FakeVllm, limits: &str, extra: &[&str]) -> ServeConfig {
    let keys = keys_file(limits);
    let mut flags = vec![
        "--keys-file",
        keys.to_str().expect("utf-8"),
        "--admin-key",
        "admin",
    ];
    flags.extend_from_slice(extra);
    super::config(&fake.base_url(), &flags)
}

/// Answers 4 of a cap of 6 questions, stops the replica, starts another from the same
/// configuration: it answers 2 more and then refuses, naming the 6 used today.
pub async fn restart_keeps_the_count(config: &ServeConfig, fake: &FakeVllm) {
    let first = Stoppable::start(systemone::build_state(config).expect("state")).await;
    for _ in 0..2 {
        let reply = ask_as(&first.service, Some(KEY), &questions(2)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    first.stop().await;
    let second = Stoppable::start(systemone::build_state(config).expect("state reopens")).await;
    assert_eq!(
        ask_as(&second.service, Some(KEY), &questions(2))
            .await
            .status,
        200
    );
    let capped = ask_as(&second.service, Some(KEY), &questions(1)).await;
    capped.assert_code(429, "system_one_daily_cap", "quota");
    assert!(capped.text.contains("6 used today"), "{}", capped.text);
    assert_eq!(fake.chat_requests(), 6);
    second.stop().await;
}
