//! [`CacheSalt`]: the `cache_salt` a vLLM read carries, so that tenants never share cached
//! prompt blocks.
//!
//! vLLM keeps one prefix cache for every request; a tenant who can time its own requests
//! could learn whether another tenant's text is cached. vLLM's `cache_salt` request field
//! mixes a value into the hash of the first cached block, so requests with different salts
//! never share a block and requests with the same salt still do. The salt here is a keyed
//! hash (HMAC-SHA256) of the caller's tenant (its key's name, or a token caller's
//! `sub-…` or `…@<tag>` name), never the tenant itself: the key is `--cache-salt-secret`, or one drawn at
//! start-up (then replicas salt the same tenant differently, and share nothing in a
//! backend they share; give them one secret). On by default whenever keys or tokens are
//! configured (`--cache-salt false` turns it off); an open service has one tenant and sends
//! no salt.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::secret::Secret;

/// Hex digits of the salt: the whole 256-bit HMAC, as vLLM's field doc asks for ("long
/// enough to be unpredictable (e.g. … 256 bit)"; at most 128 characters, no `@ / \`).
const SALT_HEX: usize = 64;

/// Derives each tenant's salt; off: none.
pub struct CacheSalt {
    /// The HMAC key; `None` when salting is off.
    key: Option<Vec<u8>>,
}

impl std::fmt::Debug for CacheSalt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheSalt")
            .field("on", &self.key.is_some())
            .finish()
    }
}

impl CacheSalt {
    /// Salting with `secret` (or a random key when `None`), or off.
    pub fn new(on: bool, secret: Option<&Secret>) -> Self {
        let key = on.then(|| match secret {
            Some(s) => s.expose().as_bytes().to_vec(),
            None => [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
                .iter()
                .flat_map(|u| u.as_bytes().to_vec())
                .collect(),
        });
        CacheSalt { key }
    }

    /// No salts.
    pub fn off() -> Self {
        CacheSalt { key: None }
    }

    /// The salt of `tenant`, when salting is on.
    pub fn of(&self, tenant: &str) -> Option<String> {
        let key = self.key.as_ref()?;
        let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
        mac.update(b"systemone cache_salt\0");
        mac.update(tenant.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        hex.truncate(SALT_HEX);
        Some(hex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salts_differ_per_tenant_and_secret_and_never_show_the_tenant() {
        let salt = CacheSalt::new(true, Some(&Secret::new("s3cret")));
        let a = salt.of("acme").expect("on");
        assert_eq!(a.len(), SALT_HEX);
        assert_eq!(salt.of("acme"), Some(a.clone()));
        assert_ne!(salt.of("globex"), Some(a.clone()));
        assert!(!a.contains("acme"));
        let other = CacheSalt::new(true, Some(&Secret::new("another")));
        assert_ne!(other.of("acme"), Some(a));
        assert_eq!(CacheSalt::new(false, None).of("acme"), None);
        let random = CacheSalt::new(true, None);
        assert_ne!(random.of("acme"), CacheSalt::new(true, None).of("acme"));
    }
}
