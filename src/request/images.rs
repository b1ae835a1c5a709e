//! Images: what the caller sent (a data URL, raw base64, an inline asset or the bytes of a
//! multipart part) becomes bytes whose format is sniffed from the bytes themselves, then the
//! `data:image/<fmt>;base64,…` URL that goes to the backend ahead of the text.
//!
//! Pure functions only; [`super::validate`](mod@super::validate) applies the contract's rules (vision-capable
//! model, the count and size limits) and turns [`ImageError`] into the caller's error. The
//! service never fetches a URL: an `http(s)` (or any other non-`data:`) URL is refused.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine};
use bytes::Bytes;

/// Standard alphabet, padding optional (clients differ on it).
const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
/// URL-safe alphabet (`-`, `_`), padding optional.
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// An image format the backends accept, sniffed from the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
    Webp,
}

impl Format {
    /// The MIME type of the data URL.
    pub fn mime(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
            Format::Webp => "image/webp",
        }
    }
}

/// Why an image cannot be used. Messages never quote the caller's bytes or text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// A URL other than `data:`: the service never fetches.
    #[error("is a URL ({scheme}); this service never fetches images: send the bytes as a data:image/...;base64, URL or raw base64")]
    Url { scheme: &'static str },
    /// A `data:` URL that is not `data:<type>;base64,<data>`.
    #[error("is a data URL without ;base64, (only base64 data URLs are read)")]
    NotBase64DataUrl,
    /// Not decodable base64.
    #[error("is not valid base64: {0}")]
    Base64(String),
    /// Zero bytes.
    #[error("is empty")]
    Empty,
    /// Bytes of a format the backends are not sent.
    #[error("is {0}; supported formats are PNG, JPEG and WebP (sniffed from the bytes)")]
    Unsupported(&'static str),
}

/// Sniffs PNG, JPEG or WebP from the magic numbers. Anything else is an error naming what
/// the bytes look like (GIF, BMP, …) when that is recognisable.
pub fn sniff(bytes: &[u8]) -> Result<Format, ImageError> {
    if bytes.is_empty() {
        return Err(ImageError::Empty);
    }
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Ok(Format::Png);
    }
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Ok(Format::Jpeg);
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Ok(Format::Webp);
    }
    let looks_like = if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        "a GIF image"
    } else if bytes.starts_with(b"BM") {
        "a BMP image"
    } else if bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*") {
        "a TIFF image"
    } else if bytes.len() >= 12 && &bytes[4..8] == b"ftyp" {
        "an ISO media file (HEIC, AVIF or video)"
    } else if bytes.starts_with(b"%PDF") {
        "a PDF document"
    } else if bytes.starts_with(&[0, 0, 1, 0]) {
        "an ICO image"
    } else {
        "not a recognised image format"
    };
    Err(ImageError::Unsupported(looks_like))
}

/// Decodes base64 (standard or URL-safe alphabet, padding optional, ASCII whitespace such as
/// the line breaks of wrapped base64 ignored).
pub fn decode_base64(text: &str) -> Result<Vec<u8>, ImageError> {
    let compact: Option<String> = text
        .bytes()
        .any(|b| b.is_ascii_whitespace())
        .then(|| text.chars().filter(|c| !c.is_ascii_whitespace()).collect());
    let text = compact.as_deref().unwrap_or(text);
    if text.is_empty() {
        return Err(ImageError::Empty);
    }
    let engine = if text.contains(['-', '_']) {
        &URL_SAFE
    } else {
        &STANDARD
    };
    engine
        .decode(text)
        .map_err(|e| ImageError::Base64(base64_problem(&e)))
}

/// Describes a base64 error by position only (never the offending character).
fn base64_problem(e: &base64::DecodeError) -> String {
    match e {
        base64::DecodeError::InvalidByte(at, _) => format!("an invalid character at offset {at}"),
        base64::DecodeError::InvalidLength(n) => {
            format!("a length of {n} characters is impossible")
        }
        base64::DecodeError::InvalidLastSymbol(at, _) => {
            format!("an invalid last character at offset {at}")
        }
        base64::DecodeError::InvalidPadding => "misplaced padding".to_string(),
    }
}

/// The bytes of one `images` entry: a `data:…;base64,` URL or raw base64. Any other URL is
/// refused without being fetched.
pub fn decode_image_string(text: &str) -> Result<Vec<u8>, ImageError> {
    let trimmed = text.trim();
    if let Some(rest) = strip_prefix_ignore_case(trimmed, "data:") {
        let (meta, data) = rest.split_once(',').ok_or(ImageError::NotBase64DataUrl)?;
        let is_base64 = meta
            .rsplit(';')
            .next()
            .is_some_and(|p| p.trim().eq_ignore_ascii_case("base64"));
        if !is_base64 {
            return Err(ImageError::NotBase64DataUrl);
        }
        return decode_base64(data);
    }
    if let Some(scheme) = url_scheme(trimmed) {
        return Err(ImageError::Url { scheme });
    }
    decode_base64(trimmed)
}

/// `Some(name)` when the text starts like a URL (`scheme:`); base64 never holds a `:`.
fn url_scheme(text: &str) -> Option<&'static str> {
    let (scheme, _) = text.split_once(':')?;
    let is_scheme = !scheme.is_empty()
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !is_scheme {
        return None;
    }
    // Name only schemes from a fixed list: the caller's own text never goes into a message.
    Some(match scheme.to_ascii_lowercase().as_str() {
        "https" => "https",
        "http" => "http",
        "file" => "file",
        "ftp" => "ftp",
        "s3" => "s3",
        "gs" => "gs",
        _ => "non-data",
    })
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// The data URL sent to the backend: the sniffed MIME type and standard padded base64.
pub fn data_url(format: Format, bytes: &[u8]) -> String {
    let prefix = format!("data:{};base64,", format.mime());
    let mut url = String::with_capacity(prefix.len() + bytes.len().div_ceil(3) * 4);
    url.push_str(&prefix);
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut url);
    url
}

/// A multipart part's name for a message: the name itself when it has the SDK's `asset-N`
/// shape; a name of any other shape is the caller's own text and is not repeated.
pub fn part_label(name: &str) -> String {
    if is_sdk_part_name(name) {
        format!("{name:?}")
    } else {
        "(a name not of the form asset-N)".to_string()
    }
}

/// `asset-<digits>`, as the SDK names image parts.
pub fn is_sdk_part_name(name: &str) -> bool {
    name.strip_prefix("asset-")
        .is_some_and(|n| !n.is_empty() && n.len() <= 6 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The image parts of a `multipart/form-data` body (every part but `request`), in the
/// order they arrived, by part name. Assets claim them by name (`"part": "asset-0"`).
#[derive(Debug, Clone, Default)]
pub struct Parts {
    parts: Vec<(String, Bytes)>,
}

impl Parts {
    /// No parts (a JSON body).
    pub fn new() -> Self {
        Parts::default()
    }

    /// Adds a part; `false` when a part of that name is already there.
    pub fn insert(&mut self, name: String, bytes: Bytes) -> bool {
        if self.get(&name).is_some() {
            return false;
        }
        self.parts.push((name, bytes));
        true
    }

    /// The bytes of the part called `name`.
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.parts.iter().find(|(n, _)| n == name).map(|(_, b)| b)
    }

    /// Part names in arrival order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(|(n, _)| n.as_str())
    }

    /// How many parts there are.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, b'J', b'F', b'I', b'F'];
    const WEBP: &[u8] = b"RIFF\x24\0\0\0WEBPVP8 ";

    #[test]
    fn png_jpeg_and_webp_are_sniffed_from_their_magic_numbers() {
        assert_eq!(sniff(PNG), Ok(Format::Png));
        assert_eq!(sniff(JPEG), Ok(Format::Jpeg));
        assert_eq!(sniff(WEBP), Ok(Format::Webp));
    }

    #[test]
    fn other_bytes_are_refused_and_named_when_recognisable() {
        assert_eq!(
            sniff(b"GIF89a\x01\0\x01\0"),
            Err(ImageError::Unsupported("a GIF image"))
        );
        assert_eq!(
            sniff(b"BM\0\0"),
            Err(ImageError::Unsupported("a BMP image"))
        );
        assert_eq!(
            sniff(b"hello world"),
            Err(ImageError::Unsupported("not a recognised image format"))
        );
        assert_eq!(
            sniff(b"RIFF\0\0\0\0WAVE"),
            Err(ImageError::Unsupported("not a recognised image format"))
        );
        assert_eq!(sniff(b""), Err(ImageError::Empty));
        // A truncated signature is not the format.
        assert!(sniff(&PNG[..4]).is_err());
    }

    #[test]
    fn base64_is_read_in_every_common_spelling() {
        let bytes: Vec<u8> = (0u8..=255).collect();
        let std = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let unpadded = std.trim_end_matches('=').to_string();
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes);
        let wrapped: String = std
            .as_bytes()
            .chunks(76)
            .map(|c| format!("{}\r\n", std::str::from_utf8(c).expect("ascii")))
            .collect();
        for text in [&std, &unpadded, &url, &wrapped] {
            assert_eq!(decode_base64(text).as_deref(), Ok(&bytes[..]), "{text}");
        }
        assert!(matches!(decode_base64("ab$d"), Err(ImageError::Base64(_))));
        assert_eq!(decode_base64("  \n"), Err(ImageError::Empty));
    }

    #[test]
    fn data_urls_and_raw_base64_decode_while_other_urls_are_refused() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
        assert_eq!(
            decode_image_string(&format!("data:image/png;base64,{b64}")).as_deref(),
            Ok(PNG)
        );
        assert_eq!(
            decode_image_string(&format!("DATA:image/png;charset=x;BASE64,{b64}")).as_deref(),
            Ok(PNG)
        );
        assert_eq!(decode_image_string(&b64).as_deref(), Ok(PNG));
        assert_eq!(
            decode_image_string("data:image/png,rawbytes"),
            Err(ImageError::NotBase64DataUrl)
        );
        assert_eq!(
            decode_image_string("https://example.com/cat.png"),
            Err(ImageError::Url { scheme: "https" })
        );
        assert_eq!(
            decode_image_string("HTTP://example.com/cat.png"),
            Err(ImageError::Url { scheme: "http" })
        );
        assert_eq!(
            decode_image_string("weird-scheme:whatever"),
            Err(ImageError::Url { scheme: "non-data" })
        );
    }

    #[test]
    fn the_data_url_names_the_sniffed_format_in_standard_base64() {
        assert_eq!(
            data_url(Format::Png, b"\xfb\xff"),
            "data:image/png;base64,+/8="
        );
        assert_eq!(data_url(Format::Webp, b""), "data:image/webp;base64,");
        let bytes = vec![7u8; 1000];
        let url = data_url(Format::Jpeg, &bytes);
        let b64 = url.strip_prefix("data:image/jpeg;base64,").expect("prefix");
        assert_eq!(decode_base64(b64).expect("round trip"), bytes);
    }

    #[test]
    fn parts_keep_arrival_order_and_refuse_a_second_part_of_one_name() {
        let mut parts = Parts::new();
        assert!(parts.insert("asset-1".into(), Bytes::from_static(b"b")));
        assert!(parts.insert("asset-0".into(), Bytes::from_static(b"a")));
        assert!(!parts.insert("asset-0".into(), Bytes::from_static(b"c")));
        assert_eq!(parts.names().collect::<Vec<_>>(), ["asset-1", "asset-0"]);
        assert_eq!(parts.get("asset-0").map(|b| &b[..]), Some(&b"a"[..]));
        assert_eq!(parts.len(), 2);
    }
}
