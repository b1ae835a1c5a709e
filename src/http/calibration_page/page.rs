//! The page, served with its headers; its bytes are `index.html`, embedded.

use std::sync::LazyLock;

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};

use crate::http::playground::csp::policy;

/// The page, as served.
pub(super) const PAGE: &str = include_str!("index.html");

/// The page's Content-Security-Policy, built once (the fallback refuses everything).
static POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    HeaderValue::from_str(&policy(PAGE))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
});

/// `GET /calibration`: the page.
pub(in crate::http) async fn page() -> Response {
    (
        [
            (
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (CONTENT_SECURITY_POLICY, POLICY.clone()),
            (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        PAGE,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere_and_sets_no_html() {
        for forbidden in [
            "http://",
            "https://",
            "<script src",
            "style=\"",
            "@import",
            "innerHTML",
        ] {
            assert!(!PAGE.contains(forbidden), "the page contains {forbidden:?}");
        }
        let handler = PAGE
            .split(|c: char| c.is_whitespace())
            .find(|word| word.starts_with("on") && word.contains("=\""));
        assert_eq!(handler, None, "an inline event handler");
        assert!(
            PAGE.contains("image/svg+xml"),
            "the charts are parsed as SVG"
        );
    }
}
