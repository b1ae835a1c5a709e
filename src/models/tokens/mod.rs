//! Token tables: which option labels a model can read, and their token ids.
//!
//! The whole technique rests on one fact: `answer=` + `str(i)` is the tokens of `answer=`
//! plus exactly one more token, whose id the service masks to and reads. A table is data
//! (`token-tables/<name>.json`), built from the model's real tokenizer; the tables shipped
//! in the repository are also compiled into the binary so a name alone finds them.
//!
//! Counting tokens for the limits is in `count.rs` (and the widest token that bounds a
//! count from below, in `widest.rs`), the multi-token label schemes in
//! `scheme.rs` (its doc says when they are used), the table and its JSON format in
//! `table.rs`.

pub mod build;
mod count;
pub mod live;
mod scheme;
pub mod served;
mod table;
pub mod verify;
mod widest;

pub use count::{
    estimate_tokens, estimate_tokens_for_bytes, fewest_tokens_for_bytes, TokenCounter,
    UNTOKENIZED_WIDEST_TOKEN_BYTES,
};
pub use scheme::{
    prefix_conflict, MultiLabel, MultiTokenScheme, PrefixConflict, SchemeKind, MAX_NUMERAL_WIDTH,
};
pub use table::{Label, OptionLabels, TableError, TokenTable, TokenizerSource, NATIVE_TABLE};
