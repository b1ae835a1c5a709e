//! Body extraction: content type and encoding checks, the size cap, strict JSON parsing, and
//! the SDK's multipart image transport.

use std::cell::{Cell, RefCell};
use std::io::Read;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

use super::blocking::{self, Weight};
use super::budget::{self, BodyBudget, Share};
use super::edge::BodyTimedOut;
use crate::error::{ApiError, Code};
use crate::json::{parse_strict_metered, JsonError, METER_STEP};
use crate::request::images::{part_label, Parts};
use crate::request::validate::duplicate_key;

/// Largest zstd window a body may use (32 MiB): a frame cannot make the decoder allocate
/// more than this, whatever it declares.
const ZSTD_WINDOW_LOG_MAX: u32 = 25;
/// The multipart part that holds the JSON body.
pub(super) const REQUEST_PART: &str = "request";
/// Deflate's largest expansion (output bytes per input byte).
const DEFLATE_MAX_RATIO: usize = 1032;
/// Most bytes a decoded body grows by at a time (see [`decompress`]).
const DECODE_STEP: usize = 1024 * 1024;

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
#[derive(Debug)]
pub(super) struct RequestBody {
    /// The JSON request (the whole body, or the `request` part).
    pub json: Value,
    /// Every part but `request`, by name, in arrival order; empty for a JSON body.
    pub parts: Parts,
    /// Bytes of the body as read (decompressed): how much work its validation may be.
    pub len: usize,
    /// The body memory budget this body holds (its parsed value, and for a multipart
    /// body the decoded bytes its parts may share). A door drops it once the body is
    /// validated, so it is never held through the upstream reads; its closures take the
    /// body's fields, not the body, so dropping the body alone would not.
    pub share: Share,
}

/// Reads a request body of at most `max_bytes` (after decompression), inside its share of
/// the body memory `budget`.
///
/// A missing `Content-Type` is read as JSON (some clients omit it); `application/json` (or
/// `…+json`) is JSON; `multipart/form-data` is the SDK's image transport: a part named
/// `request` holds the JSON body and the other parts hold image bytes (without a `request`
/// part it is a 400). Any other type is 415. `Content-Encoding` (for the whole body, JSON or
/// multipart) may be `zstd` (what the TypeSafe Python SDK sends for bodies of 1 KiB or
/// more), `gzip` or `identity`; anything else is 415. Decompression stops one byte past the
/// limit, so a bomb is a 413 without ever holding more than the limit in memory; every
/// multipart part is inside the body and so under the same limit.
///
/// Memory (see [`super::budget`]): twice the wire bytes, and for a compressed body twice
/// the most it can decode to (the text and a value of about its size), are reserved before
/// decoding (a wait, then 503 `system_one_overloaded`); what decoding did not use goes
/// back at once; a parse whose value outgrows that asks for more as it goes, and the share
/// stays with the returned body, for its value, until it is dropped.
pub(super) async fn read_request(
    headers: &HeaderMap,
    body: Body,
    max_bytes: usize,
    budget: &BodyBudget,
) -> Result<RequestBody, ApiError> {
    let kind = content_kind(headers)?;
    let encoding = content_encoding(headers)?;
    let bytes = collect(body, max_bytes).await?;
    // The text and, at about its size, the value parsed from it (a long string; a value of
    // many small items asks for more as it is parsed).
    let reserve = match encoding {
        Encoding::Identity => text_and_value(bytes.len()),
        _ => bytes.len().saturating_add(text_and_value(decoded_bound(
            encoding,
            bytes.len(),
            max_bytes,
        ))),
    };
    let mut share = budget.share(reserve).await?;
    let bytes = match encoding {
        Encoding::Identity => bytes,
        _ => Bytes::from(
            blocking::run(bytes.len(), Weight::Heavy, move || {
                decompress(encoding, bytes, max_bytes)
            })
            .await??,
        ),
    };
    share.shrink_to(text_and_value(bytes.len()));
    match kind {
        Kind::Json => read_json(bytes, share).await,
        Kind::Multipart(boundary) => read_multipart(bytes, boundary, share).await,
    }
}

/// An upload's bytes (`multipart/form-data`, the batch files' transport) of at most
/// `max_bytes` after decompression, with the form's boundary, inside a share of `budget`
/// that stays with the bytes: the wire bytes and, for a compressed body, the most they can
/// decode to are reserved before decoding, and decoding stops one byte past the limit, so a
/// gzip bomb is a 413 without ever holding more than the limit.
pub(super) async fn read_upload(
    headers: &HeaderMap,
    body: Body,
    max_bytes: usize,
    budget: &BodyBudget,
) -> Result<(Bytes, String, Share), ApiError> {
    let Kind::Multipart(boundary) = content_kind(headers)? else {
        return Err(ApiError::new(
            Code::UnsupportedMediaType,
            "Content-Type must be multipart/form-data, with a `file` part and a `purpose` part",
        ));
    };
    let encoding = content_encoding(headers)?;
    let bytes = collect(body, max_bytes).await?;
    let reserve = match encoding {
        Encoding::Identity => bytes.len(),
        _ => bytes
            .len()
            .saturating_add(decoded_bound(encoding, bytes.len(), max_bytes)),
    };
    let mut share = budget.share(reserve).await?;
    let bytes = match encoding {
        Encoding::Identity => bytes,
        _ => Bytes::from(
            blocking::run(bytes.len(), Weight::Heavy, move || {
                decompress(encoding, bytes, max_bytes)
            })
            .await??,
        ),
    };
    share.shrink_to(bytes.len());
    Ok((bytes, boundary, share))
}

/// What a body of `text` bytes most likely holds while parsed: the text, a value of about
/// its size (a long string is one), and the parse's steps of asking for more (two, so the
/// few bytes of keys and slots beyond the text never make it ask, and so never refuse).
fn text_and_value(text: usize) -> usize {
    text.saturating_mul(2).saturating_add(2 * METER_STEP)
}

/// Most bytes `wire` bytes of this encoding can decode to, within the body limit: deflate
/// cannot expand more than 1032:1 (a 258-byte match costs at least 2 bits), so a small
/// gzip body (most compressed bodies are small) reserves little; zstd has no such bound.
fn decoded_bound(encoding: Encoding, wire: usize, max_bytes: usize) -> usize {
    match encoding {
        Encoding::Gzip => wire.saturating_mul(DEFLATE_MAX_RATIO).min(max_bytes),
        Encoding::Identity | Encoding::Zstd => max_bytes,
    }
}

/// The wire bytes of a body of at most `max_bytes`.
async fn collect(body: Body, max_bytes: usize) -> Result<Bytes, ApiError> {
    Ok(Limited::new(body, max_bytes)
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
        .to_bytes())
}

/// A JSON body: parsed (off the worker when large) within `share`, which then covers the
/// parsed value alone, the text being dropped.
async fn read_json(bytes: Bytes, share: Share) -> Result<RequestBody, ApiError> {
    let len = bytes.len();
    let (json, share) = blocking::run(len, Weight::Light, move || {
        parse_within(&bytes, "the body", share, 0)
    })
    .await??;
    Ok(RequestBody {
        json,
        parts: Parts::new(),
        len,
        share,
    })
}

/// Strict JSON parsed while `share` grows with the value beyond the `keep` bytes it must
/// still cover (the multipart body the part came from); then shrunk to `keep` and the value.
fn parse_within(
    bytes: &[u8],
    what: &str,
    share: Share,
    keep: usize,
) -> Result<(Value, Share), ApiError> {
    let share = RefCell::new(share);
    let granted = Cell::new(0usize);
    let grow = |value_bytes: usize| {
        granted.set(value_bytes);
        // The text stays held while the value is built.
        let want = keep.max(bytes.len()).saturating_add(value_bytes);
        share.borrow_mut().grow_to(want)
    };
    let json = parse_json(bytes, what, &grow)?;
    let mut share = share.into_inner();
    share.shrink_to(keep.saturating_add(granted.get()));
    Ok((json, share))
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

/// Strict JSON (duplicate keys refused, located without the key: see [`duplicate_key`]),
/// its memory asked of `grow` as it is built (refused: 503 `system_one_overloaded`);
/// `what` names the body or the part in messages.
fn parse_json(bytes: &[u8], what: &str, grow: &dyn Fn(usize) -> bool) -> Result<Value, ApiError> {
    parse_strict_metered(bytes, grow).map_err(|e| match e {
        JsonError::Syntax(_) => ApiError::new(Code::InvalidJson, format!("{what}: {e}")),
        JsonError::DuplicateKey(d) => duplicate_key(&d),
        JsonError::OverBudget => budget::overloaded(),
    })
}

/// Splits a (decompressed) `multipart/form-data` body into the JSON `request` part and the
/// image parts. Part names are echoed in messages only when they have the SDK's shape.
async fn read_multipart(
    bytes: Bytes,
    boundary: String,
    share: Share,
) -> Result<RequestBody, ApiError> {
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
    let request = request.ok_or_else(|| {
        invalid(format!(
            "the multipart body has no part named {REQUEST_PART:?} (it holds the JSON request); got {} other part(s)",
            parts.len()
        ))
    })?;
    let (json, share) = blocking::run(request.len(), Weight::Light, move || {
        parse_within(&request, "the multipart part \"request\"", share, bytes_len)
    })
    .await??;
    Ok(RequestBody {
        json,
        parts,
        len: bytes_len,
        share,
    })
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

/// Decompresses `bytes`, refusing output beyond `max_bytes`. The output grows by at most
/// [`DECODE_STEP`] at a time rather than doubling, so its capacity stays within the limit
/// the caller reserved (doubling would reach 32 MiB for a 24 MiB body); the compressed
/// bytes are dropped before returning.
fn decompress(encoding: Encoding, bytes: Bytes, max_bytes: usize) -> Result<Vec<u8>, ApiError> {
    let unreadable = |e: std::io::Error| {
        ApiError::new(
            Code::InvalidJson,
            format!("the {encoding:?}-encoded body could not be decompressed: {e}").to_lowercase(),
        )
    };
    let mut reader: Box<dyn Read + '_> = match encoding {
        Encoding::Identity => Box::new(&bytes[..]),
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&bytes[..])),
        Encoding::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::new(&bytes[..]).map_err(unreadable)?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(unreadable)?;
            Box::new(decoder)
        }
    };
    let mut out = Vec::new();
    loop {
        let room = (max_bytes.saturating_add(1) - out.len()).min(DECODE_STEP);
        out.reserve_exact(room);
        let read = (&mut reader)
            .take(room as u64)
            .read_to_end(&mut out)
            .map_err(unreadable)?;
        if read == 0 || out.len() > max_bytes {
            break;
        }
    }
    if out.len() > max_bytes {
        return Err(ApiError::new(
            Code::BodyTooLarge,
            format!("the decompressed body is larger than the limit of {max_bytes} bytes"),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn gzip_at_its_best_ratio_stays_within_the_bound_it_reserves() {
        let raw = vec![0u8; 8 * 1024 * 1024];
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&raw).expect("compresses");
        let wire = Bytes::from(gz.finish().expect("compresses"));
        let bound = decoded_bound(Encoding::Gzip, wire.len(), usize::MAX);
        let decoded = decompress(Encoding::Gzip, wire, raw.len()).expect("decodes");
        assert_eq!(decoded.len(), raw.len());
        assert!(decoded.len() <= bound, "{} > {bound}", decoded.len());
        assert!(
            decoded.capacity() <= raw.len() + 1,
            "grown in steps, not doubled"
        );
    }
}
