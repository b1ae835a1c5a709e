//! What the per-key limit suites share (tests/hermetic/limits_shared.rs on the embedded and
//! in-memory stores, tests/live/limits_shared.rs on a real Redis): the user and admin keys,
//! their keys file, the replica configuration and the restart-keeps-the-count scenario.

use systemone::config::ServeConfig;

use super::bodies::choices;
use super::fake_vllm::FakeVllm;
use super::replicas::Stoppable;
use super::{ask_as, key_entry};

/// The key whose limits are under test.
pub const KEY: &str = "sk-limits-shared-user-7f3a";

/// The admin key (`--admin-key admin`).
pub const ADMIN: &str = "sk-limits-shared-admin-91bc";

/// A keys file: `user` (KEY) with `limits` (TOML lines), and `admin` (ADMIN) without.
pub fn user_and_admin_keys(limits: &str) -> std::path::PathBuf {
    super::keys_file(&(key_entry("user", KEY, limits) + &key_entry("admin", ADMIN, "")))
}

/// The serve configuration of a replica on `fake` with `limits` for the user key, plus
/// `extra` flags.
pub fn config(fake: &FakeVllm, limits: &str, extra: &[&str]) -> ServeConfig {
    let keys = user_and_admin_keys(limits);
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
        let reply = ask_as(&first.service, Some(KEY), &choices(2)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    first.stop().await;
    let second = Stoppable::start(systemone::build_state(config).expect("state reopens")).await;
    assert_eq!(
        ask_as(&second.service, Some(KEY), &choices(2)).await.status,
        200
    );
    let capped = ask_as(&second.service, Some(KEY), &choices(1)).await;
    capped.assert_code(429, "system_one_daily_cap", "quota");
    assert!(capped.text.contains("6 used today"), "{}", capped.text);
    assert_eq!(fake.chat_requests(), 6);
    second.stop().await;
}
