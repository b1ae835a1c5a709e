//! A fake identity provider: P-256 key pairs made by the test ([`Signer`]), which sign its
//! tokens, and a JWKS endpoint on 127.0.0.1:0 ([`FakeJwks`]) that publishes their public
//! halves, counts its fetches, and can go down (503), publish a rotated-in key, or answer
//! a body that never ends (counting the bytes each fetch was handed).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine;
use futures::StreamExt;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::EncodePrivateKey;
use serde_json::Value;

use crate::support::spawn_app;

/// The issuer every test token names.
pub const ISSUER: &str = "https://idp.test/";
/// The audience every test token names.
pub const AUDIENCE: &str = "systemone-test";

/// One ES256 key pair, made fresh by the test, and its key id.
pub struct Signer {
    kid: String,
    key: EncodingKey,
    /// The public half as a JWK (with `kid` and `alg`).
    pub jwk: Jwk,
}

impl Signer {
    /// A fresh P-256 key pair named `kid`.
    pub fn new(kid: &str) -> Self {
        let secret = loop {
            let bytes: Vec<u8> = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
                .iter()
                .flat_map(|u| u.as_bytes().to_vec())
                .collect();
            if let Ok(secret) = p256::SecretKey::from_slice(&bytes) {
                break secret;
            }
        };
        let der = secret.to_pkcs8_der().expect("pkcs8");
        let key = EncodingKey::from_ec_der(der.as_bytes());
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).expect("jwk");
        jwk.common.key_id = Some(kid.to_owned());
        Signer {
            kid: kid.to_owned(),
            key,
            jwk,
        }
    }

    /// A token with `claims`, signed ES256 and naming this key.
    pub fn token(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.key).expect("signs")
    }

    /// The public key's bytes as a JWKS shows them (`x` then `y`, base64url): what an HS256
    /// forger would use as the "secret".
    pub fn public_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.jwk).expect("json")
    }
}

/// The claims of a token valid now for `sub`, plus `extra`.
pub fn claims(sub: &str, extra: Value) -> Value {
    let now = jsonwebtoken::get_current_timestamp();
    let mut claims = serde_json::json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now, "nbf": now - 5, "exp": now + 600,
    });
    if let (Some(map), Value::Object(more)) = (claims.as_object_mut(), extra) {
        map.extend(more);
    }
    claims
}

/// base64url without padding.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[derive(Default)]
struct Published {
    keys: Mutex<Vec<Jwk>>,
    fetches: AtomicUsize,
    down: AtomicBool,
    endless: AtomicBool,
    /// Bytes of the endless body handed to each fetch that got one.
    handed: Mutex<Vec<Arc<AtomicUsize>>>,
}

/// One chunk of the endless body.
const CHUNK: usize = 64 * 1024;

/// The JWKS endpoint.
pub struct FakeJwks {
    url: String,
    state: Arc<Published>,
}

impl FakeJwks {
    /// Publishes the public keys of `signers` at `http://127.0.0.1:<port>/jwks.json`.
    pub async fn start(signers: &[&Signer]) -> Self {
        let state = Arc::new(Published::default());
        *state.keys.lock().expect("lock") = signers.iter().map(|s| s.jwk.clone()).collect();
        let app = Router::new()
            .route("/jwks.json", get(serve))
            .with_state(state.clone());
        let addr = spawn_app(app).await;
        FakeJwks {
            url: format!("http://{addr}/jwks.json"),
            state,
        }
    }

    /// The JWKS URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Adds `signer`'s public key to the set (a key rotated in).
    pub fn publish(&self, signer: &Signer) {
        self.state
            .keys
            .lock()
            .expect("lock")
            .push(signer.jwk.clone());
    }

    /// Answers 503 (down) or the set.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// Answers a chunked body that never ends (`{"keys":[` and then spaces) or the set.
    pub fn set_endless(&self, endless: bool) {
        self.state.endless.store(endless, Ordering::SeqCst);
    }

    /// The most bytes of the endless body one fetch was handed (the server's side: what
    /// the fetcher read, plus what the sockets' buffers held when it stopped reading).
    pub fn most_handed(&self) -> usize {
        let handed = self.state.handed.lock().expect("lock");
        handed
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .max()
            .unwrap_or(0)
    }

    /// How many times the set was asked for.
    pub fn fetches(&self) -> usize {
        self.state.fetches.load(Ordering::SeqCst)
    }
}

async fn serve(State(state): State<Arc<Published>>) -> Response {
    state.fetches.fetch_add(1, Ordering::SeqCst);
    if state.down.load(Ordering::SeqCst) {
        return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    if state.endless.load(Ordering::SeqCst) {
        let handed = Arc::new(AtomicUsize::new(0));
        state.handed.lock().expect("lock").push(handed.clone());
        let opening = futures::stream::once(async { b"{\"keys\":[".to_vec() });
        let spaces = futures::stream::repeat_with(|| vec![b' '; CHUNK]);
        let body = opening.chain(spaces).map(move |chunk| {
            handed.fetch_add(chunk.len(), Ordering::SeqCst);
            Ok::<_, std::io::Error>(chunk)
        });
        return axum::body::Body::from_stream(body).into_response();
    }
    let keys = state.keys.lock().expect("lock").clone();
    axum::Json(JwkSet { keys }).into_response()
}
