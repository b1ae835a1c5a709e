//! Body extraction: content type and encoding checks, the size cap, strict JSON parsing.

use axum::body::Body;
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

use crate::error::{ApiError, Code};
use crate::json::{parse_strict, JsonError};

/// Reads a JSON request body of at most `max_bytes`.
///
/// A missing `Content-Type` is read as JSON (some clients omit it); any other type than
/// `application/json` (or `…+json`) is 415. Only the identity encoding is accepted.
pub async fn read_json(
    headers: &HeaderMap,
    body: Body,
    max_bytes: usize,
) -> Result<Value, ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        let essence = ct.split(';').next().unwrap_or("").trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::new(
                Code::UnsupportedMediaType,
                format!("Content-Type must be application/json, got {essence:?}"),
            ));
        }
    }
    if let Some(enc) = headers.get(header::CONTENT_ENCODING) {
        let enc = enc.to_str().unwrap_or("").trim().to_ascii_lowercase();
        if !enc.is_empty() && enc != "identity" {
            return Err(ApiError::new(
                Code::UnsupportedEncoding,
                format!("Content-Encoding {enc:?} is not supported; send the body uncompressed"),
            ));
        }
    }
    let bytes = Limited::new(body, max_bytes)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ApiError::new(
                    Code::BodyTooLarge,
                    format!("the body is larger than the limit of {max_bytes} bytes"),
                )
            } else {
                ApiError::new(Code::InvalidJson, "the body could not be read")
            }
        })?
        .to_bytes();
    parse_strict(&bytes).map_err(|e| match e {
        JsonError::Syntax(_) => ApiError::new(Code::InvalidJson, e.to_string()),
        JsonError::DuplicateKey(_) => ApiError::at(Code::DuplicateKey, vec![], e.to_string()),
    })
}
