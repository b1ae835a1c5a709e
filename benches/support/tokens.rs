//! A keys file with one key and a `[jwt]` section whose JWKS file holds a P-256 key made
//! here, and tokens signed with it: what `benches/gateway.rs` (`identify`) and
//! `benches/load.rs` (`LOAD_CALLERS`) measure a token caller against a key caller with.

use std::path::PathBuf;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::EncodePrivateKey;

/// The issuer and audience every bench token names.
const ISSUER: &str = "https://idp.bench/";
const AUDIENCE: &str = "bench";
/// The key id of the one signing key.
const KID: &str = "bench";

/// The plaintext API key the keys file configures (its digest only is written).
pub const KEY: &str = "sk-bench";

/// The keys file and the signing key of its JWKS.
pub struct BenchTokens {
    /// `keys.toml`: a tier `free`, the key [`KEY`] in it, and `[jwt]` on the JWKS file.
    pub keys_file: PathBuf,
    signing: EncodingKey,
}

impl BenchTokens {
    /// Writes the JWKS and keys file into a fresh temporary directory.
    pub fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "systemone-bench-jwt-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).expect("tmp");
        let (signing, jwk) = es256_pair();
        let jwks = dir.join("jwks.json");
        let set = JwkSet { keys: vec![jwk] };
        std::fs::write(&jwks, serde_json::to_vec(&set).expect("json")).expect("write");
        let hex: String = systemone::http::auth::digest(KEY)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let keys_file = dir.join("keys.toml");
        std::fs::write(
            &keys_file,
            format!(
                "[[tier]]\nname = \"free\"\ndaily_questions = 1000000000000\n\n[[key]]\nname = \"k\"\nsha256 = \"{hex}\"\ntier = \"free\"\n\n[jwt]\njwks_file = \"{}\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\ndefault_tier = \"free\"\n",
                jwks.display()
            ),
        )
        .expect("write");
        BenchTokens { keys_file, signing }
    }

    /// A token for `subject`, valid for an hour, allowed to ask and read its usage.
    pub fn token(&self, subject: &str) -> String {
        let now = jsonwebtoken::get_current_timestamp();
        let claims = serde_json::json!({"iss": ISSUER, "aud": AUDIENCE, "sub": subject,
            "nbf": now, "exp": now + 3600, "scope": "ask usage:own"});
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(KID.into());
        jsonwebtoken::encode(&header, &claims, &self.signing).expect("signs")
    }
}

/// A P-256 key pair (for `jsonwebtoken`) and its public JWK named [`KID`].
fn es256_pair() -> (EncodingKey, Jwk) {
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
    jwk.common.key_id = Some(KID.to_owned());
    (key, jwk)
}
