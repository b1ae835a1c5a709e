//! The description rendered once, and the route that serves it.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;

use super::ApiDoc;

/// The description, as served.
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        ApiDoc::openapi()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"cannot render the description: {e}\"}}"))
    })
}

pub(in crate::http) async fn handle() -> Response {
    ([(CONTENT_TYPE, "application/json")], document()).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_description_is_openapi_3_1_json() {
        let doc: serde_json::Value = serde_json::from_str(super::document()).expect("JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        assert!(doc["components"]["schemas"]["SystemOneRequest"].is_object());
    }
}
