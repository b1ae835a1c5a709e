//! The refusals of the reference library's way in ([`super::ValidRequest::reference`]).

use crate::json::NonFiniteNumber;

/// Why [`ValidRequest::reference`](super::ValidRequest::reference) refuses its input (the reference raises `ValueError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("{model} has {capacity} single-token choice indexes, but a question has {options} options -- use labels instead")]
    TooManyOptions {
        model: String,
        capacity: usize,
        options: usize,
    },
    #[error(transparent)]
    NonFinite(#[from] NonFiniteNumber),
    #[error("{model} has no token table yet (an automatic one is built by the model's upkeep)")]
    NoTable { model: String },
}
