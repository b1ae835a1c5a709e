//! `GET /playground` (and `GET /`, which redirects to it): a page where a person tries the
//! service in a browser (a state, questions added by type, the answers drawn as probability
//! bars with `confidence`, `temperature` and `option_mass` explained beside them).
//!
//! Why it is built this way:
//! - **No build step, nothing to deploy beside the binary.** The page is one HTML file with
//!   inline CSS and vanilla JS (`index.html`), embedded with `include_str!`; it loads
//!   nothing from anywhere but this service.
//! - **No new power.** It is static and holds no data, so the route needs no key; the page
//!   calls the same public routes (`/v1/models`, `/v1/systemone`) as any client, with the
//!   key the person types, so every key, limit and validation rule still applies.
//! - **Nothing logged.** The handler only returns the bytes; the one line the request
//!   middleware writes for every route (route, status, latency) is all the log sees.
//! - **A strict Content-Security-Policy.** Only this page's own inline `<script>` and
//!   `<style>` run, allowed by their sha256 (computed once from the embedded file, so an
//!   edit to the page cannot leave a stale hash); anything else, an injected script, an
//!   inline handler, a style attribute, a request to another origin, is refused by the
//!   browser.

use std::sync::LazyLock;

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Redirect, Response};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The page, as served.
const PAGE: &str = include_str!("index.html");

/// The page's Content-Security-Policy, built once. Should it ever fail to be a header value
/// (it is ASCII, so it cannot), the fallback refuses everything rather than nothing.
static POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    HeaderValue::from_str(&policy(PAGE))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
});

/// `GET /playground`: the page.
pub(super) async fn page() -> Response {
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

/// `GET /`: to the page. Relative, so it also lands right behind a proxy's path prefix;
/// temporary, so no browser remembers it should `/` ever serve something else.
pub(super) async fn root() -> Redirect {
    Redirect::temporary("playground")
}

/// The policy for `page`: its own origin for requests, and only its own inline blocks.
fn policy(page: &str) -> String {
    format!(
        "default-src 'self'; script-src {}; style-src {}; img-src 'self' data:; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        sources(page, "script"),
        sources(page, "style"),
    )
}

/// `'sha256-…'` for each inline `<tag>…</tag>` block of `page` (the browser hashes the
/// exact text between the tags), or `'none'` when there is none.
fn sources(page: &str, tag: &str) -> String {
    let hashes: Vec<String> = blocks(page, tag)
        .into_iter()
        .map(|block| format!("'sha256-{}'", STANDARD.encode(Sha256::digest(block))))
        .collect();
    if hashes.is_empty() {
        "'none'".to_string()
    } else {
        hashes.join(" ")
    }
}

/// The text of each `<tag>…</tag>` block (written with a bare opening tag, as the page is).
fn blocks<'a>(page: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut found = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        found.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_allows_exactly_the_pages_own_script_and_style() {
        let policy = policy(PAGE);
        for tag in ["script", "style"] {
            let found = blocks(PAGE, tag);
            assert_eq!(found.len(), 1, "one inline <{tag}> block");
            let hash = STANDARD.encode(Sha256::digest(found[0]));
            assert!(
                policy.contains(&format!("{tag}-src 'sha256-{hash}';")),
                "{policy}"
            );
        }
        assert!(policy.starts_with("default-src 'self';"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
    }

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

    #[test]
    fn blocks_are_found_in_order_and_an_unclosed_one_is_not() {
        let page = "<p><script>a</script> <script>b</script> <script>c";
        assert_eq!(blocks(page, "script"), ["a", "b"]);
        assert_eq!(sources("<p>", "style"), "'none'");
    }
}
