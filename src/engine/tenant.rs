//! Who a request is run for, as the engine needs it: never the caller's name itself.

/// What a request's reads carry for its caller, and whose position prior it learns from
/// and is corrected by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tenant {
    /// The caller's tenant salt, for a dialect that sends one (`http/auth/salt.rs`).
    pub cache_salt: Option<String>,
    /// The caller's id in the model's position prior
    /// ([`crate::calibration::prior::shape::tenant_id`]; empty: an open service's one
    /// caller).
    pub prior: String,
}
