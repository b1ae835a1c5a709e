//! The front doors' routes: one list, which the router mounts (each with its door) and the
//! ledger step reads (a refusal is recorded only on a door's route).

/// `/v1/systemone`, `/v1/decisions`, and rerank's two versions, in that order.
pub(super) const DOORS: [&str; 4] = ["/v1/systemone", "/v1/decisions", "/v2/rerank", "/v1/rerank"];
