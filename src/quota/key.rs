//! [`KeyQuota`]: one key as the stores know it.

use super::key_limits::KeyLimits;
use super::local::LocalLimits;

/// One key as the stores know it: its configured name and its limits' local state.
#[derive(Debug)]
pub struct KeyQuota {
    /// The configured name (or `key-N`): the store's key, the usage record's key.
    pub name: String,
    /// This process's state of the key's limits.
    pub local: LocalLimits,
}

impl KeyQuota {
    /// A key named `name` with `limits`.
    pub fn new(name: String, limits: KeyLimits) -> Self {
        KeyQuota {
            name,
            local: LocalLimits::new(limits),
        }
    }

    /// The configured numbers.
    pub fn limits(&self) -> &KeyLimits {
        self.local.limits()
    }
}
