//! The bodies of every route, as OpenAPI schemas. The handlers read bodies as JSON values
//! and write them with hand-made serializers (key order, full `f64` precision), so these
//! types exist only to be described; what keeps them true is the tests, which check real
//! answers of every route against this description (`tests/live/openapi.rs`) and run
//! Schemathesis from it in CI.
//!
//! The rules a schema cannot say (labels, sizes, the model's capacity, every configurable
//! limit) are the contract's and validation's; a schema here is never stricter than the
//! service, so a body it refuses the service refuses too.
//!
//! One file per door (`systemone`, `decisions`, `rerank`), then the service's own routes,
//! the ledger's, the calibration watch's and the one error body; the batch routes' bodies
//! are beside their operations (`../batches.rs`).

#![allow(dead_code)] // Described, never built.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// A tag: the one string a `type` field may hold (a tagged enum would put `type` beside
/// a struct that allows no other field, which no body could satisfy).
macro_rules! tag {
    ($name:ident, $variant:ident) => {
        #[derive(Serialize, ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub(super) enum $name {
            $variant,
        }
    };
}

tag!(ChoiceTag, Choice);
tag!(NoulTag, Noul);
tag!(ScoreTag, Score);
tag!(PredicateTag, Predicate);
tag!(InputTextTag, InputText);
tag!(OutputTextTag, OutputText);
tag!(InputImageTag, InputImage);
tag!(InputJsonTag, InputJson);

mod calibration;
mod decisions;
mod errors;
mod ledger;
mod rerank;
mod service;
mod systemone;

pub(super) use calibration::*;
pub(super) use decisions::*;
pub(super) use errors::*;
pub(super) use ledger::*;
pub(super) use rerank::*;
pub(super) use service::*;
pub(super) use systemone::*;
