//! The front doors: each turns its client's body into validated System One requests, hands
//! them to the one flow, and writes the answer (or the refusal) in its client's shape.

pub(super) mod decisions;
pub(super) mod rerank;
pub(super) mod systemone;
