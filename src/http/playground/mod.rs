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

pub(in crate::http) mod csp;
mod page;

pub(super) use page::{page, root};
