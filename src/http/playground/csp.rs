//! The Content-Security-Policy that lets only the page's own inline `<script>` and
//! `<style>` run: their sha256, computed from the page itself.

use std::sync::LazyLock;

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// A page's policy as a header value, built once per page. Should it ever fail to be a
/// header value (it is ASCII, so it cannot), the fallback refuses everything rather than
/// nothing.
pub(in crate::http) type PagePolicy = LazyLock<HeaderValue>;

/// The policy header for `page`, for a [`PagePolicy`].
pub(in crate::http) fn policy_header(page: &str) -> HeaderValue {
    HeaderValue::from_str(&policy(page))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
}

/// One of the service's own pages, served with its policy: HTML, never sniffed, no referrer,
/// revalidated on each load (a new release's page is never stale).
pub(in crate::http) fn serve_page(page: &'static str, policy: &HeaderValue) -> Response {
    (
        [
            (
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (CONTENT_SECURITY_POLICY, policy.clone()),
            (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        page,
    )
        .into_response()
}

/// The policy for `page`: its own origin for requests, and only its own inline blocks.
pub(in crate::http) fn policy(page: &str) -> String {
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
    use super::super::page::PAGE;
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
    fn blocks_are_found_in_order_and_an_unclosed_one_is_not() {
        let page = "<p><script>a</script> <script>b</script> <script>c";
        assert_eq!(blocks(page, "script"), ["a", "b"]);
        assert_eq!(sources("<p>", "style"), "'none'");
    }
}
