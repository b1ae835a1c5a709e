//! The page and the redirect to it, served with their headers; the page's bytes are
//! `index.html`, embedded.

use axum::response::{Redirect, Response};

use super::csp::{policy_header, serve_page, PagePolicy};

/// The page, as served.
pub(super) const PAGE: &str = include_str!("index.html");

/// The page's Content-Security-Policy, built once.
static POLICY: PagePolicy = PagePolicy::new(|| policy_header(PAGE));

/// `GET /playground`: the page.
pub(in crate::http) async fn page() -> Response {
    serve_page(PAGE, &POLICY)
}

/// `GET /`: to the page. Relative, so it also lands right behind a proxy's path prefix;
/// temporary, so no browser remembers it should `/` ever serve something else.
pub(in crate::http) async fn root() -> Redirect {
    Redirect::temporary("playground")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere_and_runs_no_inline_handler() {
        for forbidden in [
            "http://",
            "https://",
            "<script src",
            "style=\"",
            "@import",
            "//cdn",
        ] {
            assert!(!PAGE.contains(forbidden), "the page contains {forbidden:?}");
        }
        let handler = PAGE
            .split(|c: char| c.is_whitespace())
            .find(|word| word.starts_with("on") && word.contains("=\""));
        assert_eq!(handler, None, "an inline event handler");
        assert!(
            !PAGE.contains("innerHTML"),
            "caller text is set as text only"
        );
    }
}
