//! `docs/grafana-dashboard.json` charts only what `/metrics` exports, and all of it.
//!
//! The dashboard is parsed as Grafana's dashboard JSON model: a `${DS_PROMETHEUS}` input,
//! every panel titled and with at least one PromQL target on that datasource. Every metric
//! name in every panel's `expr` (a histogram's `_bucket`/`_sum`/`_count` series mapped to
//! its base name) must be a metric family in the `/metrics` output of a service that has
//! answered a few requests on the fake vLLM (plain, with a profile, a refused key and a
//! validation error, so every labelled series exists), and every metric the book's metrics
//! page (`docs/operations/metrics.md`) lists must be charted.

use crate::support;
use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::support::{ask_as, get_as};

const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/grafana-dashboard.json");
const METRICS_PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations/metrics.md");

/// Every `systemone_…` identifier in a PromQL expression, outside quoted label values.
fn metric_names(expr: &str) -> Vec<String> {
    let mut unquoted = String::with_capacity(expr.len());
    let mut quote = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
                unquoted.push(' ');
            }
            None if c == '"' || c == '\'' || c == '`' => {
                quote = Some(c);
                unquoted.push(' ');
            }
            None => unquoted.push(c),
        }
    }
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut rest = unquoted.as_str();
    while let Some(start) = rest.find("systemone_") {
        let preceded = rest[..start].chars().next_back().is_some_and(ident);
        let tail = &rest[start..];
        let end = tail.find(|c: char| !ident(c)).unwrap_or(tail.len());
        if !preceded {
            out.push(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// The metric families in a Prometheus text exposition, with their types (`# TYPE`).
fn families(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next().expect("a name").to_string();
            let kind = parts.next().expect("a type").to_string();
            (name, kind)
        })
        .collect()
}

/// The metric a PromQL series name belongs to: a histogram's `_bucket`, `_sum` and
/// `_count` series are its family.
fn family_of(series: &str, histograms: &BTreeSet<String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = series.strip_suffix(suffix) {
            if histograms.contains(base) {
                return base.to_string();
            }
        }
    }
    series.to_string()
}

/// The metric names the book's metrics page lists in its `GET /metrics` paragraph.
fn page_metrics() -> BTreeSet<String> {
    let page = std::fs::read_to_string(METRICS_PAGE).expect("docs/operations/metrics.md");
    let row = page
        .lines()
        .find(|l| l.starts_with("`GET /metrics` answers"))
        .expect("the metrics page's `GET /metrics` paragraph");
    row.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| code.strip_prefix("systemone_"))
        .map(|name| {
            let name = name.split('{').next().unwrap_or(name);
            format!("systemone_{name}")
        })
        .collect()
}

/// A service on the fake vLLM that has answered a few requests, so every series exists:
/// an answer (option mass, upstream latency and status, questions and options), an answer
/// covered by the shipped `spam` profile (profile answers), a 422, and a request refused by
/// a key's requests per minute (key requests and rejections), with a Redis limit store
/// that cannot be reached (the limit-store series). Returns its `/metrics`.
async fn metrics_after_traffic() -> String {
    let fake = support::fake_vllm::FakeVllm::start().await;
    let key = "sk-dashboard-test";
    let keys = support::keys_file(&support::key_entry("dash", key, "requests_per_minute = 5"));
    let url = fake.base_url();
    // The default model is the one the shipped `spam` profile covers (its nouls); `cheap`
    // escalates every answer to it, so the escalation series exist.
    let registry = format!(
        "[[model]]\nname = \"gemma-3-270m\"\nbackend = \"vllm\"\nbackend_url = \"{url}\"\n\
         token_table = \"golden-fake\"\n\n[[model]]\nname = \"cheap\"\nbackend = \"vllm\"\n\
         backend_url = \"{url}\"\ntoken_table = \"golden-fake\"\nescalate_to = \"gemma-3-270m\"\n\
         escalate_below = 1.0\n"
    );
    let ledger = support::ledger::LedgerDb::new(support::ledger::Backend::Sqlite)
        .await
        .target;
    let config = support::registry_config(&registry, &ledger_flags(&keys, &ledger));
    let service = support::ledger::start_with_ledger(config).await;
    let key = Some(key);
    let plain = json!({"state": "Subject: WIN a FREE cruise!!!",
        "questions": {"spam": {"type": "noul", "instructions": "Is this email spam?"},
                      "kind": {"type": "choice", "instructions": "What kind of email is it?",
                               "criteria": {"spam": null, "personal": null, "newsletter": null}}}});
    let reply = ask_as(&service, key, &plain).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let id = reply.header("x-request-id").expect("a request id");
    let outcome = service
        .client
        .post(service.url(&format!("/v1/ledger/decisions/{id}/outcomes")))
        .bearer_auth("sk-dashboard-test")
        .json(&json!({"question": "spam", "outcome": true}))
        .send()
        .await
        .expect("answers");
    assert_eq!(outcome.status(), 201);
    service.state.ledger.refresh_quality().await;
    let mut profiled = plain.clone();
    profiled["calibration"] = json!("spam");
    let reply = ask_as(&service, key, &profiled).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["answers"]["spam"]["calibration"], "spam");
    let mut escalated = plain.clone();
    escalated["model"] = json!("cheap");
    let reply = ask_as(&service, key, &escalated).await;
    assert_eq!(
        reply.header("x-systemone-escalated"),
        Some("2"),
        "{}",
        reply.text
    );
    let invalid = ask_as(&service, key, &json!({"state": "s", "questions": {}})).await;
    assert_eq!(invalid.status, 422, "{}", invalid.text);
    let mut refused = None;
    for _ in 0..10 {
        let reply = get_as(&service, "/v1/models", key).await;
        if reply.status == 429 {
            refused = Some(reply);
            break;
        }
    }
    assert!(refused.is_some(), "the key's 5 requests per minute refuse");
    let mut text = support::metrics(&service).await;
    // The calibration watch's drift gauges (PSI, the EM prior's shift) need a reference
    // window that is over: a second service on the same ledger names the first answer's
    // millisecond as its reference, reads the ledger back at start-up, and exports them.
    let store = service.state.ledger.store().expect("the ledger is on");
    let first = store.decision(id).await.expect("reads").expect("on record");
    let reference = format!("{}..{}", first.at_ms, first.at_ms + 1);
    let flags = ["--calibration-reference", reference.as_str()];
    let again = support::ledger::start_with_ledger(support::registry_config(
        &registry,
        &[&ledger_flags(&keys, &ledger)[..], &flags[..]].concat(),
    ))
    .await;
    // The share under the escalation threshold: `serve` hands the watch the models'
    // `escalate_below` (the test harness does not), then an answer of `cheap` counts.
    let watch = again.state.ledger.watch().expect("the watch");
    watch.set_thresholds([("cheap".to_owned(), 1.0)].into_iter().collect());
    let reply = ask_as(&again, key, &escalated).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    for _ in 0..500 {
        again.state.ledger.refresh_quality().await;
        let drift = support::metrics(&again).await;
        if drift.contains("systemone_calibration_confidence_psi{")
            && drift.contains("systemone_calibration_em_prior_shift{")
            && drift.contains("systemone_calibration_below_threshold_share{")
        {
            text.push_str(&drift);
            return text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no drift or threshold gauges once the reference window is over")
}

/// The first service's flags: the keys file, an unreachable Redis, the ledger.
fn ledger_flags<'a>(keys: &'a std::path::Path, ledger: &'a str) -> Vec<&'a str> {
    vec![
        "--keys-file",
        keys.to_str().expect("utf-8"),
        // A Redis that is not there (port 1 is closed): under the default fail_open policy
        // the service serves and counts locally, and the limit-store series exist (calls
        // timed and failed, policy decisions, store down), as they do when Redis is down.
        "--redis-url",
        "redis://127.0.0.1:1",
        // A decision ledger (an SQLite file of this test's own): its commit series, and
        // an outcome for the per-model figures.
        "--ledger",
        ledger,
        "--ledger-key",
        support::ledger::TEST_LEDGER_KEY,
    ]
}

/// The dashboard is Grafana's JSON model with a `${DS_PROMETHEUS}` input; each panel has a
/// title and PromQL targets on that datasource; every metric any `expr` names is exported
/// by `/metrics` (histogram series by their family, and only a histogram's); and every
/// metric the book's metrics page lists is charted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_charts_is_exported_and_every_exported_one_is_charted() {
    let text = std::fs::read_to_string(DASHBOARD).expect("docs/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is valid JSON");
    assert!(
        dashboard["title"].as_str().is_some_and(|t| !t.is_empty()),
        "a title"
    );
    assert!(
        dashboard["schemaVersion"].as_u64().is_some(),
        "a schemaVersion"
    );
    let inputs = dashboard["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS"
            && i["type"] == "datasource"
            && i["pluginId"] == "prometheus"),
        "a DS_PROMETHEUS datasource input: {inputs:?}"
    );

    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    let mut ids = BTreeSet::new();
    let mut charted: Vec<(String, String)> = Vec::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("");
        assert!(!title.is_empty(), "a panel without a title: {panel}");
        assert!(
            ids.insert(panel["id"].as_u64().expect("a panel id")),
            "duplicate id"
        );
        assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        let targets = panel["targets"].as_array().map_or(&[][..], Vec::as_slice);
        assert!(!targets.is_empty(), "panel {title:?} has no target");
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or("");
            assert!(!expr.is_empty(), "panel {title:?}: a target without expr");
            assert_eq!(target["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
            let names = metric_names(expr);
            assert!(!names.is_empty(), "panel {title:?}: {expr} names no metric");
            charted.extend(names.into_iter().map(|n| (title.to_string(), n)));
        }
    }

    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = var["definition"].as_str().unwrap_or("");
        let name = format!("variable {}", var["name"]);
        charted.extend(metric_names(query).into_iter().map(|n| (name.clone(), n)));
    }

    let exported = metrics_after_traffic().await;
    let families = families(&exported);
    let histograms: BTreeSet<String> = families
        .iter()
        .filter(|(_, kind)| kind == "histogram")
        .map(|(name, _)| name.clone())
        .collect();
    let names: BTreeSet<String> = families.into_iter().map(|(name, _)| name).collect();
    let mut used = BTreeSet::new();
    for (title, series) in &charted {
        let family = family_of(series, &histograms);
        assert!(
            names.contains(&family),
            "panel {title:?} charts {series}, which /metrics does not export:\n{exported}"
        );
        assert!(
            series == &family || histograms.contains(&family),
            "panel {title:?}: {series} is a histogram series of a non-histogram"
        );
        if histograms.contains(&family) {
            assert_ne!(
                series, &family,
                "panel {title:?}: a histogram is charted through its _bucket/_sum/_count"
            );
        }
        used.insert(family);
    }

    let listed = page_metrics();
    assert!(
        listed.contains("systemone_requests_total") && listed.len() > 10,
        "the metrics page's list: {listed:?}"
    );
    for name in &listed {
        assert!(
            names.contains(name),
            "docs/operations/metrics.md lists {name}; /metrics lacks it"
        );
        assert!(used.contains(name), "the dashboard does not chart {name}");
    }
}

#[test]
fn metric_names_are_read_from_promql() {
    assert_eq!(
        metric_names(
            "sum by (le) (rate(systemone_a_bucket{x=\"systemone_b\"}[5m])) / x_systemone_c + systemone_d:e"
        ),
        ["systemone_a_bucket", "systemone_d:e"]
    );
}
