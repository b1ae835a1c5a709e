//! Every route's error body.

use super::*;

/// Every error body: the contract's, and on `/v1/decisions` OpenAI's (with `param`).
#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ErrorBody {
    error: ErrorObject,
    /// FastAPI's list, on a 422.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<Vec<ErrorDetail>>,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ErrorObject {
    /// Names the field, the limit and the value.
    message: String,
    /// The stable `system_one_*` code, also in `x-systemone-error-code`.
    code: String,
    /// The error class (`invalid_request_error` on `/v1/decisions` for a broken rule).
    #[serde(rename = "type")]
    kind: String,
    /// `/v1/decisions` only: where in the body, in OpenAI's notation (`questions[0].choices`).
    #[serde(skip_serializing_if = "Option::is_none")]
    param: Option<Option<String>>,
}

#[derive(Serialize, ToSchema)]
pub(in crate::http::openapi) struct ErrorDetail {
    loc: Vec<String>,
    msg: String,
    #[serde(rename = "type")]
    kind: String,
}
