//! `cache_salt` on the real vLLM: two tenants asking about the same state share no cached
//! prompt tokens, and one tenant still reuses its own; without the salt the second tenant
//! would hit the first one's cache (the control, which shows the measure can see sharing).
//! The numbers are vLLM's own: `usage.cached_tokens` is its `prompt_tokens_details`
//! (`--enable-prompt-tokens-details`, scripts/start-vllm.sh).

use serde_json::{json, Value};

use crate::setup::vllm::{backend_turn, vllm_config};
use crate::support::{self, ask_as, Service};

const ALICE: &str = "sk-tenant-alice";
const BOB: &str = "sk-tenant-bob";

/// A service on vLLM with two keys (two tenants), with `extra` flags.
async fn two_tenants(url: &str, extra: &[&str]) -> Service {
    let keys = support::keys_file(&format!(
        "{}{}",
        support::key_entry("alice", ALICE, ""),
        support::key_entry("bob", BOB, "")
    ));
    let mut flags = vec!["--keys-file", keys.to_str().expect("utf-8")];
    flags.extend_from_slice(extra);
    support::start(vllm_config(url, &flags)).await
}

/// One noul (one upstream read, so no read of the same request warms the cache for
/// another) about a state no earlier request sent: a few hundred tokens, so it spans
/// several of vLLM's cache blocks.
fn body(state: &str) -> Value {
    json!({
        "state": state,
        "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}},
    })
}

fn fresh_state() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "Ticket {id}. {}",
        "The customer writes that the invoice total is wrong, that they were charged twice \
         for the same order, and asks what can be done about it before the end of the month. "
            .repeat(6)
    )
}

/// The prompt tokens vLLM served from its prefix cache for `bearer`'s request.
async fn cached(service: &Service, bearer: &str, body: &Value) -> u64 {
    let reply = ask_as(service, Some(bearer), body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["usage"]["cached_tokens"]
        .as_u64()
        .expect("usage.cached_tokens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_share_no_cached_tokens_and_each_reuses_its_own() {
    let (url, _turn) = backend_turn().await;
    let salted = two_tenants(&url, &[]).await;
    let state = body(&fresh_state());
    let first = cached(&salted, ALICE, &state).await;
    let again = cached(&salted, ALICE, &state).await;
    let other = cached(&salted, BOB, &state).await;
    eprintln!(
        "cache_salt on: alice first {first}, alice again {again}, bob {other} cached prompt tokens"
    );
    assert!(
        again > first,
        "a tenant reuses its own cache: {first} then {again}"
    );
    assert_eq!(
        other, 0,
        "another tenant finds none of it (salts are per process and tenant)"
    );

    // The control: the same asked without salts, bob's request hits alice's cache.
    let open = two_tenants(&url, &["--cache-salt", "false"]).await;
    let state = body(&fresh_state());
    let first = cached(&open, ALICE, &state).await;
    let other = cached(&open, BOB, &state).await;
    eprintln!("cache_salt off: alice first {first}, bob {other} cached prompt tokens");
    assert!(
        other > first,
        "unsalted, bob's request reuses alice's: {first} then {other}"
    );
}
