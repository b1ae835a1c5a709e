//! Images and assets (contract `images`, `assets`, "Multipart images"): refused up front
//! for a model not configured as vision-capable; otherwise each is decoded, sniffed (PNG,
//! JPEG or WebP) and checked against the count and size limits. Images are numbered across
//! both fields (`images` in array order, then `assets` in map order), as the messages say.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{loc, refuse, refuse_field_type, refuse_type, Entry};
use crate::config::Limits;
use crate::error::{ApiError, Code};
use crate::models::Model;
use crate::request::images::{data_url, decode_image_string, part_label, sniff, ImageError, Parts};

/// Checks `images`, `assets` and the multipart `parts` together. Returns the data URLs in
/// sending order, an image sent twice (same bytes) only once. The `<image:HEX>` references
/// stay where the caller put them.
pub(super) fn validate_images(
    body: &Map<String, Value>,
    parts: &Parts,
    model: &Model,
    limits: &Limits,
) -> Result<Vec<Arc<str>>, ApiError> {
    let images = image_list(body.get("images"))?;
    let empty = Map::new();
    let assets = asset_map(body.get("assets"))?.unwrap_or(&empty);
    if images.is_empty() && assets.is_empty() && parts.is_empty() {
        return Ok(Vec::new());
    }
    check_vision(model, images, assets)?;
    check_image_count(images.len(), assets.len(), limits)?;
    let mut checked = CheckedImages::new(limits);
    for (i, item) in images.iter().enumerate() {
        let at = vec!["images".to_string(), i.to_string()];
        let bytes = inline_image(item, i, &at)?;
        checked.add(&bytes, i, &at)?;
    }
    let mut claimed: Vec<&str> = Vec::new();
    for (j, (key, entry)) in assets.iter().enumerate() {
        let i = images.len() + j;
        let at = Entry { map: "assets", key };
        let bytes = asset_bytes(entry, i, at, parts, &mut claimed)?;
        checked.add(&bytes, i, &at.whole())?;
    }
    check_parts_claimed(parts, &claimed)?;
    Ok(checked.urls)
}

/// `images`: absent or null is none; otherwise an array (its entries are checked one by
/// one later, after the vision and count rules).
fn image_list(value: Option<&Value>) -> Result<&[Value], ApiError> {
    match value {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => refuse_field_type(Code::InvalidBody, "images", "an array of strings", other),
    }
}

/// `assets`: absent or null is none (`None`); otherwise an object of reference → asset.
fn asset_map(value: Option<&Value>) -> Result<Option<&Map<String, Value>>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => refuse_field_type(Code::InvalidBody, "assets", "an object", other),
    }
}

/// A model takes images only when configured as vision-capable (the backend is not asked).
/// The refusal points at the first field that sent any: `images`, then `assets`, else the
/// multipart parts (no field, so an empty `loc`).
fn check_vision(
    model: &Model,
    images: &[Value],
    assets: &Map<String, Value>,
) -> Result<(), ApiError> {
    if model.vision {
        return Ok(());
    }
    let (at, what) = if !images.is_empty() {
        (loc(&["images"]), "images")
    } else if !assets.is_empty() {
        (loc(&["assets"]), "image assets")
    } else {
        (vec![], "multipart image parts")
    };
    refuse(
        Code::ImagesUnsupported,
        at,
        format!(
            "model {} is not configured as vision-capable, so it takes no {what}",
            model.name
        ),
    )
}

/// `images` and `assets` entries together are at most `max_images`, counted before any is
/// decoded (a 413 with no `loc`: the request as a whole is too big).
fn check_image_count(images: usize, assets: usize, limits: &Limits) -> Result<(), ApiError> {
    let count = images + assets;
    if count > limits.max_images {
        return Err(ApiError::new(
            Code::TooManyImages,
            format!(
                "{count} images ({images} in images, {assets} in assets) is more than the limit of {} per request",
                limits.max_images
            ),
        ));
    }
    Ok(())
}

/// An `images` entry is a string: a `data:image/...;base64,` URL or raw base64, decoded
/// here (never fetched).
fn inline_image(item: &Value, i: usize, at: &[String]) -> Result<Vec<u8>, ApiError> {
    let Value::String(text) = item else {
        return refuse_type(
            Code::InvalidImage,
            at.to_vec(),
            &format!("image #{i} must be a string (a data:image/...;base64, URL or raw base64)"),
            item,
        );
    };
    decode_image_string(text).map_err(|e| image_error(e, i, at))
}

/// The bytes of asset (image #`i`): an object whose optional `type` is `"image"` and
/// optional `format` a string, holding either `part` (a multipart part's name, which wins
/// when both are given) or `data_base64`.
fn asset_bytes<'b, 'p>(
    entry: &'b Value,
    i: usize,
    at: Entry,
    parts: &'p Parts,
    claimed: &mut Vec<&'b str>,
) -> Result<Cow<'p, [u8]>, ApiError> {
    let entry = asset_entry(entry, i, at)?;
    match (entry.get("part"), entry.get("data_base64")) {
        (Some(Value::String(part)), _) => {
            claim_part(part, i, at, parts, claimed).map(Cow::Borrowed)
        }
        (Some(other), _) if !other.is_null() => refuse_type(
            Code::InvalidAsset,
            at.field("part"),
            &format!("asset (image #{i}): part must be the name of a multipart part"),
            other,
        ),
        (_, Some(Value::String(text))) => decode_image_string(text)
            .map(Cow::Owned)
            .map_err(|e| image_error(e, i, &at.field("data_base64"))),
        (_, Some(other)) if !other.is_null() => refuse_type(
            Code::InvalidAsset,
            at.field("data_base64"),
            &format!("asset (image #{i}): data_base64 must be a base64 string"),
            other,
        ),
        _ => refuse(
            Code::InvalidAsset,
            at.whole(),
            format!("asset (image #{i}) needs \"part\" or \"data_base64\""),
        ),
    }
}

/// An asset is an object; `image` is the only asset type served, and `format` (a hint the
/// sniffed bytes override) must at least be a string.
fn asset_entry<'b>(
    entry: &'b Value,
    i: usize,
    at: Entry,
) -> Result<&'b Map<String, Value>, ApiError> {
    let Value::Object(entry) = entry else {
        let must = format!(
            "asset (image #{i}) must be an object {{\"type\": \"image\", \"part\" or \"data_base64\": …}}"
        );
        return refuse_type(Code::InvalidAsset, at.whole(), &must, entry);
    };
    match entry.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if t == "image" => {}
        Some(_) => {
            return refuse(
                Code::InvalidAsset,
                at.field("type"),
                format!("asset (image #{i}): type must be \"image\", the only asset type served"),
            )
        }
    }
    match entry.get("format") {
        Some(format) if !matches!(format, Value::Null | Value::String(_)) => refuse_type(
            Code::InvalidAsset,
            at.field("format"),
            &format!("asset (image #{i}): format must be a string"),
            format,
        ),
        _ => Ok(entry),
    }
}

/// The bytes of the multipart part an asset names. The part must exist (the message says
/// whether the body was multipart at all) and belong to no other asset, so each part is
/// sent once, for one reference.
fn claim_part<'b, 'p>(
    part: &'b str,
    i: usize,
    at: Entry,
    parts: &'p Parts,
    claimed: &mut Vec<&'b str>,
) -> Result<&'p [u8], ApiError> {
    let Some(bytes) = parts.get(part) else {
        let why = if parts.is_empty() {
            "but the body is not multipart/form-data (send the bytes there, or inline as data_base64)"
        } else {
            "but the multipart body has no part of that name"
        };
        return refuse(
            Code::InvalidAsset,
            at.field("part"),
            format!("asset (image #{i}) names a multipart part {why}"),
        );
    };
    if claimed.contains(&part) {
        return refuse(
            Code::InvalidAsset,
            at.field("part"),
            format!("asset (image #{i}) names a multipart part another asset already names; each part belongs to one asset"),
        );
    }
    claimed.push(part);
    Ok(bytes)
}

/// Every multipart image part must be claimed by an asset: an unclaimed part would be
/// bytes no question refers to. Checked after every asset, in part arrival order.
fn check_parts_claimed(parts: &Parts, claimed: &[&str]) -> Result<(), ApiError> {
    match parts.names().find(|name| !claimed.contains(name)) {
        Some(name) => refuse(
            Code::InvalidAsset,
            loc(&["assets"]),
            format!(
                "multipart part {} is not named by any asset; each image part must be claimed by an entry of assets",
                part_label(name)
            ),
        ),
        None => Ok(()),
    }
}

/// The images accepted so far and their decoded bytes together.
struct CheckedImages<'a> {
    limits: &'a Limits,
    total: usize,
    urls: Vec<Arc<str>>,
}

impl<'a> CheckedImages<'a> {
    /// None accepted yet; each is checked against `limits` as it comes.
    fn new(limits: &'a Limits) -> Self {
        CheckedImages {
            limits,
            total: 0,
            urls: Vec::new(),
        }
    }

    /// Checks image #`i` (size, total, format) and keeps its data URL.
    fn add(&mut self, bytes: &[u8], i: usize, at: &[String]) -> Result<(), ApiError> {
        let limits = self.limits;
        if bytes.len() > limits.max_image_bytes {
            return refuse(
                Code::ImageTooLarge,
                at.to_vec(),
                format!(
                    "image #{i} is {} bytes decoded, more than the limit of {} bytes per image",
                    bytes.len(),
                    limits.max_image_bytes
                ),
            );
        }
        self.total += bytes.len();
        if self.total > limits.max_image_total_bytes {
            return refuse(
                Code::ImagesTooLarge,
                at.to_vec(),
                format!(
                    "images #0 to #{i} are {} bytes decoded together, more than the limit of {} bytes per request",
                    self.total, limits.max_image_total_bytes
                ),
            );
        }
        let format = sniff(bytes).map_err(|e| image_error(e, i, at))?;
        let url: Arc<str> = Arc::from(data_url(format, bytes));
        if !self.urls.contains(&url) {
            self.urls.push(url);
        }
        Ok(())
    }
}

/// The caller's error for image #`i` at `at`: a URL and an unsupported format have codes
/// of their own (the caller fixes them differently); every other decoding problem is an
/// invalid image.
fn image_error(e: ImageError, i: usize, at: &[String]) -> ApiError {
    let code = match e {
        ImageError::Url { .. } => Code::ImageUrlRefused,
        ImageError::Unsupported(_) => Code::UnsupportedImageFormat,
        ImageError::NotBase64DataUrl | ImageError::Base64(_) | ImageError::Empty => {
            Code::InvalidImage
        }
    };
    ApiError::at(code, at.to_vec(), format!("image #{i} {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::test_support::*;
    use crate::error::Code;

    const KEY: &str = "<image:00ff>";

    /// `base()` asked of the vision model, with these top-level fields set.
    fn vision(fields: Value) -> Value {
        let mut body = top("model", json!(VISION));
        for (k, v) in fields.as_object().expect("fields") {
            body[k] = v.clone();
        }
        body
    }

    /// The vision model with one asset `KEY`.
    fn asset(entry: Value) -> Value {
        vision(json!({"assets": {KEY: entry}}))
    }

    /// The vision model with these `images`.
    fn images(items: Value) -> Value {
        vision(json!({"images": items}))
    }

    const NOT_BASE64: &str = "image #0 is not valid base64: an invalid character at offset 2";
    const GIF_REFUSED: &str = "image #0 is a GIF image; supported formats are PNG, JPEG and WebP (sniffed from the bytes)";

    /// `loc` of the asset `KEY`, or of one of its fields.
    fn at(field: Option<&'static str>) -> Vec<&'static str> {
        let mut l = vec!["assets", KEY];
        l.extend(field);
        l
    }

    #[test]
    #[rustfmt::skip]
    fn vision_count_and_images() {
        let unsupported = |what: &str| format!("model glm-5.3-flash is not configured as vision-capable, so it takes no {what}");
        let (png, webp) = (b64(PNG), b64(WEBP));
        let jpeg = format!("data:image/jpeg;base64,{}", b64(JPEG));
        let five = vision(json!({"images": [1, 2, 3], "assets": {"a": 1, "b": 2}}));
        let four = vision(json!({"images": [png, jpeg], "assets": {"a": {"data_base64": webp}, "b": {"data_base64": png}}}));
        let late = json!({"state": STATE, "questions": {"q1": choice()}, "history": 3, "images": [png]});
        let twice = vision(json!({"images": [png], "assets": {KEY: {"data_base64": png}}}));
        run(vec![
            reject("images on a text-only model", top("images", json!([png])), Code::ImagesUnsupported, &["images"], unsupported("images")),
            reject("assets on a text-only model", top("assets", json!({KEY: {"data_base64": png}})), Code::ImagesUnsupported, &["assets"], unsupported("image assets")),
            reject("parts on a text-only model", base(), Code::ImagesUnsupported, &[], unsupported("multipart image parts")).parts(&[("asset-0", PNG)]),
            reject("images is a string", top("images", json!(png)), Code::InvalidBody, &["images"], "images must be an array of strings, got a string"),
            reject("assets is an array", top("assets", json!([])), Code::InvalidBody, &["assets"], "assets must be an object, got an array"),
            reject("history before images", late, Code::BadHistory, &["history"], "history must be a string or an object question id -> string, got a number"),
            reject("five images", five, Code::TooManyImages, &[], "5 images (3 in images, 2 in assets) is more than the limit of 4 per request"),
            reject("image is a number", images(json!([1])), Code::InvalidImage, &["images", "0"], "image #0 must be a string (a data:image/...;base64, URL or raw base64), got a number"),
            reject("image is an https URL", images(json!(["https://example.com/cat.png"])), Code::ImageUrlRefused, &["images", "0"], "image #0 is a URL (https); this service never fetches images: send the bytes as a data:image/...;base64, URL or raw base64"),
            reject("data URL without base64", images(json!(["data:image/png,raw"])), Code::InvalidImage, &["images", "0"], "image #0 is a data URL without ;base64, (only base64 data URLs are read)"),
            reject("image is not base64", images(json!(["ab$d"])), Code::InvalidImage, &["images", "0"], NOT_BASE64),
            reject("image is empty", images(json!([""])), Code::InvalidImage, &["images", "0"], "image #0 is empty"),
            reject("image is a GIF", images(json!([b64(GIF)])), Code::UnsupportedImageFormat, &["images", "0"], GIF_REFUSED),
            reject("the second image is bad", images(json!([png, 2])), Code::InvalidImage, &["images", "1"], "image #1 must be a string (a data:image/...;base64, URL or raw base64), got a number"),
            reject("image over max_image_bytes", images(json!([png])), Code::ImageTooLarge, &["images", "0"], "image #0 is 16 bytes decoded, more than the limit of 10 bytes per image").limits(|l| l.max_image_bytes = 10),
            reject("images over max_image_total_bytes", images(json!([png, jpeg])), Code::ImagesTooLarge, &["images", "1"], "images #0 to #1 are 26 bytes decoded together, more than the limit of 20 bytes per request").limits(|l| l.max_image_total_bytes = 20),
            accept("images empty", top("images", json!([]))).holds(|r| r.images().is_empty()),
            accept("assets empty", top("assets", json!({}))).holds(|r| r.images().is_empty()),
            accept("images and assets null", json!({"state": STATE, "questions": {"q1": choice()}, "images": null, "assets": null})),
            accept("png, jpeg and webp in order", images(json!([png, jpeg, webp]))).holds(|r| r.images().iter().map(|u| &u[..15]).eq(["data:image/png;", "data:image/jpeg", "data:image/webp"])),
            accept("the same image twice is sent once", twice).holds(|r| r.images().len() == 1),
            accept("image at max_image_bytes", images(json!([png]))).limits(|l| l.max_image_bytes = 16),
            accept("four images at max_images, one repeated", four).holds(|r| r.images().len() == 3),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn assets_and_parts() {
        let not_multipart = "asset (image #0) names a multipart part but the body is not multipart/form-data (send the bytes there, or inline as data_base64)";
        let unclaimed = |label: &str| format!("multipart part {label} is not named by any asset; each image part must be claimed by an entry of assets");
        let png = b64(PNG);
        let after_images = vision(json!({"images": [png], "assets": {KEY: 1}}));
        let same_part = vision(json!({"assets": {"a": {"part": "asset-0"}, "b": {"part": "asset-0"}}}));
        run(vec![
            reject("asset is a string", asset(json!("x")), Code::InvalidAsset, &at(None), "asset (image #0) must be an object {\"type\": \"image\", \"part\" or \"data_base64\": …}, got a string"),
            reject("asset numbered after the images", after_images, Code::InvalidAsset, &at(None), "asset (image #1) must be an object {\"type\": \"image\", \"part\" or \"data_base64\": …}, got a number"),
            reject("asset of another type", asset(json!({"type": "video", "data_base64": png})), Code::InvalidAsset, &at(Some("type")), "asset (image #0): type must be \"image\", the only asset type served"),
            reject("asset format is a number", asset(json!({"format": 1, "data_base64": png})), Code::InvalidAsset, &at(Some("format")), "asset (image #0): format must be a string, got a number"),
            reject("asset part is a number", asset(json!({"part": 1})), Code::InvalidAsset, &at(Some("part")), "asset (image #0): part must be the name of a multipart part, got a number"),
            reject("a bad part is not passed over for data_base64", asset(json!({"part": 1, "data_base64": png})), Code::InvalidAsset, &at(Some("part")), "asset (image #0): part must be the name of a multipart part, got a number"),
            reject("asset data_base64 is a number", asset(json!({"data_base64": 1})), Code::InvalidAsset, &at(Some("data_base64")), "asset (image #0): data_base64 must be a base64 string, got a number"),
            reject("asset with neither", asset(json!({"type": "image"})), Code::InvalidAsset, &at(None), "asset (image #0) needs \"part\" or \"data_base64\""),
            reject("asset with both null", asset(json!({"part": null, "data_base64": null})), Code::InvalidAsset, &at(None), "asset (image #0) needs \"part\" or \"data_base64\""),
            reject("asset part in a JSON body", asset(json!({"part": "asset-0"})), Code::InvalidAsset, &at(Some("part")), not_multipart),
            reject("asset names a missing part", asset(json!({"part": "asset-1"})), Code::InvalidAsset, &at(Some("part")), "asset (image #0) names a multipart part but the multipart body has no part of that name").parts(&[("asset-0", PNG)]),
            reject("two assets name one part", same_part, Code::InvalidAsset, &["assets", "b", "part"], "asset (image #1) names a multipart part another asset already names; each part belongs to one asset").parts(&[("asset-0", PNG)]),
            reject("an unclaimed part", asset(json!({"part": "asset-0"})), Code::InvalidAsset, &["assets"], unclaimed("\"asset-1\"")).parts(&[("asset-0", PNG), ("asset-1", JPEG)]),
            reject("an unclaimed part of another name", asset(json!({"part": "asset-0"})), Code::InvalidAsset, &["assets"], unclaimed("(a name not of the form asset-N)")).parts(&[("photo", JPEG), ("asset-0", PNG)]),
            reject("asset data_base64 not base64", asset(json!({"data_base64": "ab$d"})), Code::InvalidImage, &at(Some("data_base64")), NOT_BASE64),
            reject("asset bytes are a GIF", asset(json!({"data_base64": b64(GIF)})), Code::UnsupportedImageFormat, &at(None), GIF_REFUSED),
            reject("asset part bytes are a GIF", asset(json!({"part": "asset-0"})), Code::UnsupportedImageFormat, &at(None), GIF_REFUSED).parts(&[("asset-0", GIF)]),
            reject("asset type before its bytes", asset(json!({"type": 1, "part": 1})), Code::InvalidAsset, &at(Some("type")), "asset (image #0): type must be \"image\", the only asset type served"),
            accept("an asset from a part", asset(json!({"type": "image", "format": "png", "part": "asset-0"}))).parts(&[("asset-0", JPEG)]).holds(|r| r.images()[0].starts_with("data:image/jpeg;base64,")),
            accept("part wins over data_base64", asset(json!({"part": "asset-0", "data_base64": 1}))).parts(&[("asset-0", PNG)]),
            accept("a null part falls back to data_base64", asset(json!({"part": null, "data_base64": png}))),
        ]);
    }
}
