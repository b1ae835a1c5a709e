//! The official TypeSafe Python SDK with a signed token as its API key (issue 40): a token
//! signed by a key pair the test made, verified against the JWKS the test serves on
//! 127.0.0.1, is answered; the same token with its payload changed is the SDK's
//! authentication error with the contract's body. The backend is the fake vLLM: what is
//! tested is the token path between the SDK and the service.

use std::time::Duration;

use serde_json::{json, Value};

use crate::setup::sdk::{run_typesafe_script_as, scenario, sdk_python};
use crate::support::fake_jwks::{b64, claims, FakeJwks, Signer, AUDIENCE, ISSUER};
use crate::support::fake_vllm::FakeVllm;
use crate::support::{self, get};

#[tokio::test]
async fn the_python_sdk_asks_with_a_signed_token_as_its_api_key() {
    let python = sdk_python();
    let signer = Signer::new("sdk-key");
    let jwks = FakeJwks::start(&[&signer]).await;
    let keys = support::keys_file(&format!(
        "[jwt]\njwks_url = \"{}\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n",
        jwks.url()
    ));
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(
        &fake.base_url(),
        &["--keys-file", keys.to_str().expect("utf-8")],
    ))
    .await;
    for _ in 0..500 {
        let ready: Value =
            serde_json::from_str(&get(&service, "/readyz").await.text).unwrap_or_default();
        if ready["tokens"]["ready"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let token = signer.token(&claims("sdk-user@example.com", json!({})));
    let tampered = {
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = b64(claims("mallory@example.com", json!({}))
            .to_string()
            .as_bytes());
        parts.join(".")
    };
    let url = format!("http://{}", service.addr);
    let env = [
        ("TYPESAFE_API_KEY", token.as_str()),
        ("TYPESAFE_BAD_TOKEN", tampered.as_str()),
    ];
    let lines = run_typesafe_script_as(&python, "signed_token.py", url, &env).await;

    let answered = scenario(&lines, "answered");
    let noul = answered["noul"].as_f64().expect("a noul");
    assert!((0.0..=1.0).contains(&noul), "{answered}");
    let refused = scenario(&lines, "refused");
    assert_eq!(
        refused["raised"], "TypeSafeAuthenticationError",
        "{refused}"
    );
    assert_eq!(refused["status"], 401, "{refused}");
    assert_eq!(
        refused["body"]["error"]["code"], "system_one_token_invalid",
        "{refused}"
    );
    assert!(
        !refused.to_string().contains(&tampered[..40]),
        "the token is not repeated: {refused}"
    );
}
