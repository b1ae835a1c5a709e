//! The front doors' routes: one list, which the router mounts (each with its door), the
//! ledger step reads (a refusal is recorded only on a door's route), and a batch's
//! `endpoint` names (kept with the batch, `batch/lines.rs`, the lowest layer that needs it).

// `/v1/systemone`, `/v1/decisions`, and rerank's two versions, in that order.
pub(super) use crate::batch::lines::ENDPOINTS as DOORS;
