//! `GET /v1/calibration`: the calibration watch's figures come from the ledger's commits
//! and outcomes, a key sees only its own answers' figures (the admin every key's), an
//! outcome replaced counts once, the figures come back after a restart (the start-up
//! read of the ledger), and the gauges carry no key name.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::ledger::{watch_and_check_ece, Backend, LedgerDb};
use crate::support::ledger_suite::{request_id, service, three_questions};
use crate::support::{ask_as, assert_error, get_as, Service};

const KEY_A: &str = "sk-watch-a-5b21";
const KEY_B: &str = "sk-watch-b-5b21";
const ADMIN: &str = "sk-watch-admin-5b21";

/// Answers and outcomes in the newest day window, per question type, as `bearer` sees them.
async fn day(service: &Service, bearer: &str) -> Vec<(String, u64, u64)> {
    newest(service, bearer, "day").await
}

/// Answers and outcomes in the newest `window` (`hour`, `day`, `week`, `recent`), per
/// question type, as `bearer` sees them.
async fn newest(service: &Service, bearer: &str, window: &str) -> Vec<(String, u64, u64)> {
    let path = format!("/v1/calibration?window={window}");
    let reply = get_as(service, &path, Some(bearer)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["window"], window);
    let mut found: Vec<(String, u64, u64)> = reply.body["shapes"]
        .as_array()
        .expect("shapes")
        .iter()
        .map(|s| {
            let now = s["windows"]
                .as_array()
                .expect("windows")
                .last()
                .expect("now");
            (
                s["type"].as_str().expect("type").to_owned(),
                now["answers"].as_u64().expect("answers"),
                now["outcomes"].as_u64().expect("outcomes"),
            )
        })
        .collect();
    found.sort();
    found
}

async fn post_outcome(service: &Service, id: &str, bearer: &str, body: Value) {
    let path = format!("/v1/ledger/decisions/{id}/outcomes");
    let reply = service
        .client
        .post(service.url(&path))
        .bearer_auth(bearer)
        .json(&body)
        .send()
        .await
        .expect("service answers");
    assert_eq!(reply.status(), 201);
}

fn shapes(choice: (u64, u64), noul: (u64, u64), score: (u64, u64)) -> Vec<(String, u64, u64)> {
    vec![
        ("choice".into(), choice.0, choice.1),
        ("noul".into(), noul.0, noul.1),
        ("score".into(), score.0, score.1),
    ]
}

#[tokio::test]
async fn a_key_sees_only_its_own_figures_and_an_outcome_counts_once() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let keys = format!("{KEY_A},{KEY_B},{ADMIN}");
    let flags = ["--api-keys", keys.as_str(), "--admin-key", "key-3"];
    let (fake, service) = service(&db, &flags).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    let mut mine = Vec::new();
    for _ in 0..3 {
        let reply = ask_as(&service, Some(KEY_A), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        mine.push(request_id(&reply));
    }
    let reply = ask_as(&service, Some(KEY_B), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    // One outcome, replaced twice: counted once.
    post_outcome(
        &service,
        &mine[0],
        KEY_A,
        json!({"question": "team", "outcome": "bug"}),
    )
    .await;
    for label in ["billing", "other"] {
        let replace = json!({"question": "team", "outcome": label, "replace": true});
        post_outcome(&service, &mine[0], KEY_A, replace).await;
    }
    assert_eq!(day(&service, KEY_A).await, shapes((3, 1), (3, 0), (3, 0)));
    assert_eq!(day(&service, KEY_B).await, shapes((1, 0), (1, 0), (1, 0)));
    assert_eq!(day(&service, ADMIN).await, shapes((4, 1), (4, 0), (4, 0)));
    let mut filtered = get_as(&service, "/v1/calibration?type=noul&options=2", Some(KEY_B)).await;
    assert_eq!(filtered.body["shapes"].as_array().map(Vec::len), Some(1));
    // The recent window (each shape's last answers) filters by key as the day's does.
    let recent = |bearer| newest(&service, bearer, "recent");
    assert_eq!(recent(KEY_A).await, shapes((3, 1), (3, 0), (3, 0)));
    assert_eq!(recent(KEY_B).await, shapes((1, 0), (1, 0), (1, 0)));
    assert_eq!(recent(ADMIN).await, shapes((4, 1), (4, 0), (4, 0)));
    filtered = get_as(
        &service,
        "/v1/calibration?window=recent&type=choice&class=raw",
        Some(KEY_A),
    )
    .await;
    let only = filtered.body["shapes"].as_array().expect("shapes");
    assert_eq!(only.len(), 1, "{}", filtered.text);
    assert_eq!(only[0]["type"], "choice");
    assert_eq!(only[0]["windows"].as_array().map(Vec::len), Some(1));
    filtered = get_as(&service, "/v1/calibration?window=fortnight", Some(KEY_B)).await;
    assert_error(&filtered, 422, "system_one_bad_ledger_query", "invalid");
    assert!(
        filtered.message().contains("hour, day, week or recent"),
        "{}",
        filtered.text
    );

    // The gauges hold every key's answers, and no key's name.
    service.state.ledger.refresh_quality().await;
    let metrics = get_as(&service, "/metrics", None).await.text;
    for window in ["day", "recent"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("systemone_calibration_answers{")
                    && l.contains("type=\"noul\"")
                    && l.contains(&format!("window=\"{window}\""))
            })
            .unwrap_or_else(|| panic!("a gauge per shape and window: {metrics}"));
        assert!(line.ends_with(" 4"), "{line}");
    }
    let calibration: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("systemone_calibration_"))
        .collect();
    assert!(
        calibration.iter().all(|l| !l.contains("key")),
        "no key in a label: {calibration:?}"
    );

    // A restart reads the ledger back: the same figures, the outcome still once.
    drop(service);
    let (_fake2, again) = service_again(&db, &flags).await;
    let mut seen = Vec::new();
    for _ in 0..500 {
        seen = day(&again, ADMIN).await;
        if seen == shapes((4, 1), (4, 0), (4, 0)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen, shapes((4, 1), (4, 0), (4, 0)));
    assert_eq!(day(&again, KEY_B).await, shapes((1, 0), (1, 0), (1, 0)));
    drop(fake);
}

/// The watch's equal-width ECE is `calibrate check`'s `ECE_w15` on the same answers and
/// outcomes, to 1e-9, with the same count (the live tier checks it on llama-server's).
#[tokio::test]
async fn the_watchs_ece_is_calibrate_checks() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (_fake, service) = service(&db, &[]).await;
    let labels = ["billing", "bug", "other"];
    for i in 0..30 {
        let body = three_questions(&format!("ticket number {i}"), "team", "bug", "Which team?");
        let reply = ask_as(&service, None, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let outcome = json!({"question": "team", "outcome": labels[i % 3]});
        let path = format!("/v1/ledger/decisions/{}/outcomes", request_id(&reply));
        let reply = crate::support::post(&service.client, &service.url(&path), &outcome).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
    }
    let model = "glm-5.3-flash";
    let (watch, check) =
        watch_and_check_ece(&service, "type=choice&class=raw", &db.target, model, model).await;
    assert_eq!((watch.outcomes, check.outcomes), (30, 30));
    assert!(
        (watch.ece - check.ece).abs() < 1e-9 && watch.ece > 0.0,
        "watch {watch:?}, check {check:?}"
    );
}

async fn service_again(db: &LedgerDb, flags: &[&str]) -> (crate::fake_vllm::FakeVllm, Service) {
    service(db, flags).await
}

const REFERENCE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/calibration_watch_reference.json"
));

/// A week in ms, and a Monday (2026-11-02) the reference window starts on.
const WEEK_MS: i64 = 7 * 86_400_000;
const MONDAY_MS: i64 = 1_793_577_600_000;

fn posteriors(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|p| p.as_f64().expect("p"))
                .collect()
        })
        .collect()
}

fn fed(p: &[f64], at_ms: i64) -> watch::Answer<'_> {
    let answer = systemone::calibration::argmax(p);
    watch::Answer {
        key: "k",
        model: "m",
        kind: "choice",
        layout: "accuracy",
        class: watch::Class::Raw,
        at_ms,
        probabilities: p,
        answer,
        confidence: p[answer],
        option_mass: None,
    }
}

use systemone::calibration::watch;

/// The watch's EM prior and CBPE agree with quapy's `EMQ.EM` and nannyml's CBPE within
/// 0.01 on the numbers `scripts/calibration-watch-reference.py` made and ran them on.
#[test]
fn em_prior_and_cbpe_agree_with_quapy_and_nannyml() {
    let fixture: Value = serde_json::from_str(REFERENCE).expect("the fixture parses");
    let mut checked = 0;
    for (name, case) in fixture["cases"].as_object().expect("cases") {
        let reference = posteriors(&case["reference"]);
        let outcomes: Vec<usize> = case["reference_outcomes"]
            .as_array()
            .map(|o| {
                o.iter()
                    .map(|y| y.as_u64().expect("label") as usize)
                    .collect()
            })
            .unwrap_or_default();
        for (analysis_name, analysis) in case["analyses"].as_object().expect("analyses") {
            let w = watch::Watch::new(watch::Settings {
                reference: Some((MONDAY_MS, MONDAY_MS + WEEK_MS)),
                ..watch::Settings::default()
            });
            for (i, p) in reference.iter().enumerate() {
                let a = fed(p, MONDAY_MS + i as i64);
                w.record(&a);
                if let Some(y) = outcomes.get(i) {
                    w.outcome(&a, *y, None);
                }
            }
            let later = MONDAY_MS + WEEK_MS + 3_600_000;
            for (i, p) in posteriors(&analysis["posteriors"]).iter().enumerate() {
                w.record(&fed(p, later + i as i64));
            }
            let shapes = w.figures(&watch::Query::default(), watch::Span::Day, later);
            let now = &shapes[0].windows.last().expect("a window").figures;
            let what = format!("{name}/{analysis_name}");
            let em = now.em_prior.as_ref().expect("an EM prior");
            for (got, want) in em
                .iter()
                .zip(analysis["quapy_em_prior"].as_array().expect("quapy"))
            {
                let want = want.as_f64().expect("number");
                assert!(
                    (got - want).abs() < 0.01,
                    "{what}: EM {em:?} against quapy's {want}"
                );
                checked += 1;
            }
            if let Some(want) = analysis["nannyml_cbpe_accuracy"].as_f64() {
                let got = now.expected_accuracy.expect("answers");
                assert!(
                    (got - want).abs() < 0.01,
                    "{what}: CBPE {got} against nannyml's {want}"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 8,
        "the fixture held its cases ({checked} figures)"
    );
}

/// `calibrate report` with `flags`, off the test's runtime (the command starts its own).
async fn report(flags: Vec<String>) -> Result<String, String> {
    tokio::task::spawn_blocking(move || {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        systemone::cli::calibrate::run(&crate::support::calibrate_args(&flags))
    })
    .await
    .expect("the report ran")
}

/// The report's line for `(type, window start)`, by column name.
fn report_line<'r>(table: &'r str, kind: &str, from: &str) -> Vec<(&'r str, &'r str)> {
    let head: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("model\t"))
        .unwrap_or_else(|| panic!("a header: {table}"))
        .split('\t')
        .collect();
    let line = table
        .lines()
        .find(|l| {
            let cells: Vec<&str> = l.split('\t').collect();
            cells.get(1) == Some(&kind) && cells.get(5) == Some(&from)
        })
        .unwrap_or_else(|| panic!("no line for {kind} {from}: {table}"));
    head.into_iter().zip(line.split('\t')).collect()
}

/// `YYYY-MM-DDTHH:00Z` of a window's start, as the report writes it.
fn window_start(ms: i64) -> String {
    let (day, hour) = (
        ms.div_euclid(86_400_000),
        ms.rem_euclid(86_400_000) / 3_600_000,
    );
    format!("{}T{hour:02}:00Z", systemone::days::date_of(day as u64))
}

/// `calibrate report` over a ledger the service wrote prints, per shape and window, the
/// figures `GET /v1/calibration` shows for the same records (count, accuracy, ECE, Brier,
/// NLL, PSI, CBPE), its filters select as the route's do, and `--svg` draws the
/// reliability diagram through the same code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offline_report_prints_the_routes_figures() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let flags = ["--api-keys", ADMIN, "--admin-key", "key-1"];
    let (fake, service) = service(&db, &flags).await;
    let mut ids = Vec::new();
    for state in [
        "charged twice",
        "app crashes",
        "login fails",
        "refund please",
        "slow",
    ] {
        let body = three_questions(state, "team", "bug", "Which team?");
        let reply = ask_as(&service, Some(ADMIN), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        ids.push(request_id(&reply));
    }
    // Outcomes, one of them replaced (counted once), both right and wrong answers.
    for (id, label) in ids.iter().zip(["bug", "billing", "other", "bug"]) {
        post_outcome(
            &service,
            id,
            ADMIN,
            json!({"question": "team", "outcome": label}),
        )
        .await;
        post_outcome(
            &service,
            id,
            ADMIN,
            json!({"question": "refund", "outcome": true}),
        )
        .await;
    }
    let replace = json!({"question": "team", "outcome": "billing", "replace": true});
    post_outcome(&service, &ids[0], ADMIN, replace).await;
    let mut route = Value::Null;
    for _ in 0..500 {
        route = get_as(&service, "/v1/calibration?window=hour", Some(ADMIN))
            .await
            .body;
        let answers: u64 = route["shapes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["windows"].as_array().into_iter().flatten())
            .filter_map(|w| w["answers"].as_u64())
            .sum();
        if answers == 15 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let svg = crate::support::temp_file("reliability.svg", "");
    let svg_flag = svg.to_str().expect("utf-8").to_owned();
    let args = [
        "report",
        "--from-ledger",
        &db.target,
        "--window",
        "hour",
        "--svg",
        &svg_flag,
    ];
    let table = report(args.map(str::to_owned).to_vec())
        .await
        .expect("reports");
    eprint!("{table}");

    let mut compared = 0;
    for shape in route["shapes"].as_array().expect("shapes") {
        let kind = shape["type"].as_str().expect("type");
        assert_eq!(shape["class"], "raw");
        for w in shape["windows"].as_array().expect("windows") {
            if w["answers"].as_u64() == Some(0) {
                continue;
            }
            let line = report_line(
                &table,
                kind,
                &window_start(w["from_ms"].as_i64().expect("ms")),
            );
            for (column, text) in line.iter().skip(6) {
                let want = &w[*column];
                match want.as_f64() {
                    Some(want) => {
                        let got: f64 = text.parse().unwrap_or_else(|_| panic!("{column}: {text}"));
                        assert!(
                            (got - want).abs() < 1e-6,
                            "{kind} {column}: {got} against {want}"
                        );
                    }
                    None => assert_eq!(*text, "-", "{kind} {column}: the route has none"),
                }
                compared += 1;
            }
        }
    }
    assert!(
        compared >= 3 * 13,
        "every shape's figures compared ({compared})"
    );
    // Every answer and outcome compared: the choice's 4 outcomes (one replaced twice).
    let choice = route["shapes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["type"] == "choice")
        .expect("the choice's shape");
    let total = |field: &str| -> u64 {
        choice["windows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w[field].as_u64())
            .sum()
    };
    assert_eq!((total("answers"), total("outcomes")), (5, 4), "{choice}");

    // The filters select as the route's do; no answer was corrected by the prior.
    let only_noul = [
        "report",
        "--from-ledger",
        &db.target,
        "--type",
        "noul",
        "--options",
        "2",
    ];
    let noul = report(only_noul.map(str::to_owned).to_vec())
        .await
        .expect("reports");
    assert!(noul.lines().any(|l| l.contains("\tnoul\t2\t")), "{noul}");
    assert!(noul.lines().all(|l| !l.contains("\tchoice\t")), "{noul}");
    let prior = ["report", "--from-ledger", &db.target, "--class", "prior"];
    let prior = report(prior.map(str::to_owned).to_vec())
        .await
        .expect("reports");
    assert_eq!(
        prior.lines().last().map(|l| l.starts_with("model\t")),
        Some(true),
        "{prior}"
    );

    // The diagram: the outcomes' bars and one line per shape, drawn by src/draw.rs.
    let drawn = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert!(drawn.starts_with("<svg") && drawn.contains("Reliability (15 equal-width bins)"));
    assert_eq!(drawn.matches("<polyline").count(), 3, "{drawn}");
    assert!(drawn.contains("fill=\"#c6dbef\""), "bars: {drawn}");
    drop(fake);
}

/// Every shape's `below_threshold_share` in the day window once the watch holds `answers`
/// answers in all (its start-up read of the ledger is over).
async fn shares_once_read(watch: &watch::Watch, answers: u64) -> Vec<Option<f64>> {
    let day = || {
        watch.figures(
            &watch::Query::default(),
            watch::Span::Day,
            systemone::ledger::now_ms(),
        )
    };
    for _ in 0..500 {
        let held: u64 = day()
            .iter()
            .filter_map(|s| s.windows.last())
            .map(|w| w.figures.answers)
            .sum();
        if held == answers {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    day()
        .iter()
        .map(|s| {
            let now = &s.windows.last().expect("the day holding now").figures;
            assert_eq!(now.answers, answers / 3, "read back: {s:?}");
            now.below_threshold_share
        })
        .collect()
}

/// The escalation thresholds reach the watch before its start-up read of the ledger
/// (`Ledger::open` takes them), so the answers read back count under `escalate_below`:
/// with a threshold above every confidence, each shape's share is 1. Given only once that
/// read is over (the order this guards against), the same answers have no share at all.
#[tokio::test]
async fn answers_read_at_start_up_count_under_the_escalation_threshold() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (fake, service) = service(&db, &[]).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    for _ in 0..3 {
        let reply = ask_as(&service, None, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let model = service.state.ledger.watch().expect("on").figures(
        &watch::Query::default(),
        watch::Span::Day,
        systemone::ledger::now_ms(),
    )[0]
    .shape
    .model
    .clone();
    drop(service);
    let flags = db.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let config = crate::support::config(&fake.base_url(), &flags);
    let thresholds: std::collections::HashMap<String, f64> = [(model, 1.01)].into();
    let open = |thresholds| {
        let metrics = std::sync::Arc::new(systemone::metrics::Metrics::new());
        systemone::ledger::Ledger::open(&config.ledger, None, metrics, thresholds)
    };

    let ledger = open(thresholds.clone()).await.expect("the ledger opens");
    let watch = ledger.watch().expect("on").clone();
    assert_eq!(shares_once_read(&watch, 9).await, vec![Some(1.0); 3]);
    drop((ledger, watch));

    let ledger = open(Default::default()).await.expect("the ledger opens");
    let watch = ledger.watch().expect("on").clone();
    let read = shares_once_read(&watch, 9).await;
    watch.set_thresholds(thresholds);
    assert_eq!(read, vec![None; 3]);
    assert_eq!(shares_once_read(&watch, 9).await, vec![None; 3]);
    drop(fake);
}
