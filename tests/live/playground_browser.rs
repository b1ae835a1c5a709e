//! The playground page (`GET /playground`) in a real browser: headless Chromium (Debian's
//! `chromium`, `$SYSTEMONE_CHROMIUM`; `scripts/test.sh` installs it) loads the page from the
//! service on the fake vLLM backend, with an API key configured, and is driven over the
//! DevTools protocol the way a person would use it: typed text, mouse clicks, the Enter key.
//! It proves that
//! - the page is public (no key) and locked down (its content type, a hash-only CSP), and
//!   `/` leads to it;
//! - the API it calls still wants the key: the model list fails until the key is typed,
//!   then fills from `/v1/models`;
//! - the request the page builds from the form is exactly the body a client would send
//!   (key order included), and every drawn bar's probability equals the service's answer
//!   to that body sent directly (1e-9), with the argmax highlighted and `confidence`,
//!   `temperature` and `option_mass` shown with their explanations
//!   (the 200 itself proves the page sent the typed key);
//! - an invalid request (a blank label, submitted with the keyboard) shows the service's
//!   own status, code and message, and no bars;
//! - "Load an example" (a noul, a choice, a score) is drawn the same way;
//! - no script error and no CSP violation happens on the way.
//!
//! With `SYSTEMONE_UPDATE_SCREENSHOT=1` the answered page is saved as `docs/playground.png`.

use crate::support;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use crate::support::fake_vllm::FakeVllm;
use crate::support::require;
use crate::support::{ask_as, Reply, Service};

/// The one key the service accepts.
const KEY: &str = "playground-test-key";
/// How long any one wait (Chromium's start, a CDP reply, a drawn answer) may take.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_draws_the_services_answers_and_its_errors() {
    let chromium = tokio::task::spawn_blocking(Chromium::launch)
        .await
        .expect("launcher");
    let fake = FakeVllm::start().await;
    let service = support::start(support::config(&fake.base_url(), &["--api-keys", KEY])).await;
    the_page_is_public_and_locked_down(&service).await;

    let mut tab = Tab::open(&chromium.devtools_url).await;
    tab.go(&service.url("/")).await;
    enter_the_key(&mut tab).await;
    fill_the_form(&mut tab).await;
    tab.click("#submit").await;
    tab.wait_for("the drawn answers", "output('done')").await;

    let sent = the_sent_body_is_the_expected_one(&mut tab).await;
    let reply = ask_as(&service, Some(KEY), &sent).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    the_bars_are_the_answers(&mut tab, &reply.body, 3 + 2).await;
    the_metrics_are_shown_and_explained(&mut tab, &reply.body).await;
    screenshot(&mut tab).await;

    a_blank_label_shows_the_services_error(&mut tab, &service).await;
    the_example_is_answered(&mut tab, &service).await;
    assert_eq!(
        tab.problems,
        Vec::<String>::new(),
        "script errors or CSP violations"
    );
}

/// What the form is filled with: a choice of three options and a noul with one description.
fn expected_body() -> Value {
    json!({
        "model": "glm-5.3-flash",
        "state": "A customer writes: I was charged twice for the same transfer on Monday.",
        "questions": {
            "team": {"type": "choice", "instructions": "Which team should handle this?",
                     "criteria": {"payments": "wrong or duplicate charges",
                                  "technical": "app and login problems", "human": null}},
            "refund": {"type": "noul", "instructions": "Does the customer ask for money back?",
                       "criteria": {"true": "asks for a refund"}},
        },
        "permutations": 2,
    })
}

async fn the_page_is_public_and_locked_down(service: &Service) {
    let page = support::get(service, "/playground").await;
    assert_eq!(page.status, 200, "the page needs no key");
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").expect("a CSP");
    assert!(
        csp.starts_with("default-src 'self'; script-src 'sha256-"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    let root = service
        .client
        .get(service.url("/"))
        .send()
        .await
        .expect("service answers");
    assert_eq!(root.url().path(), "/playground", "/ leads to the page");
    assert_eq!(root.status(), 200);
    let models = support::get(service, "/v1/models").await;
    assert_eq!(
        models.status, 403,
        "the API still wants the key: {}",
        models.text
    );
}

/// The model list fails without the key (the API's 403, said on the page), then fills once
/// the key is typed.
async fn enter_the_key(tab: &mut Tab) {
    let failed = tab
        .wait_for("the keyless model list to fail", "modelStatus('error')")
        .await;
    assert!(
        failed.as_str().is_some_and(|s| s.contains("403")),
        "{failed}"
    );
    tab.type_into("#api-key", KEY).await;
    tab.click("#reload-models").await;
    tab.wait_for("the model list", "modelStatus('done')").await;
    let names = tab.eval("$$('#model option').map((o) => o.value)").await;
    assert!(
        names
            .as_array()
            .is_some_and(|n| n.contains(&json!("glm-5.3-flash"))),
        "{names}"
    );
    tab.eval("$('#model').value = 'glm-5.3-flash'").await;
}

async fn fill_the_form(tab: &mut Tab) {
    let body = expected_body();
    tab.type_into("#state", body["state"].as_str().expect("state"))
        .await;
    tab.click("#add-choice").await;
    tab.click("#add-noul").await;
    let card = |n: usize, inner: &str| format!("#questions fieldset:nth-of-type({n}) {inner}");
    tab.type_into(&card(1, ".q-id"), "team").await;
    tab.type_into(
        &card(1, ".q-instructions"),
        "Which team should handle this?",
    )
    .await;
    tab.click(&card(1, ".add-row")).await;
    let options = [
        ("payments", "wrong or duplicate charges"),
        ("technical", "app and login problems"),
        ("human", ""),
    ];
    for (i, (label, description)) in options.into_iter().enumerate() {
        let row = |inner: &str| card(1, &format!(".row:nth-of-type({}) {inner}", i + 1));
        tab.type_into(&row(".opt-label"), label).await;
        if !description.is_empty() {
            tab.type_into(&row(".opt-desc"), description).await;
        }
    }
    tab.type_into(&card(2, ".q-id"), "refund").await;
    tab.type_into(
        &card(2, ".q-instructions"),
        "Does the customer ask for money back?",
    )
    .await;
    tab.type_into(&card(2, ".noul-true"), "asks for a refund")
        .await;
    tab.type_into("#permutations", "2").await;
}

/// The body the page sent (as it shows it), which must be the expected one, key order
/// included.
async fn the_sent_body_is_the_expected_one(tab: &mut Tab) -> Value {
    let text = tab.eval("$('#request-json').textContent").await;
    let sent: Value = serde_json::from_str(text.as_str().expect("text")).expect("JSON sent");
    assert_eq!(sent.to_string(), expected_body().to_string());
    sent
}

/// One drawn bar, read from its data attributes.
#[derive(Debug)]
struct Bar {
    question: String,
    option: String,
    probability: f64,
    top: bool,
}

async fn bars(tab: &mut Tab) -> Vec<Bar> {
    let read = tab
        .eval("$$('#output li.bar').map((b) => [b.dataset.question, b.dataset.option, b.dataset.probability, b.dataset.top])")
        .await;
    let text = |v: &Value| v.as_str().expect("a data attribute").to_string();
    read.as_array()
        .expect("bars")
        .iter()
        .map(|b| Bar {
            question: text(&b[0]),
            option: text(&b[1]),
            probability: text(&b[2]).parse().expect("a number"),
            top: text(&b[3]) == "true",
        })
        .collect()
}

/// Each question's options and probabilities as the service answered, in option order
/// (a noul as no, yes).
fn answered(body: &Value) -> Vec<(String, Vec<(String, f64)>)> {
    let answers = body["answers"].as_object().expect("answers");
    answers
        .iter()
        .map(|(id, a)| {
            let options = match a["type"].as_str() {
                Some("noul") => {
                    let yes = a["noul"].as_f64().expect("noul");
                    vec![("no".to_string(), 1.0 - yes), ("yes".to_string(), yes)]
                }
                _ => a["probabilities"]
                    .as_object()
                    .expect("probabilities")
                    .iter()
                    .map(|(k, p)| (k.clone(), p.as_f64().expect("a probability")))
                    .collect(),
            };
            (id.clone(), options)
        })
        .collect()
}

/// Every drawn bar is the service's answer for that option (1e-9), in option order, and the
/// one highlighted per question is the argmax of the service's probabilities (ties: the
/// first), which for a choice is its `choice`.
async fn the_bars_are_the_answers(tab: &mut Tab, body: &Value, count: usize) {
    let drawn = bars(tab).await;
    assert_eq!(drawn.len(), count, "{drawn:?}");
    let mut rest = drawn.iter();
    for (question, options) in answered(body) {
        let best = argmax(&options);
        for (i, (option, p)) in options.iter().enumerate() {
            let bar = rest.next().expect("a bar for every option");
            assert_eq!(
                (&bar.question, &bar.option),
                (&question, option),
                "{drawn:?}"
            );
            assert!((bar.probability - p).abs() < 1e-9, "{bar:?} vs {p}");
            assert_eq!(
                bar.top,
                i == best,
                "highlighted = argmax: {bar:?} in {drawn:?}"
            );
        }
        if let Some(choice) = body["answers"][&question]["choice"].as_str() {
            assert_eq!(options[best].0, choice, "{question}");
        }
    }
    assert!(rest.next().is_none(), "{drawn:?} vs {body}");
}

/// The first of the most probable options.
fn argmax(options: &[(String, f64)]) -> usize {
    (0..options.len()).fold(0, |best, i| {
        if options[i].1 > options[best].1 {
            i
        } else {
            best
        }
    })
}

/// "Load an example" fills a noul, a choice of three and a score of three levels; its
/// answers are drawn like the others (the score's bars keyed by level).
async fn the_example_is_answered(tab: &mut Tab, service: &Service) {
    tab.click("#load-example").await;
    tab.click("#submit").await;
    tab.wait_for("the example's answers", "output('done')")
        .await;
    let text = tab.eval("$('#request-json').textContent").await;
    let sent: Value = serde_json::from_str(text.as_str().expect("text")).expect("JSON sent");
    let kinds: Vec<&Value> = sent["questions"]
        .as_object()
        .expect("questions")
        .values()
        .map(|q| &q["type"])
        .collect();
    assert_eq!(kinds, [&json!("noul"), &json!("choice"), &json!("score")]);
    let reply = ask_as(service, Some(KEY), &sent).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    the_bars_are_the_answers(tab, &reply.body, 2 + 3 + 3).await;
}

async fn the_metrics_are_shown_and_explained(tab: &mut Tab, body: &Value) {
    let shown = tab
        .eval("$$('#output [data-answer]').map((s) => [s.dataset.answer, ...$$('dd[data-metric]', s).map((d) => [d.dataset.metric, d.dataset.value, d.parentElement.title])])")
        .await;
    let shown = shown.as_array().expect("answer sections");
    assert_eq!(shown.len(), 2, "{shown:?}");
    for section in shown {
        let id = section[0].as_str().expect("id");
        let metrics = section.as_array().expect("section");
        assert_eq!(metrics.len(), 4, "{section}");
        for m in &metrics[1..] {
            let name = m[0].as_str().expect("metric");
            let value: f64 = m[1].as_str().expect("value").parse().expect("number");
            let want = body["answers"][id][name]
                .as_f64()
                .expect("the service's value");
            assert!(
                (value - want).abs() < 1e-9,
                "{id} {name}: {value} vs {want}"
            );
            let title = m[2].as_str().unwrap_or("");
            assert!(
                title.len() > 40,
                "{id} {name} is explained in place: {title:?}"
            );
        }
    }
    tab.click("#explain summary").await;
    let explained = tab
        .wait_for(
            "the open explanation",
            "$('#explain').open && $('#explain').innerText",
        )
        .await;
    let explained = explained.as_str().unwrap_or("");
    for words in [
        "1 − H(p)/ln n",
        "calibration temperature",
        "fell on the options",
    ] {
        assert!(explained.contains(words), "{words:?} in {explained:?}");
    }
}

/// Always taken (so the path stays working); written to `docs/` only when asked.
async fn screenshot(tab: &mut Tab) {
    tab.eval("window.scrollTo(0, 0)").await;
    let (png, _, _) = tab.screenshot_page().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    if std::env::var_os("SYSTEMONE_UPDATE_SCREENSHOT").is_some_and(|v| v == "1") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/playground.png");
        std::fs::write(&path, png).expect("write the screenshot");
    }
}

/// Clears the first label (select all, Backspace) and submits with the keyboard: the page
/// shows the service's 422 for exactly the body it sent, and no bars.
async fn a_blank_label_shows_the_services_error(tab: &mut Tab, service: &Service) {
    let label = "#questions fieldset:nth-of-type(1) .row:nth-of-type(1) .opt-label";
    tab.eval(&format!("$({}).select()", json!(label))).await;
    tab.key("Backspace", 8, None).await;
    tab.eval("$('#submit').focus()").await;
    tab.key("Enter", 13, Some("\r")).await;
    tab.wait_for("the error", "output('error')").await;
    let text = tab.eval("$('#request-json').textContent").await;
    let sent: Value = serde_json::from_str(text.as_str().expect("text")).expect("JSON sent");
    assert_eq!(
        sent["questions"]["team"]["criteria"][""],
        json!("wrong or duplicate charges")
    );
    let direct: Reply = ask_as(service, Some(KEY), &sent).await;
    assert_eq!(direct.status, 422, "{}", direct.text);
    let shown = tab
        .eval("[$('#error').dataset.status, $('#error').dataset.code, $('#error .message').textContent, $$('#output li.bar').length]")
        .await;
    assert_eq!(
        shown,
        json!(["422", direct.body["error"]["code"], direct.message(), 0]),
        "{}",
        direct.text
    );
}

// ---------------------------------------------------------------------------------------
// Chromium and its DevTools protocol.
// ---------------------------------------------------------------------------------------

/// A headless Chromium with its own profile directory; killed (and the profile removed)
/// when dropped, whatever the test's outcome.
pub(crate) struct Chromium {
    child: Child,
    profile: PathBuf,
    /// The browser's DevTools websocket (`ws://127.0.0.1:<port>/devtools/browser/<id>`).
    pub(crate) devtools_url: String,
}

/// `$SYSTEMONE_CHROMIUM`, else `chromium` on the PATH; a missing browser fails the test
/// at once, naming `scripts/test.sh` (which installs Debian's package and sets it).
fn chromium_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromium"))
            .find(|p| p.is_file())
    });
    match (std::env::var_os("SYSTEMONE_CHROMIUM"), on_path) {
        (None, Some(found)) => found,
        _ => {
            let path = PathBuf::from(require("SYSTEMONE_CHROMIUM", "scripts/test.sh"));
            assert!(
                path.is_file(),
                "SYSTEMONE_CHROMIUM={} is not a file",
                path.display()
            );
            path
        }
    }
}

impl Chromium {
    pub(crate) fn launch() -> Self {
        let binary = chromium_binary();
        let profile = std::env::temp_dir().join(format!(
            "systemone-chromium-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&profile).expect("profile dir");
        let mut child = Command::new(&binary)
            .args(CHROMIUM_FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stderr = child.stderr.take().expect("stderr");
        let mut chromium = Chromium {
            child,
            profile,
            devtools_url: String::new(),
        };
        chromium.devtools_url = devtools_url(stderr);
        chromium
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Headless, on loopback, and quiet: no sandbox (the tests run as root), no GPU, none of
/// the browser's own traffic (updates, sync, metrics), and no name resolves but 127.0.0.1,
/// so nothing the page or the browser asks for can leave the machine.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--metrics-recording-only",
    "--no-proxy-server",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--window-size=1280,900",
];

/// Reads Chromium's stderr until "DevTools listening on ws://…" (the port it chose), then
/// keeps draining it on its thread so the browser never blocks on a full pipe.
fn devtools_url(stderr: std::process::ChildStderr) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("DevTools listening on ") {
                let _ = tx.send(Ok(url.trim().to_string()));
            } else if seen.len() < 40 {
                seen.push(line);
            }
        }
        let _ = tx.send(Err(seen.join("\n")));
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(Ok(url)) => url,
        Ok(Err(stderr)) => panic!("Chromium exited before listening:\n{stderr}"),
        Err(_) => panic!("Chromium did not print its DevTools address within {PATIENCE:?}"),
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One page target, driven through the browser's websocket (flat sessions: each command
/// carries the page's `sessionId`).
pub(crate) struct Tab {
    socket: Socket,
    next_id: u64,
    session: Option<String>,
    /// Script exceptions and console or security errors the page reported.
    pub(crate) problems: Vec<String>,
}

impl Tab {
    pub(crate) async fn open(devtools_url: &str) -> Self {
        let (socket, _) = tokio_tungstenite::connect_async(devtools_url)
            .await
            .expect("DevTools websocket");
        let mut tab = Tab {
            socket,
            next_id: 0,
            session: None,
            problems: Vec::new(),
        };
        let target = tab
            .call("Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let attached = tab
            .call(
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .await;
        tab.session = attached["sessionId"].as_str().map(str::to_string);
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            tab.call(domain, json!({})).await;
        }
        let viewport =
            json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false});
        tab.call("Emulation.setDeviceMetricsOverride", viewport)
            .await;
        tab
    }

    /// Sends one command and returns its result; events that arrive meanwhile are checked
    /// for problems.
    /// A PNG of the whole page at its CSS size (rounded up to whole pixels), and that size.
    pub(crate) async fn screenshot_page(&mut self) -> (Vec<u8>, u32, u32) {
        let metrics = self.call("Page.getLayoutMetrics", json!({})).await;
        let size = &metrics["cssContentSize"];
        let (width, height) = (
            size["width"].as_f64().expect("width").ceil() as u32,
            size["height"].as_f64().expect("height").ceil() as u32,
        );
        let clip = json!({"x": 0, "y": 0, "width": width, "height": height, "scale": 1});
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true, "clip": clip}),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("data"))
            .expect("base64");
        (png, width, height)
    }

    pub(crate) async fn call(&mut self, method: &str, params: Value) -> Value {
        self.try_call(method, params)
            .await
            .unwrap_or_else(|error| panic!("{method}: {error}"))
    }

    /// Like [`Tab::call`], with the protocol's error (say, no page context during a
    /// navigation) returned.
    async fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .expect("DevTools send");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("{method}: no reply within {PATIENCE:?}"))
                .unwrap_or_else(|| panic!("{method}: the DevTools socket closed"))
                .expect("DevTools frame");
            let Message::Text(text) = frame else { continue };
            let reply: Value = serde_json::from_str(text.as_str()).expect("DevTools JSON");
            if reply["id"] != json!(id) {
                self.note(&reply);
            } else if let Some(error) = reply.get("error") {
                return Err(error.clone());
            } else {
                return Ok(reply["result"].clone());
            }
        }
    }

    /// Keeps what would be a bug in the page: an uncaught exception, a console error, a
    /// CSP violation. (A failed request is not one: the tests cause 403s and 422s.)
    fn note(&mut self, event: &Value) {
        let params = &event["params"];
        match event["method"].as_str() {
            Some("Runtime.exceptionThrown") => self.problems.push(params.to_string()),
            Some("Runtime.consoleAPICalled") if params["type"] == "error" => {
                self.problems.push(params.to_string())
            }
            Some("Log.entryAdded")
                if params["entry"]["source"] != "network"
                    && params["entry"]["level"] == "error" =>
            {
                self.problems.push(params.to_string())
            }
            _ => {}
        }
    }

    /// Evaluates `expression` in the page and returns its value; it may use the page's `$`
    /// and `$$`, and `output(state)` and `modelStatus(state)`, which read the states the
    /// page marks its answer area and its model list with.
    pub(crate) async fn eval(&mut self, expression: &str) -> Value {
        let result = self.evaluate(expression).await.expect("the page answers");
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    async fn evaluate(&mut self, expression: &str) -> Result<Value, Value> {
        let wrapped = format!(
            "(() => {{ const output = (s) => $('#output').dataset.state === s; \
             const modelStatus = (s) => $('#model-status').dataset.state === s && $('#model-status').textContent; \
             return ({expression}); }})()"
        );
        let params = json!({"expression": wrapped, "returnByValue": true, "awaitPromise": true});
        self.try_call("Runtime.evaluate", params).await
    }

    /// Navigates and waits for the page's script to have run.
    async fn go(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
        self.wait_for(
            "the page",
            "document.readyState === 'complete' && $('#ask') !== null",
        )
        .await;
    }

    /// Polls `expression` until it is truthy (returned), failing after [`PATIENCE`]. While
    /// the page is not there yet (no context, `$` undefined) it reads as false.
    pub(crate) async fn wait_for(&mut self, what: &str, expression: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let value = match self.evaluate(expression).await {
                Ok(result) if result.get("exceptionDetails").is_none() => {
                    result["result"]["value"].clone()
                }
                _ => Value::Null,
            };
            if !matches!(&value, Value::Null | Value::Bool(false)) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {PATIENCE:?}: {expression}; page problems {:?}",
                self.problems
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A real left click in the middle of the element.
    async fn click(&mut self, selector: &str) {
        let at = self
            .eval(&format!(
                "(() => {{ const e = $({}); if (!e) return null; e.scrollIntoView({{block: 'center'}}); \
                 const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
                json!(selector)
            ))
            .await;
        let (Some(x), Some(y)) = (at[0].as_f64(), at[1].as_f64()) else {
            panic!("no element {selector} to click");
        };
        for kind in ["mousePressed", "mouseReleased"] {
            let event = json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1});
            self.call("Input.dispatchMouseEvent", event).await;
        }
    }

    /// Focuses the field, selects what it holds and types `text` over it.
    async fn type_into(&mut self, selector: &str, text: &str) {
        let found = self
            .eval(&format!(
                "(() => {{ const e = $({}); if (!e) return false; e.focus(); e.select(); return true; }})()",
                json!(selector)
            ))
            .await;
        assert_eq!(found, json!(true), "no field {selector}");
        self.call("Input.insertText", json!({"text": text})).await;
    }

    /// Presses and releases one key on the focused element.
    async fn key(&mut self, key: &str, code: u32, text: Option<&str>) {
        let mut down =
            json!({"type": "keyDown", "key": key, "code": key, "windowsVirtualKeyCode": code});
        if let Some(text) = text {
            down["text"] = json!(text);
        }
        self.call("Input.dispatchKeyEvent", down).await;
        let up = json!({"type": "keyUp", "key": key, "code": key, "windowsVirtualKeyCode": code});
        self.call("Input.dispatchKeyEvent", up).await;
    }
}
