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
    let reply = get_as(service, "/v1/calibration?window=day", Some(bearer)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["window"], "day");
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
    filtered = get_as(&service, "/v1/calibration?window=fortnight", Some(KEY_B)).await;
    assert_error(&filtered, 422, "system_one_bad_ledger_query", "invalid");
    assert!(
        filtered.message().contains("hour, day or week"),
        "{}",
        filtered.text
    );

    // The gauges hold every key's answers, and no key's name.
    service.state.ledger.refresh_quality().await;
    let metrics = get_as(&service, "/metrics", None).await.text;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("systemone_calibration_answers{")
                && l.contains("type=\"noul\"")
                && l.contains("window=\"day\"")
        })
        .unwrap_or_else(|| panic!("a gauge per shape: {metrics}"));
    assert!(line.ends_with(" 4"), "{line}");
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
