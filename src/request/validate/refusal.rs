//! How every rule refuses: the error at its `loc`, with its message.

use serde_json::Value;

use crate::error::{ApiError, Code};
use crate::json::type_name;

/// An error's `loc` from its path segments (`["questions", "q1", "criteria"]`).
pub fn loc(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// How every rule refuses: the `Err` of `code` at `at` with `msg`, whatever the rule would
/// have returned on success.
pub fn refuse<T>(code: Code, at: Vec<String>, msg: impl Into<String>) -> Result<T, ApiError> {
    Err(ApiError::at(code, at, msg))
}

/// The refusal of a value of the wrong JSON type: `must` says what the rule wants, and the
/// message ends with the type that came instead (`model must be a string, got a number`).
pub fn refuse_type<T>(code: Code, at: Vec<String>, must: &str, got: &Value) -> Result<T, ApiError> {
    refuse(code, at, format!("{must}, got {}", type_name(got)))
}

/// [`refuse_type`] for a top-level `field`: `<field> must be <wants>, got …` at `field`.
pub(super) fn refuse_field_type<T>(
    code: Code,
    field: &str,
    wants: &str,
    got: &Value,
) -> Result<T, ApiError> {
    refuse_type(
        code,
        loc(&[field]),
        &format!("{field} must be {wants}"),
        got,
    )
}
