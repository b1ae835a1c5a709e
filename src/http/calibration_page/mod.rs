//! `GET /calibration`: a page showing the calibration watch's charts in a browser: per
//! model and question shape, the reliability diagram, the confidence histogram and each
//! drift figure over the windows kept, all drawn as SVG by the service
//! (`GET /v1/calibration/charts`).
//!
//! Built as the playground is, for the same reasons: one HTML file with inline CSS and
//! vanilla JS (`index.html`), embedded, loading nothing from elsewhere; static and holding
//! no data, so the route needs no key, and the page asks the charts route with the key the
//! person types (so the key's scope decides whose answers it sees); the same strict
//! Content-Security-Policy by hash (the playground's `csp.rs`). The SVG is parsed as SVG
//! and adopted into the page, never set as HTML.

mod page;

pub(super) use page::page;
