//! What only the hermetic tier needs: the fakes of the `openai` dialect's host families
//! (`fake_openai`) and of a native System One upstream (`fake_native`), the validation
//! table's runner (`rows`), the property tests' in-process harness (`props`), the in-flight
//! connection counter (`tcp_counter`), and a few checks of its own.

pub mod fake_native;
pub mod fake_openai;
pub mod props;
pub mod rows;
pub mod tcp_counter;

use serde_json::{json, Value};

use crate::support::{
    assert_error, get, registry_config, Reply, Service, ENV_LOCK, HOLDS_ENV_LOCK,
};

/// Why the service refuses to start with the registry `toml`.
pub fn registry_error(toml: &str) -> String {
    match systemone::build_state(&registry_config(toml, &[])) {
        Ok(_) => panic!("the registry was accepted: {toml}"),
        Err(e) => e.to_string(),
    }
}

/// Waits (10 s at most) until every upstream in-flight slot is free: a read abandoned
/// mid-exchange frees its slot only once its connection is closed at both ends, a moment
/// after its request was answered.
pub async fn slots_freed(service: &Service) {
    let freed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while service.state.pipeline.in_flight().in_use() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(freed.is_ok(), "in-flight slots still taken after 10 s");
}

/// Asserts a 503 `system_one_token_table_mismatch` with a `Retry-After` of 1 to 60 s.
pub fn assert_mismatch_503(reply: &Reply) {
    assert_error(reply, 503, "system_one_token_table_mismatch", "unavailable");
    let retry: u64 = reply
        .header("retry-after")
        .expect("a 503 carries Retry-After")
        .parse()
        .expect("Retry-After is whole seconds");
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
}

/// `/readyz` of a service with the one model `glm-5.3-flash`, asserting its status and the
/// model's `token_table` word.
pub async fn assert_ready(service: &Service, status: u16, token_table: &str) {
    let reply = get(service, "/readyz").await;
    assert_eq!(reply.status, status, "{}", reply.text);
    assert_eq!(reply.body["ready"], json!(status == 200), "{}", reply.text);
    assert_eq!(
        reply.body["models"][0]["name"],
        json!("glm-5.3-flash"),
        "{}",
        reply.text
    );
    assert_eq!(
        reply.body["models"][0]["token_table"],
        json!(token_table),
        "{}",
        reply.text
    );
}

/// A JSON list of token ids (`logprob_token_ids`, `allowed_token_ids`, …).
pub fn ids_of(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id"))
        .collect()
}

/// The smallest valid PNG (1×1, grey).
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x7e, 0x9b,
    0x55, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0x60, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x01, 0xe2, 0x21, 0xbc, 0x33, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

impl Reply {
    /// Like [`Reply::read`], asserting that the body is JSON.
    pub async fn read_json(response: reqwest::Response) -> Self {
        let reply = Reply::read(response).await;
        if let Err(e) = serde_json::from_str::<Value>(&reply.text) {
            panic!("a JSON body: {e}: {}", reply.text);
        }
        reply
    }
}

/// `body` at `temperature: 1`, so its answers carry the raw probabilities of the reads.
pub fn at_temperature_1(mut body: Value) -> Value {
    body["temperature"] = json!(1);
    body
}

/// Runs `f` with `SYSTEMONE_API_KEYS` set to `keys`, while no other thread parses a command
/// line, and unsets it again (even when `f` panics).
pub fn with_api_keys_env<T>(keys: &str, f: impl FnOnce() -> T) -> T {
    struct Unset;
    impl Drop for Unset {
        fn drop(&mut self) {
            std::env::remove_var("SYSTEMONE_API_KEYS");
            HOLDS_ENV_LOCK.set(false);
        }
    }
    let _guard = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    HOLDS_ENV_LOCK.set(true);
    std::env::set_var("SYSTEMONE_API_KEYS", keys);
    let _unset = Unset;
    f()
}

/// Runs the test `name` (its path in this binary) alone, in a fresh process of this binary,
/// for a test that measures the whole process (its resident memory), which the suites
/// running beside it in this process would disturb. Returns `true` in the test's first
/// process, after the fresh one passed (the test has nothing left to do); `false` in the
/// fresh one, which runs the test's body.
pub fn alone(name: &str) -> bool {
    const ALONE: &str = "SYSTEMONE_TEST_ALONE";
    if std::env::var(ALONE).is_ok_and(|v| v == name) {
        return false;
    }
    let exe = std::env::current_exe().expect("this test binary");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, name)
        .output()
        .expect("this test binary runs");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let ran = String::from_utf8_lossy(&out.stdout).contains("1 passed");
    assert!(
        out.status.success() && ran,
        "{name}, run alone: {}",
        out.status
    );
    true
}
