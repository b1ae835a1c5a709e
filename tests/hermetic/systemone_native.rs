//! The `systemone` dialect against fake native servers of each flavor
//! (`tests/hermetic/setup/fake_native.rs`):
//!
//! * a request is forwarded whole: the caller's fields in the contract's shape, `model` =
//!   the upstream model, the bearer key, Ollama's `keep_alive` from configuration only; the
//!   answer passes through (probabilities, confidence, the upstream's fields, unknown ones
//!   kept), `model` names the model the upstream says served, usage is the upstream's or
//!   estimated and flagged;
//! * every row of the error mapping, per flavor: 429 and 529 → 429 with the capped wait
//!   (`retry-after-ms` read for TypeSafe), 503 → 503, other 5xx → 502, 4xx → 400
//!   `system_one_upstream_rejected` with this service's message, a missing or mistyped
//!   answer field → 502 naming it, a hang → 504, vLLM's 501 → the model refused; no
//!   upstream text reaches the caller;
//! * Ollama's 26-option cap is a 422 before anything is sent;
//! * a usage no request can hold (2^64 − 1 tokens) is a broken protocol, never summed.

use crate::support;
use std::time::Duration;

use crate::setup::fake_native::{FakeNative, Fault, Flavor, CANARY};
use crate::support::native_model;
use crate::support::{ask, get_as};
use crate::support::{assert_error, Reply, Service};
use serde_json::{json, Value};

/// A service whose one model `native` is served by `fake` as a `flavor` upstream.
async fn front(fake: &FakeNative, flavor: &str, extra: &[&str]) -> Service {
    let mut flags = vec!["--flavor", flavor, "--upstream-model", "jev-1.13.0"];
    flags.extend([
        "--backend-api-key",
        "sk-upstream-secret",
        "--request-timeout-secs",
        "20",
    ]);
    flags.extend_from_slice(extra);
    support::start(support::native_config(&fake.base_url(), "native", &flags)).await
}

fn body() -> Value {
    json!({
        "state": {"ticket": "Invoice 1042 was charged twice."},
        "questions": {
            "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "bug": null, "other": null}},
            "refund": {"type": "noul", "instructions": "Refund?"},
            "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "high"]},
            "only": {"type": "choice", "instructions": "One option", "criteria": {"sole": null}}
        },
        "temperature": 1.5,
        "keep_alive": "caller-set"
    })
}

/// The request is forwarded in the contract's shape and the answer passes through.
#[tokio::test]
async fn a_request_is_forwarded_whole_and_the_answer_passes_through() {
    let fake = FakeNative::start(Flavor::TypeSafe).await;
    fake.set_fault(Fault::ExtraField);
    let service = front(&fake, "typesafe", &[]).await;
    let reply = ask(&service, &body()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(fake.requests(), 1);
    let sent = &fake.bodies()[0];
    assert_eq!(sent["model"], json!("jev-1.13.0"));
    assert_eq!(sent["state"], body()["state"]);
    assert_eq!(sent["temperature"], json!(1.5));
    assert!(
        sent.get("keep_alive").is_none(),
        "never the caller's: {sent}"
    );
    let questions = sent["questions"].as_object().expect("questions");
    let ids: Vec<&str> = questions.keys().map(String::as_str).collect();
    assert_eq!(
        ids,
        ["team", "refund", "urgency"],
        "one option is answered here"
    );
    assert_eq!(sent["questions"]["team"], body()["questions"]["team"]);
    assert_eq!(sent["questions"]["urgency"], body()["questions"]["urgency"]);
    assert_eq!(
        fake.auth_headers(),
        vec![Some("Bearer sk-upstream-secret".into())]
    );
    let want = FakeNative::expected(sent);
    assert_eq!(reply.body["model"], json!("jev-1.13.0"));
    for id in ["team", "refund", "urgency"] {
        let (got, want) = (&reply.body["answers"][id], &want["answers"][id]);
        for key in ["choice", "noul", "score", "probabilities", "confidence"] {
            assert_eq!(got.get(key), want.get(key), "{id}.{key}");
        }
        assert_eq!(got["x_explanation"], json!({"why": "kept as sent"}));
        assert!(got.get("temperature").is_none(), "none of ours: {got}");
    }
    assert_eq!(
        reply.body["answers"]["urgency"]["legend"],
        json!({"0": "low", "1": "high"})
    );
    assert_eq!(
        reply.body["answers"]["only"]["probabilities"],
        json!({"sole": 1.0})
    );
    assert_eq!(
        reply.body["usage"],
        json!({"input_tokens": 300, "output_tokens": 3, "upstream_requests": 1,
               "cached_tokens": 0, "evaluated_tokens": 300})
    );
}

/// A model's `--permutations` is what a request that sets none asks for (forwarded, as the
/// caller's own would be); a request's own `permutations` wins, and 1 is not sent.
#[tokio::test]
async fn a_models_default_permutations_applies_when_the_request_sets_none() {
    let fake = FakeNative::start(Flavor::TypeSafe).await;
    let service = front(&fake, "typesafe", &["--permutations", "3"]).await;
    for (set, want) in [(None, Some(3)), (Some(2), Some(2)), (Some(1), None)] {
        let mut req = body();
        if let Some(k) = set {
            req["permutations"] = json!(k);
        }
        let reply = ask(&service, &req).await;
        assert_eq!(reply.status, 200, "{set:?}: {}", reply.text);
        let sent = fake.bodies().pop().expect("forwarded");
        assert_eq!(
            sent.get("permutations"),
            want.map(|k| json!(k)).as_ref(),
            "{set:?}"
        );
    }
}

/// Without the upstream's usage it is estimated and flagged; Ollama gets `keep_alive` from
/// the configuration and images as raw base64.
#[tokio::test]
async fn usage_is_estimated_without_the_upstreams_and_ollama_gets_its_own_fields() {
    let fake = FakeNative::start(Flavor::Ollama).await;
    fake.set_fault(Fault::NoUsage);
    let service = front(&fake, "ollama", &["--keep-alive", "5m", "--vision"]).await;
    let mut b = body();
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    b["images"] = json!([format!("data:image/png;base64,{png}")]);
    let reply = ask(&service, &b).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let usage = &reply.body["usage"];
    assert_eq!(usage["estimated"], json!(true), "{usage}");
    assert_eq!(usage["output_tokens"], json!(3));
    assert!(
        usage["input_tokens"].as_u64().is_some_and(|t| t > 10),
        "{usage}"
    );
    let sent = &fake.bodies()[0];
    assert_eq!(sent["keep_alive"], json!("5m"));
    assert_eq!(sent["images"], json!([png]));
}

/// One row of the mapping: the flavor, the fault, and what the caller gets.
struct Row {
    flavor: Flavor,
    fault: Fault,
    status: u16,
    code: &'static str,
    kind: &'static str,
    retry_after: Option<u64>,
    message_has: &'static str,
}

fn row(flavor: Flavor, fault: Fault, status: u16, code: &'static str, kind: &'static str) -> Row {
    Row {
        flavor,
        fault,
        status,
        code,
        kind,
        retry_after: None,
        message_has: "",
    }
}

impl Row {
    fn retry(self, secs: u64) -> Self {
        Row {
            retry_after: Some(secs),
            ..self
        }
    }
    fn says(self, text: &'static str) -> Self {
        Row {
            message_has: text,
            ..self
        }
    }
}

fn flavor_name(f: Flavor) -> &'static str {
    match f {
        Flavor::TypeSafe => "typesafe",
        Flavor::Ollama => "ollama",
        Flavor::Vllm => "vllm",
    }
}

/// Every row of the mapping, for the flavor whose quirk it is and for the others.
#[tokio::test(start_paused = true)]
async fn every_upstream_failure_maps_to_its_contract_error() {
    use Flavor::*;
    const LIMITED: (&str, &str) = ("system_one_upstream_rate_limited", "rate_limited");
    const REJECTED: (&str, &str) = ("system_one_upstream_rejected", "invalid");
    const FAILED: (&str, &str) = ("system_one_upstream_error", "protocol");
    const BROKEN: (&str, &str) = ("system_one_upstream_protocol", "protocol");
    let rows = vec![
        row(
            TypeSafe,
            Fault::RateLimited { wait_ms: 2500 },
            429,
            LIMITED.0,
            LIMITED.1,
        )
        .retry(3),
        row(
            TypeSafe,
            Fault::Overloaded529 { wait_ms: 400 },
            429,
            LIMITED.0,
            LIMITED.1,
        )
        .retry(1),
        row(
            TypeSafe,
            Fault::Overloaded529 { wait_ms: 600_000 },
            429,
            LIMITED.0,
            LIMITED.1,
        )
        .retry(60),
        row(TypeSafe, Fault::Status(422), 400, REJECTED.0, REJECTED.1).says("status 422"),
        row(TypeSafe, Fault::Status(500), 502, FAILED.0, FAILED.1).says("status 500"),
        row(
            TypeSafe,
            Fault::Status(503),
            503,
            "system_one_upstream_overloaded",
            "unavailable",
        )
        .retry(1),
        row(
            TypeSafe,
            Fault::Status(504),
            504,
            "system_one_upstream_timeout",
            "timeout",
        ),
        row(TypeSafe, Fault::Status(401), 502, FAILED.0, FAILED.1).says("credentials"),
        row(TypeSafe, Fault::MissingField, 502, BROKEN.0, BROKEN.1)
            .says("answers[0].probabilities is missing"),
        row(TypeSafe, Fault::MistypedField, 502, BROKEN.0, BROKEN.1)
            .says("answers[0].confidence must be a finite number, got a string"),
        row(TypeSafe, Fault::NotJson, 502, BROKEN.0, BROKEN.1).says("not JSON"),
        row(
            TypeSafe,
            Fault::Hang,
            504,
            "system_one_upstream_timeout",
            "timeout",
        ),
        row(
            Ollama,
            Fault::RateLimited { wait_ms: 7000 },
            429,
            LIMITED.0,
            LIMITED.1,
        )
        .retry(7),
        row(Ollama, Fault::Status(400), 400, REJECTED.0, REJECTED.1).says("status 400"),
        row(Ollama, Fault::Status(404), 400, REJECTED.0, REJECTED.1).says("status 404"),
        row(Ollama, Fault::Status(413), 400, REJECTED.0, REJECTED.1).says("status 413"),
        row(Ollama, Fault::Status(500), 502, FAILED.0, FAILED.1),
        row(Ollama, Fault::MissingField, 502, BROKEN.0, BROKEN.1)
            .says("answers[0].probabilities is missing"),
        row(
            Ollama,
            Fault::Hang,
            504,
            "system_one_upstream_timeout",
            "timeout",
        ),
        row(
            Vllm,
            Fault::Status(501),
            503,
            "system_one_backend_unsupported",
            "unavailable",
        )
        .says("does not serve model jev-1.13.0 natively")
        .retry(60),
        row(Vllm, Fault::Status(502), 502, FAILED.0, FAILED.1),
        row(
            Vllm,
            Fault::RateLimited { wait_ms: 1000 },
            429,
            LIMITED.0,
            LIMITED.1,
        )
        .retry(1),
        row(Vllm, Fault::MistypedField, 502, BROKEN.0, BROKEN.1).says("answers[0].confidence"),
        row(
            TypeSafe,
            Fault::Model(CANARY.repeat(50_000)),
            502,
            BROKEN.0,
            BROKEN.1,
        )
        .says("model must be an identifier"),
        row(
            Ollama,
            Fault::Model(format!("<b>{CANARY}</b>")),
            502,
            BROKEN.0,
            BROKEN.1,
        )
        .says("model must be an identifier"),
    ];
    for r in rows {
        let fake = FakeNative::start(r.flavor).await;
        fake.set_fault(r.fault.clone());
        let service = front(&fake, flavor_name(r.flavor), &[]).await;
        let what = format!("{:?} {:?}", r.flavor, r.fault);
        let reply = ask(&service, &body()).await;
        assert_error(&reply, r.status, r.code, r.kind);
        assert_eq!(reply.retry_after(), r.retry_after, "{what}: {}", reply.text);
        assert!(
            reply.message().contains(r.message_has),
            "{what}: {}",
            reply.text
        );
        assert!(
            !reply.text.contains(CANARY),
            "{what}: upstream text leaked: {}",
            reply.text
        );
        assert!(
            !reply.text.contains("team"),
            "{what}: a caller's id: {}",
            reply.text
        );
        assert!(fake.requests() >= 1, "{what}: sent");
    }
}

/// A slow upstream inside the deadline is waited for.
#[tokio::test(start_paused = true)]
async fn a_slow_upstream_within_the_deadline_answers() {
    let fake = FakeNative::start(Flavor::TypeSafe).await;
    fake.set_fault(Fault::Slow(Duration::from_secs(15)));
    let service = front(&fake, "typesafe", &[]).await;
    let reply = ask(&service, &body()).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// Ollama takes 2–26 options: a wider question is a 422 here, before anything is sent.
#[tokio::test]
async fn a_question_wider_than_ollama_takes_is_refused_before_sending() {
    let fake = FakeNative::start(Flavor::Ollama).await;
    let service = front(&fake, "ollama", &[]).await;
    let criteria: serde_json::Map<String, Value> =
        (0..27).map(|i| (format!("o{i}"), Value::Null)).collect();
    let b = json!({"state": "s", "questions": {"q": {"type": "choice", "instructions": "Pick", "criteria": criteria}}});
    let reply = ask(&service, &b).await;
    assert_error(&reply, 422, "system_one_too_many_options", "invalid");
    assert!(
        reply
            .message()
            .contains("27 options is more than the 26 options model native takes"),
        "{}",
        reply.text
    );
    assert_eq!(fake.requests(), 0);
}

/// The vLLM flavor's startup probe finds a 501: the model is refused with the reason
/// (`/readyz`), and requests are refused without reaching the upstream.
#[tokio::test]
async fn a_vllm_501_at_startup_refuses_the_model_with_the_reason() {
    let fake = FakeNative::start(Flavor::Vllm).await;
    fake.set_fault(Fault::Status(501));
    let service = front(&fake, "vllm", &[]).await;
    support::settled(&service).await;
    let probes = fake.requests();
    assert_eq!(probes, 1, "one probe");
    let ready = Reply::read(
        service
            .client
            .get(service.url("/readyz"))
            .send()
            .await
            .expect("readyz"),
    )
    .await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    let host = &ready.body["models"][0]["host"];
    assert_eq!(host["probe"], json!("refused"), "{}", ready.text);
    assert!(
        host["refused"].as_str().is_some_and(|r| r.contains("501")),
        "{}",
        ready.text
    );
    let reply = ask(&service, &body()).await;
    assert_error(&reply, 503, "system_one_backend_unsupported", "unavailable");
    assert_eq!(fake.requests(), probes, "refused before sending");
}

/// A chain of three across dialects: a vLLM model falls back to a native one, then to
/// another vLLM model. Each fails in turn; each failure opens its circuit (one is enough
/// here), and the next request goes one step further down the chain.
#[tokio::test(start_paused = true)]
async fn a_fallback_chain_of_three_crosses_dialects_in_order() {
    use crate::support::fake_vllm::{FakeVllm, Fault as VllmFault};
    let (primary, backup) = (FakeVllm::start().await, FakeVllm::start().await);
    let native = FakeNative::start(Flavor::TypeSafe).await;
    primary.set_fault(VllmFault::ServerError);
    native.set_fault(Fault::Status(500));
    let vllm = |name: &str, url: String, extra: &str| {
        format!("\n[[model]]\nname = \"{name}\"\nbackend = \"vllm\"\nbackend_url = \"{url}\"\ntoken_table = \"golden-fake\"\n{extra}\n")
    };
    let registry = [
        vllm(
            "primary",
            primary.base_url(),
            "fallback = [\"native\", \"backup\"]",
        ),
        native_model(
            "native",
            &native.base_url(),
            "upstream_model = \"jev-1.13.0\"",
        ),
        vllm(
            "backup",
            backup.base_url(),
            "upstream_model = \"org/backup\"",
        ),
    ]
    .concat();
    let config = support::registry_config(&registry, &["--circuit-min-calls", "1"]);
    let service = support::start(config).await;
    let question =
        json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "Yes?"}}});
    let steps = [
        (502, "primary", None),
        (502, "native", None),
        (200, "backup", Some("org/backup")),
    ];
    for (status, serving, model) in steps {
        let reply = ask(&service, &question).await;
        assert_eq!(reply.status, status, "{serving}: {}", reply.text);
        if let Some(model) = model {
            assert_eq!(reply.body["model"], json!(model));
            assert_eq!(reply.header("x-systemone-model"), Some(serving));
        }
    }
    assert_eq!(primary.chat_requests(), 1, "refused while open");
    assert_eq!(native.requests(), 1, "refused while open");
    assert_eq!(backup.chat_requests(), 1);
}

/// The old single-name `fallback` still parses; a loop is a startup error naming it.
#[tokio::test]
async fn a_fallback_loop_is_a_startup_error_naming_it() {
    let url = "http://127.0.0.1:9/v1";
    let registry = [
        native_model("a", url, "fallback = \"b\""),
        native_model("b", url, "fallback = [\"c\", \"a\"]"),
        native_model("c", url, ""),
    ]
    .concat();
    assert_eq!(
        crate::setup::registry_error(&registry),
        "fallback loop: a -> b -> a (a chain of fallbacks must end)"
    );
}

/// The in-flight cap holds for forwarded requests too: 8 callers against a slow upstream
/// with `--max-in-flight 2` never have more than 2 requests at the upstream, and all are
/// answered.
#[tokio::test(start_paused = true)]
async fn the_in_flight_cap_bounds_forwarded_requests() {
    let fake = FakeNative::start(Flavor::TypeSafe).await;
    fake.set_fault(Fault::Slow(Duration::from_secs(1)));
    let service = front(&fake, "typesafe", &["--max-in-flight", "2"]).await;
    let request = body();
    let calls = (0..8).map(|_| ask(&service, &request));
    let replies = futures::future::join_all(calls).await;
    assert!(replies.iter().all(|r| r.status == 200), "all answered");
    assert_eq!(fake.requests(), 8);
    assert_eq!(fake.max_in_flight(), 2, "never over the cap, and used");
}

/// A request that names a calibration profile gets raw answers from the native upstream
/// (`temperature: 1`) calibrated here as the read pipeline does: the profile where it covers
/// the question (the shipped `spam` profile, on Gemma 3 270M's nouls), the model's formula
/// elsewhere; the upstream's other fields are kept.
#[tokio::test]
async fn a_named_profile_recalibrates_raw_native_answers() {
    use systemone::calibration::{temper, Calibration};
    let fake = FakeNative::start(Flavor::TypeSafe).await;
    fake.set_fault(Fault::ExtraField);
    let config = support::native_config(&fake.base_url(), "gemma-3-270m", &[]);
    let service = support::start(config).await;
    let body = json!({
        "state": "Subject: WIN a FREE cruise!!!",
        "questions": {
            "spam": {"type": "noul", "instructions": "Is this email spam?"},
            "kind": {"type": "choice", "instructions": "What kind?", "criteria": {"spam": null, "personal": null, "newsletter": null}}
        },
        "calibration": "spam"
    });
    let reply = ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent = &fake.bodies()[0];
    assert_eq!(sent["temperature"], json!(1.0), "raw answers asked for");
    let raw = FakeNative::expected(sent);
    let spam = &reply.body["answers"]["spam"];
    assert_eq!(spam["calibration"], json!("spam"), "{spam}");
    assert!(
        spam["prediction_set"].is_array() && spam["automate"].is_boolean(),
        "{spam}"
    );
    assert_ne!(spam["noul"], raw["answers"]["spam"]["noul"], "recalibrated");
    assert_eq!(spam["x_explanation"], json!({"why": "kept as sent"}));
    let kind = &reply.body["answers"]["kind"];
    let (formula, _) = Calibration::for_model("gemma-3-270m").expect("shipped");
    let t = formula.temperature(3);
    assert_eq!(kind["temperature"].as_f64(), Some(t), "{kind}");
    let raw_p: Vec<f64> = raw["answers"]["kind"]["probabilities"]
        .as_object()
        .expect("probabilities")
        .values()
        .map(|v| v.as_f64().expect("number"))
        .collect();
    let want = temper(&raw_p, t);
    let got: Vec<f64> = kind["probabilities"]
        .as_object()
        .expect("probabilities")
        .values()
        .map(|v| v.as_f64().expect("number"))
        .collect();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
    }
    assert!(kind.get("calibration").is_none(), "no profile covers it");
}

/// An upstream usage no request can hold (2^64 − 1 input tokens) is a broken protocol (502
/// `system_one_upstream_protocol`), not a count: `/v1/usage` adds up the answered requests'
/// usage alone, and never wraps.
#[tokio::test]
async fn an_implausible_upstream_usage_is_a_protocol_error_and_is_not_summed() {
    let fake = FakeNative::start(Flavor::TypeSafe).await;
    let service = front(&fake, "typesafe", &[]).await;
    let mut input_tokens = 0;
    for fault in [Fault::None, Fault::HugeUsage, Fault::None, Fault::HugeUsage] {
        fake.set_fault(fault.clone());
        let reply = ask(&service, &body()).await;
        if fault == Fault::HugeUsage {
            assert_error(&reply, 502, "system_one_upstream_protocol", "protocol");
            continue;
        }
        assert_eq!(reply.status, 200, "{}", reply.text);
        input_tokens += reply.body["usage"]["input_tokens"]
            .as_u64()
            .expect("a count");
    }
    let usage = get_as(&service, "/v1/usage", None).await;
    assert_eq!(usage.status, 200, "{}", usage.text);
    assert_eq!(usage.body["total"]["requests"], json!(2), "{}", usage.text);
    assert_eq!(
        usage.body["total"]["input_tokens"],
        json!(input_tokens),
        "{}",
        usage.text
    );
}
