//! The calibration watch's routes (`calibration/watch/`): `GET /v1/calibration`, its
//! figures as JSON ([`route`]), and `GET /v1/calibration/charts`, the same figures drawn
//! as SVG by the service ([`charts`]) for the `/calibration` page and anyone else. Both
//! need the `ledger:read` scope and show a key its own answers' figures, the admin key every
//! key's, as the ledger's reads decide.

pub(in crate::http) mod charts;
pub(in crate::http) mod route;
