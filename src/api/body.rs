//! Body extraction: content type and encoding checks, the size cap, strict JSON parsing.

use std::io::Read;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

use crate::error::{ApiError, Code};
use crate::json::{parse_strict, JsonError};

/// Largest zstd window a body may use (32 MiB): a frame cannot make the decoder allocate
/// more than this, whatever it declares.
const ZSTD_WINDOW_LOG_MAX: u32 = 25;
/// Compressed bodies above this size are decompressed off the async workers.
const INLINE_DECOMPRESS_BYTES: usize = 64 * 1024;

/// A `Content-Encoding` this service reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Identity,
    Gzip,
    Zstd,
}

/// Reads a JSON request body of at most `max_bytes` (after decompression).
///
/// A missing `Content-Type` is read as JSON (some clients omit it); any other type than
/// `application/json` (or `…+json`) is 415. `Content-Encoding` may be `zstd` (what the
/// TypeSafe Python SDK sends for bodies of 1 KiB or more), `gzip` or `identity`; anything
/// else is 415. Decompression stops one byte past the limit, so a bomb is a 413 without
/// ever holding more than the limit in memory.
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
    let encoding = match headers.get(header::CONTENT_ENCODING) {
        None => Encoding::Identity,
        Some(enc) => match enc
            .to_str()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "" | "identity" => Encoding::Identity,
            "gzip" | "x-gzip" => Encoding::Gzip,
            "zstd" => Encoding::Zstd,
            other => {
                return Err(ApiError::new(
                    Code::UnsupportedEncoding,
                    format!("Content-Encoding {other:?} is not supported; use zstd, gzip or none"),
                ))
            }
        },
    };
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
    let bytes = match encoding {
        Encoding::Identity => bytes.to_vec(),
        _ if bytes.len() <= INLINE_DECOMPRESS_BYTES => decompress(encoding, &bytes, max_bytes)?,
        _ => tokio::task::spawn_blocking(move || decompress(encoding, &bytes, max_bytes))
            .await
            .map_err(|_| ApiError::new(Code::Internal, "internal error"))??,
    };
    parse_strict(&bytes).map_err(|e| match e {
        JsonError::Syntax(_) => ApiError::new(Code::InvalidJson, e.to_string()),
        JsonError::DuplicateKey(_) => ApiError::at(Code::DuplicateKey, vec![], e.to_string()),
    })
}

/// Decompresses `bytes`, refusing output beyond `max_bytes`.
fn decompress(encoding: Encoding, bytes: &[u8], max_bytes: usize) -> Result<Vec<u8>, ApiError> {
    let unreadable = |e: std::io::Error| {
        ApiError::new(
            Code::InvalidJson,
            format!("the {encoding:?}-encoded body could not be decompressed: {e}").to_lowercase(),
        )
    };
    let reader: Box<dyn Read + '_> = match encoding {
        Encoding::Identity => Box::new(bytes),
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(bytes)),
        Encoding::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::new(bytes).map_err(unreadable)?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(unreadable)?;
            Box::new(decoder)
        }
    };
    let mut out = Vec::new();
    reader
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut out)
        .map_err(unreadable)?;
    if out.len() > max_bytes {
        return Err(ApiError::new(
            Code::BodyTooLarge,
            format!("the decompressed body is larger than the limit of {max_bytes} bytes"),
        ));
    }
    Ok(out)
}
