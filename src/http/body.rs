//! Body extraction: content type and encoding checks, the size cap, strict JSON parsing, and
//! the SDK's multipart image transport.

use std::io::Read;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

use super::blocking::{self, Weight};
use super::edge::BodyTimedOut;
use crate::error::{ApiError, Code};
use crate::json::{parse_strict, JsonError};
use crate::request::images::{part_label, Parts};
use crate::request::validate::duplicate_key;

/// Largest zstd window a body may use (32 MiB): a frame cannot make the decoder allocate
/// more than this, whatever it declares.
const ZSTD_WINDOW_LOG_MAX: u32 = 25;
/// The multipart part that holds the JSON body.
pub(super) const REQUEST_PART: &str = "request";

/// A `Content-Encoding` this service reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Identity,
    Gzip,
    Zstd,
}

/// What the `Content-Type` says the body is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Json,
    /// `multipart/form-data` with this boundary.
    Multipart(String),
}

/// A request body as read off the wire: the JSON request and, for a multipart body, its
/// other parts (image bytes that `assets` entries name).
#[derive(Debug, Clone)]
pub(super) struct RequestBody {
    /// The JSON request (the whole body, or the `request` part).
    pub json: Value,
    /// Every part but `request`, by name, in arrival order; empty for a JSON body.
    pub parts: Parts,
    /// Bytes of the body as read (decompressed): how much work its validation may be.
    pub len: usize,
}

/// Reads a request body of at most `max_bytes` (after decompression).
///
/// A missing `Content-Type` is read as JSON (some clients omit it); `application/json` (or
/// `…+json`) is JSON; `multipart/form-data` is the SDK's image transport: a part named
/// `request` holds the JSON body and the other parts hold image bytes (without a `request`
/// part it is a 400). Any other type is 415. `Content-Encoding` (for the whole body, JSON or
/// multipart) may be `zstd` (what the TypeSafe Python SDK sends for bodies of 1 KiB or
/// more), `gzip` or `identity`; anything else is 415. Decompression stops one byte past the
/// limit, so a bomb is a 413 without ever holding more than the limit in memory; every
/// multipart part is inside the body and so under the same limit.
pub(super) async fn read_request(
    headers: &HeaderMap,
    body: Body,
    max_bytes: usize,
) -> Result<RequestBody, ApiError> {
    let kind = content_kind(headers)?;
    let encoding = content_encoding(headers)?;
    let bytes = Limited::new(body, max_bytes)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ApiError::new(
                    Code::BodyTooLarge,
                    format!("the body is larger than the limit of {max_bytes} bytes"),
                )
            } else if let Some(timed_out) = BodyTimedOut::find(e.as_ref()) {
                ApiError::new(Code::RequestTimeout, timed_out.to_string())
            } else {
                ApiError::new(Code::InvalidJson, "the body could not be read")
            }
        })?
        .to_bytes();
    let bytes = match encoding {
        Encoding::Identity => bytes,
        _ => Bytes::from(
            blocking::run(bytes.len(), Weight::Heavy, move || {
                decompress(encoding, &bytes, max_bytes)
            })
            .await??,
        ),
    };
    let len = bytes.len();
    match kind {
        Kind::Json => Ok(RequestBody {
            json: blocking::run(len, Weight::Light, move || parse_json(&bytes, "the body"))
                .await??,
            parts: Parts::new(),
            len,
        }),
        Kind::Multipart(boundary) => read_multipart(bytes, boundary).await,
    }
}

/// The body's kind from `Content-Type`.
fn content_kind(headers: &HeaderMap) -> Result<Kind, ApiError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(Kind::Json);
    };
    let ct = ct.to_str().unwrap_or("");
    let lower = ct.to_ascii_lowercase();
    let essence = lower.split(';').next().unwrap_or("").trim();
    if essence == "application/json" || essence.ends_with("+json") {
        return Ok(Kind::Json);
    }
    if essence == "multipart/form-data" {
        return multer::parse_boundary(ct)
            .map(Kind::Multipart)
            .map_err(|_| {
                ApiError::new(
                    Code::InvalidMultipart,
                    "Content-Type multipart/form-data needs a boundary parameter",
                )
            });
    }
    Err(ApiError::new(
        Code::UnsupportedMediaType,
        format!(
            "Content-Type must be application/json or multipart/form-data, got {:?}",
            essence.chars().take(100).collect::<String>()
        ),
    ))
}

/// The body's `Content-Encoding`.
fn content_encoding(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    let Some(enc) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(Encoding::Identity);
    };
    match enc
        .to_str()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "identity" => Ok(Encoding::Identity),
        "gzip" | "x-gzip" => Ok(Encoding::Gzip),
        "zstd" => Ok(Encoding::Zstd),
        other => Err(ApiError::new(
            Code::UnsupportedEncoding,
            format!(
                "Content-Encoding {:?} is not supported; use zstd, gzip or none",
                other.chars().take(100).collect::<String>()
            ),
        )),
    }
}

/// Strict JSON (duplicate keys refused, located without the key: see [`duplicate_key`]);
/// `what` names the body or the part in messages.
fn parse_json(bytes: &[u8], what: &str) -> Result<Value, ApiError> {
    parse_strict(bytes).map_err(|e| match e {
        JsonError::Syntax(_) => ApiError::new(Code::InvalidJson, format!("{what}: {e}")),
        JsonError::DuplicateKey(d) => duplicate_key(&d),
    })
}

/// Splits a (decompressed) `multipart/form-data` body into the JSON `request` part and the
/// image parts. Part names are echoed in messages only when they have the SDK's shape.
async fn read_multipart(bytes: Bytes, boundary: String) -> Result<RequestBody, ApiError> {
    let invalid = |msg: String| ApiError::new(Code::InvalidMultipart, msg);
    let bytes_len = bytes.len();
    let stream = futures::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(bytes) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut request: Option<Bytes> = None;
    let mut parts = Parts::new();
    let mut index = 0usize;
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return Err(invalid(multipart_problem(&e, index))),
        };
        let Some(name) = field.name().map(str::to_string) else {
            return Err(invalid(format!(
                "multipart part #{index} has no name (Content-Disposition: form-data; name=\"…\")"
            )));
        };
        let data = field
            .bytes()
            .await
            .map_err(|e| invalid(multipart_problem(&e, index)))?;
        if name == REQUEST_PART {
            if request.replace(data).is_some() {
                return Err(invalid(format!(
                    "the multipart body has more than one part named {REQUEST_PART:?}"
                )));
            }
        } else if !parts.insert(name.clone(), data) {
            return Err(invalid(format!(
                "the multipart body has more than one part named {}",
                part_label(&name)
            )));
        }
        index += 1;
    }
    let len = bytes_len;
    let request = request.ok_or_else(|| {
        invalid(format!(
            "the multipart body has no part named {REQUEST_PART:?} (it holds the JSON request); got {} other part(s)",
            parts.len()
        ))
    })?;
    let json = blocking::run(request.len(), Weight::Light, move || {
        parse_json(&request, "the multipart part \"request\"")
    })
    .await??;
    Ok(RequestBody { json, parts, len })
}

/// What is wrong with a multipart stream, in fixed words (multer's own messages may quote
/// the caller's header bytes).
fn multipart_problem(e: &multer::Error, index: usize) -> String {
    use multer::Error as E;
    let what = match e {
        E::IncompleteStream | E::IncompleteFieldData { .. } => {
            "the body ends before the closing boundary"
        }
        E::IncompleteHeaders | E::ReadHeaderFailed(_) => "the part headers are malformed",
        E::DecodeHeaderName { .. } | E::DecodeHeaderValue { .. } => {
            "a part header is not readable text"
        }
        E::DecodeContentType(_) => "a part's Content-Type is malformed",
        _ => "the body is malformed",
    };
    format!("the multipart body could not be read at part #{index}: {what}")
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
