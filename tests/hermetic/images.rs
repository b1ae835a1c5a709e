//! Images end to end (contract: `images`, `assets`, "Multipart images", the image limits;
//! `docs/request.md` and `docs/layouts.md`): what a caller sends as a data URL, raw base64, an inline
//! `data_base64` asset or a multipart `asset-N` part reaches the (fake) vision backend as
//! `image_url` parts with a data URL of the sniffed format, ahead of the text, in a staged
//! call. What the contract refuses (a text-only model, GIF or garbage bytes, more than 4
//! images, more than 4 MiB or 8 MiB, an http(s) URL, multipart without `request`) is refused
//! before any upstream request, and no message repeats the caller's bytes or URL. The
//! official SDKs' image round trips are in the live tier (`tests/live/images.rs`).

use crate::support;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use crate::setup::PNG;
use crate::support::fake_vllm::FakeVllm;
use crate::support::{Reply, Service};
use systemone::question::PREAMBLE;

/// The head of a JFIF JPEG (start of image, APP0) and its end marker.
const JPEG: &[u8] = &[
    0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0x00, 0x01, 0x01, 0x00, 0x00, 0x01,
    0x00, 0x01, 0x00, 0x00, 0xFF, 0xD9,
];
/// A 1×1 lossless WebP.
const WEBP: &[u8] = b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00";
/// A 1×1 GIF: a real image, but not a format the service sends.
const GIF: &[u8] = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;";
/// Bytes of no image format, with a marker that must never show up in a message.
const GARBAGE: &[u8] = b"CANARY-not-an-image-4f2a: just some text bytes";

const MIB: usize = 1024 * 1024;
const BOUNDARY: &str = "systemone-images-boundary";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The data URL the backend must receive for `bytes` of type `mime`.
fn data_url(mime: &str, bytes: &[u8]) -> String {
    format!("data:{mime};base64,{}", b64(bytes))
}

/// A valid request with three questions (two options or more each, so each is asked), whose
/// instructions mark which question a backend body belongs to; `extra` fields are merged in.
fn request(state: &str, extra: Value) -> Value {
    let mut body = json!({
        "state": state,
        "questions": {
            "first": {"type": "noul", "instructions": "Q-FIRST: is the parcel damaged?"},
            "second": {"type": "choice", "instructions": "Q-SECOND: what is shown?",
                       "criteria": {"parcel": null, "letter": null, "other": null}},
            "third": {"type": "score", "instructions": "Q-THIRD: how clear is the picture?",
                      "criteria": ["blurry", "fine", "sharp"]},
        }
    });
    for (k, v) in extra.as_object().expect("object").clone() {
        body[k] = v;
    }
    body
}

/// A `multipart/form-data` body the way the SDK writes one: (name, content type, bytes),
/// image parts carrying a filename equal to their name.
fn multipart(parts: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, ct, bytes) in parts {
        let filename = if *name == "request" {
            String::new()
        } else {
            format!("; filename=\"{name}\"")
        };
        out.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\nContent-Type: {ct}\r\n\r\n")
                .as_bytes(),
        );
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    out
}

fn multipart_type() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

/// A service in front of `fake` whose one model is configured as vision-capable.
async fn vision_service(fake: &FakeVllm, extra: &[&str]) -> Service {
    let mut flags = vec!["--vision"];
    flags.extend_from_slice(extra);
    support::start(support::config(&fake.base_url(), &flags)).await
}

async fn post_json(service: &Service, body: &Value) -> Reply {
    Reply::read_json(service.post_raw(body).await).await
}

async fn post_multipart(service: &Service, body: Vec<u8>, encoding: Option<&str>) -> Reply {
    let mut req = service
        .client
        .post(service.url("/v1/systemone"))
        .header("content-type", multipart_type());
    if let Some(enc) = encoding {
        req = req.header("content-encoding", enc);
    }
    Reply::read_json(req.body(body).send().await.expect("service answers")).await
}

/// Every backend body has the images (as these data URLs, in this order) first and then one
/// text part holding the whole prompt; the answer counts exactly the requests received.
fn assert_images_first(fake: &FakeVllm, answer: &Reply, want_urls: &[String]) -> Vec<String> {
    assert_eq!(answer.status, 200, "{}", answer.body);
    let bodies = fake.chat_bodies();
    assert_eq!(
        answer.body["usage"]["upstream_requests"],
        json!(bodies.len()),
        "{}",
        answer.body
    );
    assert_eq!(bodies.len(), 3, "one read per question");
    let mut texts = Vec::new();
    for body in &bodies {
        let parts = body["messages"][0]["content"]
            .as_array()
            .expect("with images the user content is a list of parts");
        assert_eq!(parts.len(), want_urls.len() + 1, "{parts:?}");
        for (part, url) in parts.iter().zip(want_urls) {
            assert_eq!(part["type"], "image_url");
            assert_eq!(part["image_url"]["url"].as_str(), Some(url.as_str()));
            assert_eq!(part.as_object().map(|o| o.len()), Some(2), "{part}");
        }
        let text = parts.last().expect("text part");
        assert_eq!(text["type"], "text");
        let text = text["text"].as_str().expect("text");
        assert!(text.starts_with(PREAMBLE), "{text}");
        texts.push(text.to_string());
        assert_eq!(body["messages"][1]["content"], "answer=");
    }
    texts
}

/// The call was staged: the first question went alone, before any other.
fn assert_staged(fake: &FakeVllm, texts: &[String]) {
    assert!(texts[0].contains("Q-FIRST"), "first request: {}", texts[0]);
    assert!(texts[1..].iter().all(|t| !t.contains("Q-FIRST")));
    assert!(
        fake.max_in_flight() <= 2,
        "the first question must go alone: {} in flight",
        fake.max_in_flight()
    );
}

/// A refused request: status, code (body and header), the 422 `loc`, and no upstream call.
fn assert_refused(fake: &FakeVllm, r: &Reply, status: u16, code: &str, loc: Option<Value>) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.body["error"]["code"], code, "{}", r.body);
    assert_eq!(r.header("x-systemone-error-code"), Some(code));
    assert!(!r.message().is_empty());
    if let Some(loc) = loc {
        assert_eq!(r.body["detail"][0]["loc"], loc, "{}", r.body);
    }
    assert_eq!(
        fake.chat_requests(),
        0,
        "no upstream request for a refused body"
    );
}

/// Posts `body` as JSON and asserts it is refused (see [`assert_refused`]).
async fn refused_json(
    fake: &FakeVllm,
    service: &Service,
    body: &Value,
    status: u16,
    code: &str,
    loc: Option<Value>,
) -> Reply {
    let r = post_json(service, body).await;
    assert_refused(fake, &r, status, code, loc);
    r
}

/// Posts `parts` as an uncompressed multipart body and asserts it is refused (see
/// [`assert_refused`]).
async fn refused_multipart(
    fake: &FakeVllm,
    service: &Service,
    parts: &[(&str, &str, &[u8])],
    status: u16,
    code: &str,
    loc: Option<Value>,
) -> Reply {
    let r = post_multipart(service, multipart(parts), None).await;
    assert_refused(fake, &r, status, code, loc);
    r
}

/// A request whose one asset `<image:00ff>` is the multipart part `asset-0`.
fn asset_in_part() -> Value {
    request(
        "s",
        json!({"assets": {"<image:00ff>": {"type": "image", "part": "asset-0"}}}),
    )
}

#[tokio::test]
async fn data_url_and_raw_base64_images_go_first_in_a_staged_call() {
    let fake = FakeVllm::start().await;
    fake.set_delay(Duration::from_millis(20));
    let service = vision_service(&fake, &[]).await;
    let body = request(
        "A customer sent pictures of the parcel.",
        json!({"images": [
            data_url("image/png", PNG),
            b64(JPEG),
            // The declared type is not trusted: the bytes say WebP.
            data_url("image/jpeg", WEBP),
        ]}),
    );
    let answer = post_json(&service, &body).await;
    let texts = assert_images_first(
        &fake,
        &answer,
        &[
            data_url("image/png", PNG),
            data_url("image/jpeg", JPEG),
            data_url("image/webp", WEBP),
        ],
    );
    assert_staged(&fake, &texts);
    let answers = answer.body["answers"].as_object().expect("answers");
    assert_eq!(
        answers.keys().collect::<Vec<_>>(),
        ["first", "second", "third"]
    );
}

#[tokio::test]
async fn inline_data_base64_assets_go_first_and_their_references_stay_in_the_text() {
    let fake = FakeVllm::start().await;
    fake.set_delay(Duration::from_millis(20));
    let service = vision_service(&fake, &[]).await;
    let (r1, r2) = (
        "<image:0123456789abcdef0123456789abcdef>",
        "<image:fedcba9876543210fedcba9876543210>",
    );
    // Wrapped base64 (line breaks), as files often hold it.
    let wrapped: String = b64(JPEG)
        .as_bytes()
        .chunks(16)
        .map(|c| format!("{}\n", std::str::from_utf8(c).expect("ascii")))
        .collect();
    let body = request(
        &format!("Compare {r1} with {r2}."),
        json!({
            "images": [b64(WEBP)],
            "assets": {
                r1: {"type": "image", "format": "png", "data_base64": b64(PNG)},
                r2: {"type": "image", "format": "jpeg", "data_base64": wrapped},
            }
        }),
    );
    let answer = post_json(&service, &body).await;
    let texts = assert_images_first(
        &fake,
        &answer,
        &[
            data_url("image/webp", WEBP),
            data_url("image/png", PNG),
            data_url("image/jpeg", JPEG),
        ],
    );
    assert_staged(&fake, &texts);
    for text in &texts {
        assert!(text.contains(&format!("Compare {r1} with {r2}.")), "{text}");
    }
}

#[tokio::test]
async fn multipart_assets_go_first_plain_and_zstd_compressed() {
    let r1 = "<image:0123456789abcdef0123456789abcdef>";
    let r2 = "<image:fedcba9876543210fedcba9876543210>";
    let json_part = request(
        &format!("Is {r1} the same parcel as {r2}?"),
        json!({"assets": {
            r1: {"type": "image", "part": "asset-0"},
            r2: {"type": "image", "part": "asset-1"},
        }}),
    )
    .to_string();
    // The SDK labels WebP as application/octet-stream: the bytes decide.
    let body = multipart(&[
        ("request", "application/json", json_part.as_bytes()),
        ("asset-0", "image/png", PNG),
        ("asset-1", "application/octet-stream", WEBP),
    ]);
    for encoding in [None, Some("zstd")] {
        let fake = FakeVllm::start().await;
        fake.set_delay(Duration::from_millis(20));
        let service = vision_service(&fake, &[]).await;
        let sent = match encoding {
            Some(_) => zstd::encode_all(&body[..], 3).expect("zstd"),
            None => body.clone(),
        };
        let answer = post_multipart(&service, sent, encoding).await;
        let texts = assert_images_first(
            &fake,
            &answer,
            &[data_url("image/png", PNG), data_url("image/webp", WEBP)],
        );
        assert_staged(&fake, &texts);
        assert!(texts.iter().all(|t| t.contains(r1) && t.contains(r2)));
    }
}

#[tokio::test]
async fn a_text_only_model_refuses_every_kind_of_image() {
    let (fake, service) = support::setup(&[]).await;
    let code = "system_one_images_unsupported";

    let r = refused_json(
        &fake,
        &service,
        &request("s", json!({"images": [data_url("image/png", PNG)]})),
        422,
        code,
        Some(json!(["body", "images"])),
    )
    .await;
    assert_eq!(r.body["error"]["type"], "not_configured");
    assert!(r.message().contains("vision"), "{}", r.message());

    let inline = json!({"assets": {"<image:00ff>": {"type": "image", "format": "png", "data_base64": b64(PNG)}}});
    let assets_loc = Some(json!(["body", "assets"]));
    let body = request("s", inline);
    refused_json(&fake, &service, &body, 422, code, assets_loc.clone()).await;

    let json_part = asset_in_part().to_string();
    let parts = [
        ("request", "application/json", json_part.as_bytes()),
        ("asset-0", "image/png", PNG),
    ];
    refused_multipart(&fake, &service, &parts, 422, code, assets_loc).await;

    // Image bytes without any asset naming them: still images for a text model.
    let plain = request("s", json!({})).to_string();
    let parts = [
        ("request", "application/json", plain.as_bytes()),
        ("asset-0", "image/png", PNG),
    ];
    refused_multipart(&fake, &service, &parts, 422, code, None).await;
}

#[tokio::test]
async fn gif_and_garbage_bytes_are_422s_naming_the_image() {
    let fake = FakeVllm::start().await;
    let service = vision_service(&fake, &[]).await;
    let code = "system_one_unsupported_image_format";
    let image_loc = |i: &str| Some(json!(["body", "images", i]));
    let asset_loc = Some(json!(["body", "assets", "<image:00ff>"]));

    let body = request(
        "s",
        json!({"images": [data_url("image/png", PNG), data_url("image/gif", GIF)]}),
    );
    let r = refused_json(&fake, &service, &body, 422, code, image_loc("1")).await;
    assert!(r.message().contains("image #1") && r.message().contains("GIF"));
    assert!(r.message().contains("PNG, JPEG and WebP"));

    let body = request("s", json!({"images": [b64(GARBAGE)]}));
    let r = refused_json(&fake, &service, &body, 422, code, image_loc("0")).await;
    assert!(r.message().contains("image #0"));

    let body = request(
        "s",
        json!({"images": [b64(PNG)], "assets": {"<image:00ff>": {"type": "image", "format": "png", "data_base64": b64(GIF)}}}),
    );
    let r = refused_json(&fake, &service, &body, 422, code, asset_loc.clone()).await;
    assert!(r.message().contains("image #1"), "{}", r.message());

    let json_part = asset_in_part().to_string();
    let parts = [
        ("request", "application/json", json_part.as_bytes()),
        ("asset-0", "image/png", GARBAGE),
    ];
    let r = refused_multipart(&fake, &service, &parts, 422, code, asset_loc).await;
    assert!(!r.body.to_string().contains("CANARY"), "{}", r.body);

    // Text that is not base64 at all.
    let invalid = "system_one_invalid_image";
    for image in [json!("not base64 at all!"), json!(42)] {
        let body = request("s", json!({"images": [image]}));
        refused_json(&fake, &service, &body, 422, invalid, image_loc("0")).await;
    }
}

#[tokio::test]
async fn too_many_and_too_large_images_are_413s_naming_limit_and_value() {
    let fake = FakeVllm::start().await;
    let service = vision_service(&fake, &[]).await;

    let five = vec![b64(PNG); 5];
    let body = request("s", json!({"images": five}));
    let too_many = "system_one_too_many_images";
    let r = refused_json(&fake, &service, &body, 413, too_many, None).await;
    assert!(r.message().contains("5 images") && r.message().contains("limit of 4"));
    assert_eq!(r.body["error"]["type"], "cap_exceeded");

    // Assets count too: 3 images + 2 assets.
    let body = request(
        "s",
        json!({"images": vec![b64(PNG); 3], "assets": {
            "<image:01>": {"type": "image", "format": "png", "data_base64": b64(PNG)},
            "<image:02>": {"type": "image", "format": "png", "data_base64": b64(PNG)},
        }}),
    );
    refused_json(&fake, &service, &body, 413, too_many, None).await;

    let mut big = PNG.to_vec();
    big.resize(5 * MIB, 0);
    let body = request("s", json!({"images": [data_url("image/png", &big)]}));
    let too_large = "system_one_image_too_large";
    let r = refused_json(&fake, &service, &body, 413, too_large, None).await;
    assert!(
        r.message().contains("image #0")
            && r.message().contains(&(5 * MIB).to_string())
            && r.message().contains(&(4 * MIB).to_string()),
        "{}",
        r.message()
    );

    let json_part = asset_in_part().to_string();
    let parts = [
        ("request", "application/json", json_part.as_bytes()),
        ("asset-0", "image/png", &big),
    ];
    refused_multipart(&fake, &service, &parts, 413, too_large, None).await;

    let mut three = PNG.to_vec();
    three.resize(3 * MIB, 0);
    let body = request("s", json!({"images": vec![b64(&three); 3]}));
    let all_too_large = "system_one_images_too_large";
    let r = refused_json(&fake, &service, &body, 413, all_too_large, None).await;
    assert!(
        r.message().contains(&(9 * MIB).to_string())
            && r.message().contains(&(8 * MIB).to_string()),
        "{}",
        r.message()
    );

    // The whole multipart body stays under the body limit.
    let small = vision_service(&fake, &["--max-body-bytes", "100000"]).await;
    let parts = [
        ("request", "application/json", json_part.as_bytes()),
        ("asset-0", "image/png", &three),
    ];
    let body_too_large = "system_one_body_too_large";
    refused_multipart(&fake, &small, &parts, 413, body_too_large, None).await;
}

#[tokio::test]
async fn image_urls_are_refused_and_never_fetched() {
    let fake = FakeVllm::start().await;
    let service = vision_service(&fake, &[]).await;
    // A local server the image URL points at: the service must never connect to it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    let code = "system_one_image_url_refused";
    for url in [
        format!("http://127.0.0.1:{port}/secret-cat.png"),
        format!("https://127.0.0.1:{port}/secret-cat.png"),
    ] {
        let body = request("s", json!({"images": [url]}));
        let loc = Some(json!(["body", "images", "0"]));
        let r = refused_json(&fake, &service, &body, 422, code, loc).await;
        assert!(r.message().contains("never fetches"), "{}", r.message());
        assert!(!r.body.to_string().contains("secret-cat"), "{}", r.body);
        let body = request(
            "s",
            json!({"assets": {"<image:00ff>": {"type": "image", "format": "png", "data_base64": url}}}),
        );
        let loc = Some(json!(["body", "assets", "<image:00ff>", "data_base64"]));
        refused_json(&fake, &service, &body, 422, code, loc).await;
    }
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "an image URL was fetched"
    );
}

#[tokio::test]
async fn multipart_framing_and_asset_parts_are_checked() {
    let fake = FakeVllm::start().await;
    let service = vision_service(&fake, &[]).await;
    let with_asset = asset_in_part().to_string();
    let framing = "system_one_invalid_multipart";
    let invalid_asset = "system_one_invalid_asset";

    // No `request` part.
    let parts = [("asset-0", "image/png", PNG)];
    let r = refused_multipart(&fake, &service, &parts, 400, framing, None).await;
    assert!(r.message().contains("\"request\""), "{}", r.message());

    // An empty multipart body, and no boundary at all.
    let r = post_multipart(&service, format!("--{BOUNDARY}--\r\n").into_bytes(), None).await;
    assert_refused(&fake, &r, 400, framing, None);
    let r = Reply::read_json(
        service
            .client
            .post(service.url("/v1/systemone"))
            .header("content-type", "multipart/form-data")
            .body(multipart(&[(
                "request",
                "application/json",
                with_asset.as_bytes(),
            )]))
            .send()
            .await
            .expect("answers"),
    )
    .await;
    assert_refused(&fake, &r, 400, framing, None);

    // A body cut off before its closing boundary.
    let whole = multipart(&[("request", "application/json", with_asset.as_bytes())]);
    let r = post_multipart(&service, whole[..whole.len() - 30].to_vec(), None).await;
    assert_refused(&fake, &r, 400, framing, None);

    // Two `request` parts.
    let parts = [
        ("request", "application/json", with_asset.as_bytes()),
        ("request", "application/json", with_asset.as_bytes()),
    ];
    refused_multipart(&fake, &service, &parts, 400, framing, None).await;

    // A `request` part that is not JSON.
    let parts = [("request", "application/json", &b"{not json"[..])];
    let not_json = "system_one_invalid_json";
    refused_multipart(&fake, &service, &parts, 400, not_json, None).await;

    // An asset naming a part that is not there.
    let parts = [
        ("request", "application/json", with_asset.as_bytes()),
        ("asset-1", "image/png", PNG),
    ];
    let loc = Some(json!(["body", "assets", "<image:00ff>", "part"]));
    refused_multipart(&fake, &service, &parts, 422, invalid_asset, loc).await;

    // A part no asset claims.
    let parts = [
        ("request", "application/json", with_asset.as_bytes()),
        ("asset-0", "image/png", PNG),
        ("asset-1", "image/png", PNG),
    ];
    let loc = Some(json!(["body", "assets"]));
    let r = refused_multipart(&fake, &service, &parts, 422, invalid_asset, loc).await;
    assert!(r.message().contains("\"asset-1\""), "{}", r.message());

    // Two assets claiming one part.
    let twice = request(
        "s",
        json!({"assets": {
            "<image:01>": {"type": "image", "part": "asset-0"},
            "<image:02>": {"type": "image", "part": "asset-0"},
        }}),
    )
    .to_string();
    let parts = [
        ("request", "application/json", twice.as_bytes()),
        ("asset-0", "image/png", PNG),
    ];
    let loc = Some(json!(["body", "assets", "<image:02>", "part"]));
    refused_multipart(&fake, &service, &parts, 422, invalid_asset, loc).await;

    // A `part` in a plain JSON body, an asset with neither part nor data, another type.
    let r = refused_json(&fake, &service, &asset_in_part(), 422, invalid_asset, None).await;
    assert!(r.message().contains("not multipart"), "{}", r.message());
    for (asset, field) in [
        (json!({"type": "image"}), None),
        (
            json!({"type": "video", "data_base64": b64(PNG)}),
            Some("type"),
        ),
        (json!("just a string"), None),
        (
            json!({"type": "image", "data_base64": 7}),
            Some("data_base64"),
        ),
    ] {
        let body = request("s", json!({"assets": {"<image:00ff>": asset}}));
        let mut loc = json!(["body", "assets", "<image:00ff>"]);
        if let Some(f) = field {
            loc.as_array_mut().expect("array").push(json!(f));
        }
        refused_json(&fake, &service, &body, 422, invalid_asset, Some(loc)).await;
    }
}

/// Library level: a request with images is staged, whichever way the images came.
#[tokio::test]
async fn a_request_with_images_is_staged() {
    use systemone::request::images::Parts;
    use systemone::request::validate_with_parts;
    let fake = FakeVllm::start().await;
    let service = vision_service(&fake, &[]).await;
    let (models, limits) = (&service.state.models.routes(), &service.state.limits);
    let plain =
        validate_with_parts(request("s", json!({})), &Parts::new(), models, limits).expect("valid");
    assert!(!plain.staged());
    let with_image = validate_with_parts(
        request("s", json!({"images": [b64(PNG)]})),
        &Parts::new(),
        models,
        limits,
    )
    .expect("valid");
    assert!(with_image.staged());
    assert_eq!(with_image.images().len(), 1);
    let mut parts = Parts::new();
    parts.insert("asset-0".into(), bytes::Bytes::from_static(PNG));
    let multipart = validate_with_parts(asset_in_part(), &parts, models, limits).expect("valid");
    assert!(multipart.staged());
    assert_eq!(&*multipart.images()[0], data_url("image/png", PNG));
    // The same bytes under two names go to the backend once.
    let twice = validate_with_parts(
        request(
            "s",
            json!({"images": [b64(PNG)], "assets": {"<image:00ff>": {"type": "image", "part": "asset-0"}}}),
        ),
        &parts,
        models,
        limits,
    )
    .expect("valid");
    assert_eq!(twice.images().len(), 1);
}

// ---- The official SDKs -------------------------------------------------------------------
