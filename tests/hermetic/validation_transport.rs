//! The transport features the official SDK uses, over HTTP, as rows of the validation table
//! (`tests/hermetic/setup/rows.rs` runs them): `gzip` and `zstd` request bodies are read, a
//! decompression bomb is a 413, a broken stream a 400, an unknown encoding a 415; a
//! `multipart/form-data` body with a `request` part is read as the JSON body, and its image
//! parts follow the model's vision support. The gzip, zstd and multipart encoders are made
//! here by hand, and checked against their own invariants.

use crate::support;
use serde_json::{json, Value};

use crate::setup::rows::{assert_rows_hold, base, fail, pass, top, Row, BOUNDARY};
use crate::setup::PNG;

/// CRC-32 (IEEE), as gzip's trailer needs it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A gzip member around a raw deflate stream that inflates to `plain`.
fn gzip_member(deflate: &[u8], plain: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    out.extend_from_slice(deflate);
    out.extend_from_slice(&crc32(plain).to_le_bytes());
    out.extend_from_slice(&(plain.len() as u32).to_le_bytes());
    out
}

/// `data` gzip-compressed with stored (uncompressed) deflate blocks.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut deflate = Vec::new();
    let chunks: Vec<&[u8]> = data.chunks(65_535).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        deflate.push(u8::from(i + 1 == chunks.len()));
        let len = chunk.len() as u16;
        deflate.extend_from_slice(&len.to_le_bytes());
        deflate.extend_from_slice(&(!len).to_le_bytes());
        deflate.extend_from_slice(chunk);
    }
    if chunks.is_empty() {
        deflate.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    gzip_member(&deflate, data)
}

/// Bits packed LSB first, as deflate wants them.
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    used: u32,
}

impl Bits {
    /// Writes `n` bits of `value`, least significant first.
    fn lsb(&mut self, value: u32, n: u32) {
        for i in 0..n {
            if self.used % 8 == 0 {
                self.out.push(0);
            }
            let last = self.out.len() - 1;
            self.out[last] |= (((value >> i) & 1) as u8) << (self.used % 8);
            self.used += 1;
        }
    }
    /// Writes a Huffman code of `n` bits, most significant first.
    fn code(&mut self, code: u32, n: u32) {
        for i in (0..n).rev() {
            self.lsb((code >> i) & 1, 1);
        }
    }
    /// A literal byte with the fixed Huffman code.
    fn literal(&mut self, b: u8) {
        if b < 144 {
            self.code(0x30 + u32::from(b), 8);
        } else {
            self.code(0x190 + u32::from(b - 144), 9);
        }
    }
}

/// A gzip bomb: `prefix`, then `run` copies of `fill`, then `suffix`, compressed with
/// fixed-Huffman back-references (258 bytes each for about 13 bits). Returns the gzip
/// bytes and the inflated size.
fn gzip_bomb(prefix: &[u8], fill: u8, run: usize, suffix: &[u8]) -> (Vec<u8>, usize) {
    assert!(run >= 1 && (run - 1) % 258 == 0, "run must be 1 + 258k");
    let mut bits = Bits::default();
    bits.lsb(1, 1); // BFINAL
    bits.lsb(1, 2); // BTYPE = fixed Huffman
    let mut plain = prefix.to_vec();
    for &b in prefix {
        bits.literal(b);
    }
    bits.literal(fill);
    plain.push(fill);
    for _ in 0..(run - 1) / 258 {
        bits.code(0xC0 + (285 - 280), 8); // length 258
        bits.code(0, 5); // distance 1
        plain.extend(std::iter::repeat_n(fill, 258));
    }
    for &b in suffix {
        bits.literal(b);
    }
    plain.extend_from_slice(suffix);
    bits.code(0, 7); // end of block
    (gzip_member(&bits.out, &plain), plain.len())
}

/// `data` as one zstd frame of raw blocks.
fn zstd_raw(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    out.push(0xa0); // single segment, 4-byte content size, no checksum, no dictionary
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    let chunks: Vec<&[u8]> = data.chunks(128 * 1024).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = u32::from(i + 1 == chunks.len());
        let header = ((chunk.len() as u32) << 3) | last; // block type 0 = raw
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(chunk);
    }
    out
}

/// A `multipart/form-data` body of (part name, content type, bytes).
fn multipart(parts: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, ct, bytes) in parts {
        out.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\nContent-Type: {ct}\r\n\r\n"
            )
            .as_bytes(),
        );
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    out
}

fn transport_rows() -> Vec<Row> {
    let body = base().to_string().into_bytes();
    let big = top("state", json!("z".repeat(4_000)))
        .to_string()
        .into_bytes();
    let (bomb, inflated) = gzip_bomb(b"{\"state\": \"", b'a', 1 + 258 * 400, b"\"}");
    assert!(bomb.len() < 1_000 && inflated > 100_000);
    vec![
        pass("gzip body accepted", gzip_stored(&body)).header("content-encoding", "gzip"),
        pass("zstd body accepted", zstd_raw(&body)).header("content-encoding", "zstd"),
        pass("gzip body of 4 KiB accepted", gzip_stored(&big)).header("content-encoding", "gzip"),
        pass("zstd body of 4 KiB accepted", zstd_raw(&big)).header("content-encoding", "zstd"),
        fail(
            "gzip bomb over --max-body-bytes",
            bomb,
            413,
            "system_one_body_too_large",
        )
        .header("content-encoding", "gzip")
        .flags(&["--max-body-bytes", "1000"]),
        fail(
            "zstd body inflating over --max-body-bytes",
            zstd_raw(&big),
            413,
            "system_one_body_too_large",
        )
        .header("content-encoding", "zstd")
        .flags(&["--max-body-bytes", "1000"]),
        fail(
            "truncated gzip",
            gzip_stored(&body)[..40].to_vec(),
            400,
            "system_one_invalid_json",
        )
        .header("content-encoding", "gzip"),
        fail(
            "deflate is not an accepted encoding",
            body.clone(),
            415,
            "system_one_unsupported_encoding",
        )
        .header("content-encoding", "deflate"),
    ]
}

/// Multipart rows (the SDK's image transport); tests/hermetic/images.rs has the rest.
fn multipart_rows() -> Vec<Row> {
    let body = base().to_string().into_bytes();
    let multipart_ct = "multipart/form-data; boundary=systemone-test-boundary";
    let with_assets = top(
        "assets",
        json!({"<image:00ff>": {"type": "image", "part": "asset-0"}}),
    )
    .to_string();
    vec![
        pass(
            "multipart with a request part",
            multipart(&[("request", "application/json", &body)]),
        )
        .content_type(Some(multipart_ct)),
        fail(
            "multipart without a request part",
            multipart(&[("asset-0", "image/png", PNG)]),
            400,
            "system_one_invalid_multipart",
        )
        .content_type(Some(multipart_ct)),
        fail(
            "multipart image on a text-only model",
            multipart(&[
                ("request", "application/json", with_assets.as_bytes()),
                ("asset-0", "image/png", PNG),
            ]),
            422,
            "system_one_images_unsupported",
        )
        .content_type(Some(multipart_ct))
        .at(&["assets"]),
        pass(
            "multipart image on a vision model",
            multipart(&[
                ("request", "application/json", with_assets.as_bytes()),
                ("asset-0", "image/png", PNG),
            ]),
        )
        .content_type(Some(multipart_ct))
        .flags(&["--vision"]),
        fail(
            "multipart GIF on a vision model",
            multipart(&[
                ("request", "application/json", with_assets.as_bytes()),
                (
                    "asset-0",
                    "image/gif",
                    b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
                ),
            ]),
            422,
            "system_one_unsupported_image_format",
        )
        .content_type(Some(multipart_ct))
        .flags(&["--vision"])
        .at(&["assets", "<image:00ff>"])
        .mentions(&["image #0", "GIF"]),
        fail(
            "multipart asset naming a missing part",
            multipart(&[("request", "application/json", with_assets.as_bytes())]),
            422,
            "system_one_invalid_asset",
        )
        .content_type(Some(multipart_ct))
        .flags(&["--vision"])
        .at(&["assets", "<image:00ff>", "part"]),
    ]
}

/// The compressed bodies the official SDK sends: `gzip` and `zstd` bodies are read, a
/// decompression bomb is a 413, a broken stream a 400, an unknown encoding a 415.
#[tokio::test]
async fn compressed_bodies_are_read() {
    assert_rows_hold(&transport_rows()).await;
}

/// A 32 KB zstd frame of RLE blocks that expands to 1 GiB is refused with 413 at the
/// default 24 MiB limit: decompression stops one byte past the limit.
#[tokio::test]
async fn a_zstd_bomb_is_a_413() {
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38]; // magic, no content size, 128 KiB window
    let blocks = (1usize << 30) / (128 * 1024);
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = last | (1 << 1) | ((128 * 1024) << 3); // RLE block of 128 KiB
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(b' ');
    }
    assert!(frame.len() < 40_000);
    let (fake, service) = support::setup(&[]).await;
    let reply = service
        .client
        .post(service.url("/v1/systemone"))
        .header("content-type", "application/json")
        .header("content-encoding", "zstd")
        .body(frame)
        .send()
        .await
        .expect("answers");
    assert_eq!(reply.status(), 413);
    let body: Value = reply.json().await.expect("json");
    assert_eq!(body["error"]["code"], "system_one_body_too_large");
    assert_eq!(fake.chat_requests(), 0);
}

/// The SDK's image transport: `multipart/form-data` with a `request` part is read as the
/// JSON body (without one it is a 400).
#[tokio::test]
async fn multipart_bodies_are_read() {
    assert_rows_hold(&multipart_rows()).await;
}

/// The hand-made gzip, zstd and multipart encoders the transport rows rely on produce what
/// they claim (checked against their own invariants, so an ignored transport test is not
/// ignored because of a broken fixture).
#[test]
fn transport_fixtures_are_well_formed() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    let g = gzip_stored(b"hello");
    assert_eq!(&g[..3], &[0x1f, 0x8b, 8]);
    assert_eq!(&g[10..15], &[1, 5, 0, 0xfa, 0xff]);
    assert_eq!(&g[15..20], b"hello");
    let (bomb, inflated) = gzip_bomb(b"{", b'a', 1 + 258 * 2, b"}");
    assert_eq!(inflated, 2 + 1 + 258 * 2);
    assert_eq!(
        u32::from_le_bytes(bomb[bomb.len() - 4..].try_into().expect("4")),
        inflated as u32
    );
    let z = zstd_raw(b"abc");
    assert_eq!(
        z,
        vec![0x28, 0xb5, 0x2f, 0xfd, 0xa0, 3, 0, 0, 0, 0x19, 0, 0, b'a', b'b', b'c']
    );
    let m = String::from_utf8(multipart(&[("request", "application/json", b"{}")])).expect("utf8");
    assert!(
        m.starts_with("--systemone-test-boundary\r\n")
            && m.ends_with("--systemone-test-boundary--\r\n")
    );
}
