//! The page, served with its headers; its bytes are `index.html`, embedded.

use axum::response::Response;

use crate::http::playground::csp::{policy_header, serve_page, PagePolicy};

/// The page, as served.
pub(super) const PAGE: &str = include_str!("index.html");

/// The page's Content-Security-Policy, built once.
static POLICY: PagePolicy = PagePolicy::new(|| policy_header(PAGE));

/// `GET /calibration`: the page.
pub(in crate::http) async fn page() -> Response {
    serve_page(PAGE, &POLICY)
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
