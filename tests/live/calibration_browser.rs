//! The calibration watch's page (`GET /calibration`) in a real browser: headless Chromium
//! (`$SYSTEMONE_CHROMIUM`, driven as `playground_browser.rs` drives it) loads the page from
//! a service on the fake vLLM backend whose ledger holds answers with outcomes. It proves
//! that
//! - the page draws, per shape, the reliability diagram and the confidence histogram as
//!   real SVG in the page, with exactly as many bars as `GET /v1/calibration` has non-empty
//!   bins for that shape (so a page that drew nothing, or drew other numbers, fails);
//! - its screenshot is a PNG of the page's size that is not blank;
//! - no script error and no CSP violation happens (a listener installed before the page's
//!   own script records every violation; the test shows the listener catches one).

use flate2::read::ZlibDecoder;
use serde_json::{json, Value};
use std::io::Read;

use crate::playground_browser::{Chromium, Tab};
use crate::support;
use crate::support::fake_vllm::FakeVllm;
use crate::support::ledger::{start_with_ledger, Backend, LedgerDb};
use crate::support::Service;

/// Records every CSP violation the page raises, from before its own script runs.
const CSP_LISTENER: &str =
    "window.__csp = []; document.addEventListener('securitypolicyviolation', \
     (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));";

/// The choice's labels, given as outcomes in turn.
const LABELS: [&str; 3] = ["billing", "bug", "other"];

/// The bars drawn in a chart (empty bins draw none).
const BARS: &str = "rect[fill=\"#c6dbef\"]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calibration_page_draws_the_watchs_bins() {
    let chromium = tokio::task::spawn_blocking(Chromium::launch)
        .await
        .expect("launcher");
    let fake = FakeVllm::start().await;
    let db = LedgerDb::new(Backend::Sqlite).await;
    let flags = db.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let service = start_with_ledger(support::config(&fake.base_url(), &flags)).await;
    let shapes = answers_with_outcomes(&service).await;

    let mut tab = Tab::open(&chromium.devtools_url).await;
    tab.call(
        "Page.addScriptToEvaluateOnNewDocument",
        json!({"source": CSP_LISTENER}),
    )
    .await;
    tab.call("Page.navigate", json!({"url": service.url("/calibration")}))
        .await;
    let drawn = format!(
        "document.readyState === 'complete' && document.querySelectorAll('section.shape').length === {}",
        shapes.len()
    );
    tab.wait_for("the drawn shapes", &drawn).await;
    the_charts_hold_the_routes_bins(&mut tab, &shapes).await;
    the_screenshot_is_not_blank(&mut tab).await;
    assert_eq!(tab.eval("window.__csp").await, json!([]), "CSP violations");
    assert_eq!(
        tab.problems,
        Vec::<String>::new(),
        "script errors or CSP violations"
    );
    // The listener does see a violation: an inline script the policy's hashes do not cover.
    tab.eval("(() => { const s = document.createElement('script'); s.textContent = 'window.ran = 1'; document.body.append(s); return true; })()")
        .await;
    tab.wait_for("the planted violation", "window.__csp.length > 0")
        .await;
    assert_eq!(tab.eval("window.ran === undefined").await, json!(true));
}

/// Asks six questions of three types in five states and posts outcomes for most, then
/// returns, per shape `GET /v1/calibration` shows (its order: the page's), the non-empty
/// reliability and histogram bins over the windows the page shows (days).
async fn answers_with_outcomes(service: &Service) -> Vec<(String, usize, usize)> {
    let states = [
        "charged twice",
        "app crashes at login",
        "refund please",
        "slow",
        "nothing works",
    ];
    for (i, state) in states.iter().enumerate() {
        let body = json!({"state": state, "questions": {
            "team": {"type": "choice", "instructions": "Which team?",
                     "criteria": {"billing": "money", "bug": "defects", "other": null}},
            "refund": {"type": "noul", "instructions": "Is a refund asked for?"},
            "urgency": {"type": "score", "instructions": "How urgent?",
                        "criteria": ["Routine", "Soon", "Immediate"]}}});
        let reply = support::ask(service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let id = reply
            .header("x-request-id")
            .expect("a request id")
            .to_owned();
        let outcomes = [
            json!({"question": "team", "outcome": LABELS[i % 3]}),
            json!({"question": "refund", "outcome": i % 2 == 0}),
        ];
        for outcome in outcomes.iter().take(if i == 4 { 1 } else { 2 }) {
            let posted = service
                .client
                .post(service.url(&format!("/v1/ledger/decisions/{id}/outcomes")))
                .json(outcome)
                .send()
                .await
                .expect("service answers");
            assert_eq!(posted.status(), 201);
        }
    }
    let mut figures = Value::Null;
    for _ in 0..500 {
        figures = support::get(service, "/v1/calibration?window=day")
            .await
            .body;
        if sum(&figures["shapes"], "answers") == 15 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let shapes = figures["shapes"].as_array().expect("shapes");
    assert_eq!(shapes.len(), 3, "{figures}");
    shapes
        .iter()
        .map(|s| {
            let windows = s["windows"].as_array().expect("windows");
            let bins = |field: &str, count: &dyn Fn(&Value) -> u64| -> usize {
                (0..15)
                    .filter(|i| windows.iter().map(|w| count(&w[field][*i])).sum::<u64>() > 0)
                    .count()
            };
            let reliability = bins("reliability", &|b| b["count"].as_u64().unwrap_or(0));
            let histogram = bins("confidence_histogram", &|n| n.as_u64().unwrap_or(0));
            (
                s["type"].as_str().expect("type").to_owned(),
                reliability,
                histogram,
            )
        })
        .collect()
}

fn sum(shapes: &Value, field: &str) -> u64 {
    shapes
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["windows"].as_array().into_iter().flatten())
        .filter_map(|w| w[field].as_u64())
        .sum()
}

/// Per shape, in the page's order: its title names the type, its first two charts are SVG
/// elements laid out on the page (not text, not an image), the reliability diagram has a
/// bar per non-empty outcome bin and the histogram one per non-empty confidence bin.
async fn the_charts_hold_the_routes_bins(tab: &mut Tab, shapes: &[(String, usize, usize)]) {
    let read = format!(
        "[...document.querySelectorAll('section.shape')].map((s) => {{ \
           const charts = [...s.querySelectorAll('.charts:not(.drift) > svg')]; \
           return {{ title: s.querySelector('h2').textContent, \
             svg: charts.map((c) => c.namespaceURI === 'http://www.w3.org/2000/svg' && c.getBoundingClientRect().width > 100), \
             bars: charts.map((c) => c.querySelectorAll('{}').length), \
             drift: s.querySelectorAll('.drift > svg').length }}; }})",
        BARS.replace('"', "\\\"")
    );
    let drawn = tab.eval(&read).await;
    let drawn = drawn.as_array().expect("shapes drawn");
    assert_eq!(drawn.len(), shapes.len());
    for (page, (kind, reliability, histogram)) in drawn.iter().zip(shapes) {
        let what = format!("{kind}: {page}");
        assert!(
            page["title"]
                .as_str()
                .is_some_and(|t| t.contains(kind.as_str())),
            "{what}"
        );
        assert_eq!(page["svg"], json!([true, true]), "{what}");
        assert!(*histogram > 0, "{what}: answers in some bin");
        assert_eq!(page["bars"], json!([reliability, histogram]), "{what}");
        assert_eq!(page["drift"], json!(6), "{what}");
    }
    assert!(
        shapes.iter().any(|(_, reliability, _)| *reliability > 0),
        "outcomes drawn in some reliability diagram"
    );
}

/// The page's screenshot: a PNG exactly the page's size with more than one colour over a
/// fair share of it (a blank or a lone-colour page fails).
async fn the_screenshot_is_not_blank(tab: &mut Tab) {
    let metrics = tab.call("Page.getLayoutMetrics", json!({})).await;
    let size = &metrics["cssContentSize"];
    let (width, height) = (
        size["width"].as_f64().expect("width").ceil() as u32,
        size["height"].as_f64().expect("height").ceil() as u32,
    );
    let clip = json!({"x": 0, "y": 0, "width": width, "height": height, "scale": 1});
    let shot = tab
        .call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true, "clip": clip}),
        )
        .await;
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().expect("data"))
        .expect("base64");
    let image = decode_png(&png);
    assert_eq!(
        (image.width, image.height),
        (width, height),
        "the page's size"
    );
    assert!(
        width >= 1000 && height > 900,
        "{width}x{height}: the shapes below the form"
    );
    let background = image.pixel(0, 0);
    let other = (0..image.height)
        .flat_map(|y| (0..image.width).map(move |x| (x, y)))
        .filter(|(x, y)| image.pixel(*x, *y) != background)
        .count();
    let share = other as f64 / (image.width * image.height) as f64;
    assert!(share > 0.01, "only {share:.4} of the screenshot is drawn");
    if std::env::var_os("SYSTEMONE_UPDATE_SCREENSHOT").is_some_and(|v| v == "1") {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/calibration-watch.png");
        std::fs::write(path, &png).expect("write the screenshot");
    }
}

/// An 8-bit RGB or RGBA PNG, unfiltered.
struct Image {
    width: u32,
    height: u32,
    channels: usize,
    pixels: Vec<u8>,
}

impl Image {
    fn pixel(&self, x: u32, y: u32) -> &[u8] {
        let at = (y as usize * self.width as usize + x as usize) * self.channels;
        &self.pixels[at..at + self.channels]
    }
}

/// Reads the chunks, inflates the IDAT data and undoes each row's filter (PNG spec §9).
fn decode_png(png: &[u8]) -> Image {
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let (mut at, mut header, mut data) = (8, None, Vec::new());
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes")) as usize;
        let kind = &png[at + 4..at + 8];
        let body = &png[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => header = Some(body.to_vec()),
            b"IDAT" => data.extend_from_slice(body),
            _ => {}
        }
        at += 12 + len;
    }
    let header = header.expect("IHDR");
    let be = |i: usize| u32::from_be_bytes(header[i..i + 4].try_into().expect("4 bytes"));
    let (width, height) = (be(0), be(4));
    assert_eq!(header[8], 8, "8 bits a channel");
    let channels = match header[9] {
        2 => 3,
        6 => 4,
        other => panic!("colour type {other}"),
    };
    let mut raw = Vec::new();
    ZlibDecoder::new(&data[..])
        .read_to_end(&mut raw)
        .expect("inflate");
    let stride = width as usize * channels;
    assert_eq!(raw.len(), height as usize * (stride + 1), "the rows");
    let mut pixels = vec![0u8; height as usize * stride];
    for y in 0..height as usize {
        let filter = raw[y * (stride + 1)];
        let row = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for i in 0..stride {
            let a = if i >= channels {
                pixels[y * stride + i - channels]
            } else {
                0
            };
            let b = if y > 0 {
                pixels[(y - 1) * stride + i]
            } else {
                0
            };
            let c = if y > 0 && i >= channels {
                pixels[(y - 1) * stride + i - channels]
            } else {
                0
            };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => paeth(a, b, c),
                other => panic!("filter {other}"),
            };
            pixels[y * stride + i] = row[i].wrapping_add(predicted);
        }
    }
    Image {
        width,
        height,
        channels,
        pixels,
    }
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = i16::from(a) + i16::from(b) - i16::from(c);
    let (pa, pb, pc) = (
        (p - i16::from(a)).abs(),
        (p - i16::from(b)).abs(),
        (p - i16::from(c)).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}
