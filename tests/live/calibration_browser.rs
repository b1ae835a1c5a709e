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

use serde_json::{json, Value};

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
    let (png, width, height) = tab.screenshot_page().await;
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

/// A decoded PNG, 8 bits a channel.
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

/// Decodes the screenshot with the `png` crate (palette and 16-bit samples brought to 8
/// bits a channel).
fn decode_png(png: &[u8]) -> Image {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(png));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size().expect("the size")];
    let frame = reader.next_frame(&mut pixels).expect("a frame");
    pixels.truncate(frame.buffer_size());
    Image {
        width: frame.width,
        height: frame.height,
        channels: frame.color_type.samples(),
        pixels,
    }
}
