//! What the Decisions door runs and answers from, once a call is translated and validated.

use super::translate::Translated;
use crate::request::ValidRequest;

/// A Decisions call translated and validated: the System One request that asks the same,
/// and what the translation keeps to write the `Decision`.
pub(in crate::http) struct Plan {
    pub(super) request: ValidRequest,
    pub(super) translated: Translated,
}
