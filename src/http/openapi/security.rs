//! How the API routes are authenticated, as the description says it.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::Modify;

/// `Authorization: Bearer <key>` (or a signed token, with `[jwt]` in the keys file) on the
/// API routes; with neither keys nor tokens configured any bearer, or none, is accepted.
pub(super) struct BearerKeys;

impl Modify for BearerKeys {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
