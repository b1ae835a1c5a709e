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

    /// The calibration watch's routes are described as they answer: the figures and the
    /// charts as JSON (the charts' SVG as strings), the page as HTML like the playground.
    #[test]
    fn the_calibration_routes_are_described() {
        let doc: serde_json::Value = serde_json::from_str(super::document()).expect("JSON");
        let ok = |path: &str| doc["paths"][path]["get"]["responses"]["200"]["content"].clone();
        let schema = |path: &str| ok(path)["application/json"]["schema"]["$ref"].clone();
        assert_eq!(
            schema("/v1/calibration"),
            "#/components/schemas/CalibrationPage"
        );
        assert_eq!(
            schema("/v1/calibration/charts"),
            "#/components/schemas/CalibrationCharts"
        );
        // The shape's names are flattened in (`allOf`): the charts' own properties beside.
        let charts = &doc["components"]["schemas"]["CalibrationShapeCharts"];
        let property = |name: &str| {
            std::iter::once(charts)
                .chain(charts["allOf"].as_array().into_iter().flatten())
                .map(|part| part["properties"][name].clone())
                .find(|p| !p.is_null())
                .unwrap_or_default()
        };
        assert_eq!(property("reliability")["type"], "string", "{charts}");
        assert_eq!(property("drift")["type"], "object", "{charts}");
        let query = &doc["paths"]["/v1/calibration/charts"]["get"]["parameters"];
        assert!(
            query
                .as_array()
                .is_some_and(|q| q.iter().any(|p| p["name"] == "type")),
            "{query}"
        );
        for page in ["/calibration", "/playground"] {
            assert!(
                ok(page)["text/html; charset=utf-8"].is_object(),
                "{page}: {}",
                ok(page)
            );
        }
    }
}
