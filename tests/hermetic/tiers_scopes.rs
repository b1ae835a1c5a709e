//! Tiers, scopes and cache salts, for keys and tokens alike.
//!
//! * A tier refused a model or a route is 403 `system_one_tier_model_refused` /
//!   `system_one_tier_route_refused`, naming the tier and what it lacks; a token naming no
//!   configured tier is 401 `system_one_token_bad_claims`.
//! * A token caller's limits are its tier's, counted per subject; usage and metrics name it
//!   by a hashed subject (`sub-…`) or `token:<tier>`, never by its subject or token.
//! * Scopes: a key without `scopes` keeps every route it had; a key or token without a
//!   scope gets 403 `system_one_scope_missing` on that route.
//! * vLLM reads carry a `cache_salt` per tenant: present with keys or tokens, equal for one
//!   tenant, different between tenants, never the tenant's name; none on an open service or
//!   with `--cache-salt false`.

use serde_json::{json, Value};

use crate::signed_tokens::jwt_section;
use crate::support::bodies::choices;
use crate::support::fake_jwks::{claims, FakeJwks, Signer};
use crate::support::fake_vllm::FakeVllm;
use crate::support::{
    self, ask_as, assert_error, get_as, key_entry, keys_file, metrics, registry_config, Service,
};

const FREE_KEY: &str = "sk-tier-free-key-1111";
const ASK_ONLY_KEY: &str = "sk-ask-only-key-2222";
const PLAIN_KEY: &str = "sk-plain-key-3333";

/// A service with two models (`big`, `small`) on one fake vLLM, the tiers `free` (model
/// `small`, two routes, 2 questions a day) and `pro`, three keys and `[jwt]`.
async fn tiered(jwks: &FakeJwks, extra_flags: &[&str]) -> (FakeVllm, Service) {
    let fake = FakeVllm::start().await;
    let url = fake.base_url();
    let registry = format!(
        "[[model]]\nname = \"big\"\nbackend = \"vllm\"\nbackend_url = \"{url}\"\n\
         token_table = \"golden-fake\"\n\n[[model]]\nname = \"small\"\nbackend = \"vllm\"\n\
         backend_url = \"{url}\"\ntoken_table = \"golden-fake\"\n"
    );
    let keys = format!(
        "[[tier]]\nname = \"free\"\ndaily_questions = 2\nmodels = [\"small\"]\n\
         routes = [\"/v1/systemone\", \"/v1/usage\"]\n\n[[tier]]\nname = \"pro\"\n\n\
         {}{}{}{}",
        key_entry("free-key", FREE_KEY, "tier = \"free\""),
        key_entry("ask-only", ASK_ONLY_KEY, "scopes = [\"ask\"]"),
        key_entry("plain", PLAIN_KEY, ""),
        jwt_section(jwks, "default_tier = \"free\"\njwks_refetch_secs = 0"),
    );
    let path = keys_file(&keys);
    let mut flags = vec!["--keys-file", path.to_str().expect("utf-8")];
    flags.extend_from_slice(extra_flags);
    let service = support::start(registry_config(&registry, &flags)).await;
    (fake, service)
}

fn on(model: &str, questions: usize) -> Value {
    let mut body = choices(questions);
    body["model"] = json!(model);
    body
}

/// Tiers refuse what they lack, by model and by route, for keys and tokens; limits are the
/// tier's, per subject; names are hashed.
#[tokio::test]
async fn a_tier_refuses_models_and_routes_it_lacks_and_limits_each_subject() {
    let signer = Signer::new("k1");
    let jwks = FakeJwks::start(&[&signer]).await;
    let (_fake, service) = tiered(&jwks, &[]).await;
    let alice = signer.token(&claims("alice@example.com", json!({})));
    let pro = signer.token(&claims("pat@example.com", json!({"tier": "pro"})));

    for (who, bearer) in [("token", alice.as_str()), ("key", FREE_KEY)] {
        let reply = ask_as(&service, Some(bearer), &on("big", 1)).await;
        assert_error(&reply, 403, "system_one_tier_model_refused", "auth");
        let message = reply.message();
        assert!(
            message.contains("\"free\"") && message.contains("\"big\""),
            "{who}: {message}"
        );
    }
    let decisions = service
        .client
        .post(service.url("/v1/decisions"))
        .bearer_auth(&alice)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("answers");
    let reply = support::Reply::read(decisions).await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    assert_eq!(
        reply.header("x-systemone-error-code"),
        Some("system_one_tier_route_refused")
    );
    assert!(
        reply.text.contains("/v1/decisions") && reply.text.contains("free"),
        "{}",
        reply.text
    );

    // The free tier's daily cap of 2 questions, for each subject on its own.
    assert_eq!(
        ask_as(&service, Some(&alice), &on("small", 2)).await.status,
        200
    );
    let capped = ask_as(&service, Some(&alice), &on("small", 1)).await;
    assert_error(&capped, 429, "system_one_daily_cap", "quota");
    let bob = signer.token(&claims("bob@example.com", json!({})));
    assert_eq!(
        ask_as(&service, Some(&bob), &on("small", 1)).await.status,
        200
    );
    // The pro tier: every model, no cap.
    assert_eq!(
        ask_as(&service, Some(&pro), &on("big", 3)).await.status,
        200
    );

    let gold = signer.token(&claims("gil", json!({"tier": "gold"})));
    let reply = ask_as(&service, Some(&gold), &on("small", 1)).await;
    assert_error(&reply, 401, "system_one_token_bad_claims", "auth");
    assert!(
        !reply.text.contains("gold"),
        "claim values stay out: {}",
        reply.text
    );

    // Usage names a token caller by its hashed subject; metrics by `token:<tier>`.
    let usage = get_as(&service, "/v1/usage", Some(&pro)).await;
    assert_error(&usage, 403, "system_one_scope_missing", "auth");
    let reader = signer.token(&claims(
        "alice@example.com",
        json!({"scope": "ask usage:own"}),
    ));
    let usage = get_as(&service, "/v1/usage", Some(&reader)).await;
    assert_eq!(usage.status, 200, "{}", usage.text);
    let name = usage.body["keys"][0].as_str().expect("a name").to_owned();
    assert!(name.starts_with("sub-") && name.len() == 36, "{name}");
    assert_eq!(usage.body["total"]["questions"], 2, "{}", usage.text);
    assert!(!usage.text.contains("alice"), "{}", usage.text);
    let text = metrics(&service).await;
    assert!(
        text.contains("key=\"token:free\""),
        "metrics label the tier"
    );
    assert!(
        !text.contains("sub-") && !text.contains("alice"),
        "no subject in metrics"
    );
}

/// Scopes on the usage and ledger routes: a key without `scopes` keeps its routes; a key or
/// token without a scope gets 403 `system_one_scope_missing` there, and one without `ask`
/// cannot ask.
#[tokio::test]
async fn scopes_guard_the_usage_and_ledger_routes_and_the_doors() {
    let signer = Signer::new("k1");
    let jwks = FakeJwks::start(&[&signer]).await;
    let (_fake, service) = tiered(&jwks, &[]).await;
    assert_eq!(
        get_as(&service, "/v1/usage", Some(PLAIN_KEY)).await.status,
        200
    );
    for path in [
        "/v1/usage",
        "/v1/ledger/decisions",
        "/v1/ledger/decisions/req_1",
    ] {
        let reply = get_as(&service, path, Some(ASK_ONLY_KEY)).await;
        assert_error(&reply, 403, "system_one_scope_missing", "auth");
        assert!(reply.message().contains("ledger:read") || reply.message().contains("usage:own"));
    }
    let outcome = service
        .client
        .post(service.url("/v1/ledger/decisions/req_1/outcomes"))
        .bearer_auth(ASK_ONLY_KEY)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("answers");
    let reply = support::Reply::read(outcome).await;
    assert_error(&reply, 403, "system_one_scope_missing", "auth");
    // A key with the default scopes reaches the ledger (which is off here: 404, not 403).
    let reply = get_as(&service, "/v1/ledger/decisions", Some(PLAIN_KEY)).await;
    assert_error(&reply, 404, "system_one_ledger_off", "not_configured");

    let no_ask = signer.token(&claims(
        "dan",
        json!({"scope": "openid usage:own", "tier": "pro"}),
    ));
    let reply = ask_as(&service, Some(&no_ask), &on("big", 1)).await;
    assert_error(&reply, 403, "system_one_scope_missing", "auth");
    let all = signer.token(&claims(
        "eve",
        json!({"scope": ["usage:all"], "tier": "pro"}),
    ));
    let reply = get_as(&service, "/v1/usage", Some(&all)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["keys"], json!(["free-key", "ask-only", "plain"]));
}

/// The `cache_salt` of every vLLM read: one per tenant, stable, never the tenant's name.
#[tokio::test]
async fn vllm_reads_carry_a_salt_per_tenant() {
    let signer = Signer::new("k1");
    let jwks = FakeJwks::start(&[&signer]).await;
    let (fake, service) = tiered(&jwks, &[]).await;
    let alice = signer.token(&claims("alice@example.com", json!({"tier": "pro"})));
    let mut salts = Vec::new();
    for bearer in [
        PLAIN_KEY,
        PLAIN_KEY,
        ASK_ONLY_KEY,
        alice.as_str(),
        alice.as_str(),
    ] {
        let before = fake.chat_bodies().len();
        let reply = ask_as(&service, Some(bearer), &on("big", 1)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let bodies = fake.chat_bodies();
        let new: Vec<&Value> = bodies[before..].iter().collect();
        assert!(!new.is_empty());
        let salt = new[0]["cache_salt"].as_str().expect("a salt").to_owned();
        assert!(
            new.iter().all(|b| b["cache_salt"] == json!(salt)),
            "one salt per request"
        );
        salts.push(salt);
    }
    assert_eq!(salts[0], salts[1], "stable for one key");
    assert_eq!(salts[3], salts[4], "stable for one subject");
    assert_ne!(salts[0], salts[2], "two keys differ");
    assert_ne!(salts[0], salts[3], "a key and a token differ");
    for salt in &salts {
        assert_eq!(salt.len(), 64);
        for identity in ["plain", "ask-only", "alice@example.com", "sub-"] {
            assert!(!salt.contains(identity), "{salt}");
        }
    }

    let (fake, service) = tiered(&jwks, &["--cache-salt", "false"]).await;
    assert_eq!(
        ask_as(&service, Some(PLAIN_KEY), &on("big", 1))
            .await
            .status,
        200
    );
    assert!(fake
        .chat_bodies()
        .iter()
        .all(|b| b.get("cache_salt").is_none()));
    let (fake, open) = support::setup(&[]).await;
    assert_eq!(ask_as(&open, None, &choices(1)).await.status, 200);
    assert!(fake
        .chat_bodies()
        .iter()
        .all(|b| b.get("cache_salt").is_none()));
}
