//! [`NativeAsk`]: one request for a native server.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::question::LoweredQuestion;

/// One request for a native server: the caller's fields and what to check the answer
/// against.
#[derive(Debug)]
pub struct NativeAsk<'a> {
    /// The caller's fields in the contract's shape (`state`, `questions`, and `temperature`,
    /// `permutations`, `layout`, `history` when set); `model`, images and the flavor's
    /// fields are added by the dialect.
    pub fields: Map<String, Value>,
    /// Image data URLs, sent in the flavor's form.
    pub images: &'a [Arc<str>],
    /// The questions sent, in order: the answer must hold one of each.
    pub questions: Vec<&'a LoweredQuestion>,
}
