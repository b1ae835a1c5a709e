//! Validation: a caller's JSON body becomes a [`super::ValidRequest`], the only thing the engine
//! runs. Every schema and size rule of the contract is checked here, before any upstream
//! call, and each failure names the field, the limit and the value received.
//!
//! Token limits are counted with [`crate::models::tokens::estimate_tokens`] (see its doc for how
//! it errs) until a model's real tokenizer is configured.
//!
//! One file per rule family; [`validate_with_parts`] (`run.rs`) runs them in a fixed order,
//! and that order decides which error a body breaking several rules gets:
//!
//! 1. `fields.rs`: the body's shape, `model`, `state`;
//! 2. `questions.rs` (the map and each question's own fields), then `criteria.rs` (each
//!    type's options, labels, descriptions, levels), then the question's token count
//!    (`tokens.rs`), question by question;
//! 3. `fields.rs` again: `temperature`, `calibration`, `layout`, `permutations`;
//! 4. `history.rs`, then `images.rs` (`images`, `assets`, multipart parts);
//! 5. `tokens.rs`: the state and whole-request token limits, counted last because they
//!    need everything above. Counted by the byte estimate (no `--tokenizer`), a request over
//!    a limit is not refused here but marked for the engine to count exactly first
//!    ([`super::ValidRequest::recount`]).
//!
//! `duplicates.rs` is the one rule run before these, on every door: where a body repeats a
//! key, said without the key (the body parser finds it; see [`duplicate_key`]).
//!
//! Each file ends with its family's unit table (body → code, `loc`, exact message, or a
//! request that must pass); `test_support.rs` holds the models, body builders and runner.

mod criteria;
mod duplicates;
mod entry;
pub use duplicates::duplicate_key;
mod fields;
pub use fields::{ignored_fields, requested_model};
mod history;
mod images;
mod questions;
mod refusal;
mod run;
#[cfg(test)]
mod test_support;
mod tokens;
pub use tokens::{
    check as check_token_counts, check_on_estimate, is_token_limit, piece_texts, Counted,
    PieceTokens, Recount,
};

use super::prompt;
use entry::Entry;
use refusal::refuse_field_type;
pub use refusal::{loc, refuse, refuse_type};
pub use run::{validate, validate_with_parts, TABLE_PENDING_RETRY_SECS};

/// Most characters in a choice label.
pub const MAX_LABEL_CHARS: usize = 128;
pub use crate::config::MAX_PERMUTATIONS;

pub use crate::json::type_name;
