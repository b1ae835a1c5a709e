//! The flag groups parsed as `systemone serve` parses them, and the registry file read.

use std::time::Duration;

use super::model::checked_date;
use super::*;
use crate::secret::Secret;

/// `systemone serve` as the binary parses it (the serve flags are flattened there).
#[derive(Debug, clap::Parser)]
struct Serve {
    #[command(flatten)]
    config: ServeConfig,
}

fn serve_flags(flags: &[&str]) -> ServeConfig {
    use clap::Parser;
    let args = ["systemone"].iter().chain(flags);
    Serve::try_parse_from(args).expect("parses").config
}

#[test]
fn escalation_needs_a_target_and_exactly_one_rule() {
    let base = serve_flags(&[]).model;
    let with =
        |to: Option<&str>, below: Option<f64>, when: Option<EscalateWhen>, required: bool| {
            ModelConfig {
                escalate_to: to.map(String::from),
                escalate_below: below,
                escalate_when: when,
                escalate_required: required,
                ..base.clone()
            }
            .check()
            .map_err(|e| e.to_string())
        };
    let not_automate = Some(EscalateWhen::NotAutomate);
    assert!(with(None, None, None, false).is_ok());
    assert!(with(Some("b"), Some(0.4), None, true).is_ok());
    assert!(with(Some("b"), None, not_automate, false).is_ok());
    let cases = [
        (
            with(Some("b"), None, None, false),
            "escalate_to needs escalate_below or escalate_when",
        ),
        (
            with(Some("b"), Some(0.4), not_automate, false),
            "cannot both be set",
        ),
        (
            with(Some("b"), Some(0.0), None, false),
            "escalate_below must be a confidence in (0, 1], got 0",
        ),
        (with(Some("b"), Some(1.5), None, false), "got 1.5"),
        (with(None, Some(0.4), None, false), "need escalate_to"),
        (with(None, None, None, true), "need escalate_to"),
    ];
    for (got, want) in cases {
        let err = got.expect_err(want);
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn a_model_default_of_permutations_is_1_to_8() {
    assert_eq!(
        serve_flags(&[]).model.permutations,
        1,
        "the documented default"
    );
    let flags = serve_flags(&["--permutations", "8"]).model;
    assert!(flags.check().is_ok());
    for bad in [0, 9] {
        let err = ModelConfig {
            permutations: bad,
            ..flags.clone()
        }
        .check()
        .expect_err("refused")
        .to_string();
        assert!(
            err.contains(&format!("permutations must be from 1 to 8, got {bad}")),
            "{err}"
        );
    }
}

#[test]
fn release_dates_must_be_written_yyyy_mm_dd() {
    assert_eq!(checked_date("2025-08-14"), Ok(()));
    for bad in [
        "2025-8-14",
        "2025-13-01",
        "2025-00-10",
        "2025-01-32",
        "14.08.2025",
        "",
        "2025-08-1x",
    ] {
        let err = checked_date(bad).expect_err(bad);
        assert!(err.contains("YYYY-MM-DD") && err.contains(bad), "{err}");
    }
}

#[test]
fn secrets_are_redacted_in_debug_output() {
    let cfg = serve_flags(&[
        "--backend-api-key",
        "sk-canary-123",
        "--token-table",
        "golden-fake",
    ]);
    let debug = format!("{cfg:?}");
    assert!(!debug.contains("sk-canary-123"), "{debug}");
    assert!(debug.contains("[redacted]"));
    let model = cfg.model_configs().expect("one model");
    assert!(!format!("{model:?}").contains("sk-canary-123"));
    assert_eq!(
        model[0].backend_api_key.as_ref().map(Secret::expose),
        Some("sk-canary-123")
    );
}

#[test]
fn defaults_match_the_contract() {
    let cfg = serve_flags(&[]);
    assert_eq!(cfg.upstream.max_in_flight, 16);
    assert_eq!(cfg.upstream.read_timeout(), Duration::from_secs(30));
    assert_eq!(cfg.upstream.request_timeout(), Duration::from_secs(120));
    assert_eq!(cfg.limits.max_body_bytes, 24 * 1024 * 1024);
    assert_eq!(cfg.model.max_ids_per_read, 128);
    assert_eq!(cfg.model.rerank_question, DEFAULT_RERANK_QUESTION);
    assert_eq!(cfg.limits.max_rerank_documents, 1000);
}

#[test]
fn defaults_are_the_flags_defaults() {
    let cfg = serve_flags(&[]);
    let limits = Limits::default();
    assert_eq!(limits.max_questions, 64);
    assert_eq!(limits.max_options, 255);
    assert_eq!(limits.max_state_tokens, cfg.limits.max_state_tokens);
    assert_eq!(limits.max_image_total_bytes, 8 * 1024 * 1024);
    let upstream = UpstreamSettings::default();
    assert_eq!(upstream.max_in_flight, cfg.upstream.max_in_flight);
    assert_eq!(upstream.token_check_timeout(), Duration::from_secs(30));
    assert_eq!(CircuitSettings::default(), cfg.admission.circuit());
    assert_eq!(CircuitSettings::default().failure_rate, 50);
}

#[test]
fn admission_defaults_and_api_keys_are_redacted() {
    let cfg = serve_flags(&[
        "--api-keys",
        "sk-gateway-canary-1,sk-gateway-canary-2",
        "--keys-file",
        "/etc/systemone/keys.toml",
    ]);
    let debug = format!("{cfg:?}");
    assert!(!debug.contains("sk-gateway-canary"), "{debug}");
    assert!(debug.contains("keys.toml"));
    let circuit = cfg.admission.circuit();
    assert_eq!(
        (circuit.failure_rate, circuit.min_calls),
        (50, 20),
        "{circuit:?}"
    );
    assert_eq!(circuit.window, Duration::from_secs(60));
    assert_eq!(circuit.cooldown, Duration::from_secs(10));
    assert_eq!(circuit.eject_after, 5);
    assert!(
        circuit.window > cfg.upstream.read_timeout(),
        "the window outlasts a read timeout"
    );
    assert_eq!(cfg.admission.shutdown_grace(), Duration::from_secs(30));
}

#[test]
fn circuit_flags_outside_their_range_are_refused() {
    use clap::Parser;
    for (flag, value) in [
        ("--circuit-failure-rate", "101"),
        ("--circuit-failure-rate", "-1"),
        ("--circuit-min-calls", "0"),
        ("--circuit-window-secs", "0"),
        ("--circuit-window-secs", "NaN"),
        ("--circuit-cooldown-secs", "inf"),
        ("--circuit-cooldown-secs", "-1"),
    ] {
        let parsed = Serve::try_parse_from(["systemone", flag, value]);
        assert!(parsed.is_err(), "{flag} {value} was accepted");
    }
    let circuit = serve_flags(&[
        "--circuit-failure-rate",
        "0",
        "--circuit-min-calls",
        "1",
        "--circuit-window-secs",
        "0.5",
        "--circuit-cooldown-secs",
        "0",
        "--replica-eject-after",
        "0",
    ])
    .admission
    .circuit();
    assert_eq!(
        circuit,
        CircuitSettings {
            failure_rate: 0,
            min_calls: 1,
            window: Duration::from_millis(500),
            cooldown: Duration::ZERO,
            eject_after: 0,
        }
    );
}

#[test]
fn the_limit_store_flags_parse_and_the_redis_url_is_redacted() {
    let cfg = serve_flags(&[
        "--redis-url",
        "redis://:hunter2-canary@127.0.0.1:6379/0",
        "--limits-policy",
        "fail_closed",
        "--limits-timeout-ms",
        "20",
    ]);
    let debug = format!("{cfg:?}");
    assert!(!debug.contains("hunter2-canary"), "{debug}");
    assert_eq!(cfg.limit_store.limits_policy, FailurePolicy::FailClosed);
    assert_eq!(cfg.limit_store.timeout(), Duration::from_millis(20));
    let defaults = LimitStoreSettings::default();
    assert_eq!(defaults.limits_policy, FailurePolicy::FailOpen);
    assert_eq!(defaults.timeout(), Duration::from_millis(50));
    assert_eq!(defaults.redis_prefix, "systemone");
    assert!(defaults.redis_url.is_none() && defaults.state_dir.is_none());
    use clap::Parser;
    let bad = Serve::try_parse_from(["systemone", "--limits-policy", "fail-open"]);
    assert!(bad.is_err(), "only fail_open and fail_closed are accepted");
}

#[test]
fn the_registry_may_name_the_redis_url_and_the_flag_wins() {
    let dir = std::env::temp_dir().join(format!("systemone-cfg-redis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let path = dir.join("models.toml");
    std::fs::write(
        &path,
        "redis_url = \"redis://127.0.0.1:7000\"\n[[model]]\nname = \"a\"\nbackend = \"vllm\"\nbackend_url = \"http://127.0.0.1:1/v1\"\ntoken_table = \"golden-fake\"\n",
    )
    .expect("write");
    let path = path.to_str().expect("utf-8");
    let from_file = serve_flags(&["--config", path]).redis_url().expect("reads");
    assert_eq!(
        from_file.as_ref().map(Secret::expose),
        Some("redis://127.0.0.1:7000")
    );
    let flag = serve_flags(&["--config", path, "--redis-url", "redis://127.0.0.1:7001"])
        .redis_url()
        .expect("reads");
    assert_eq!(
        flag.as_ref().map(Secret::expose),
        Some("redis://127.0.0.1:7001")
    );
    assert_eq!(serve_flags(&[]).redis_url().expect("none"), None);
}

#[test]
fn a_registry_file_describes_several_models() {
    let dir = std::env::temp_dir().join(format!("systemone-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let path = dir.join("models.toml");
    std::fs::write(
        &path,
        r#"
[[model]]
name = "a"
backend = "vllm"
backend_url = "http://127.0.0.1:1/v1"
token_table = "golden-fake"

[[model]]
name = "b"
aliases = ["bee"]
default = true
backend = "vllm"
backend_url = "http://127.0.0.1:2/v1"
upstream_model = "org/b"
token_table = "golden-fake"
layout = "cost"
permutations = 4
label_scheme = "letters"
rerank_question = "Does the document answer the query?"
fallback = "a"

[[model]]
name = "c"
backend = "systemone"
flavor = "ollama"
keep_alive = "5m"
backend_url = "http://127.0.0.1:3/v1"
fallback = ["a", "b"]
escalate_to = "b"
escalate_below = 0.5
"#,
    )
    .expect("write");
    let models = load_registry(&path).expect("loads");
    assert_eq!(models.len(), 3);
    assert_eq!(models[1].fallback, Some(OneOrMany::One("a".into())));
    let c = &models[2];
    assert_eq!(
        c.fallback.as_ref().map(OneOrMany::names),
        Some(vec!["a".into(), "b".into()])
    );
    assert_eq!(
        (c.backend, c.flavor, c.keep_alive.as_deref()),
        (BackendKind::Systemone, Flavor::Ollama, Some("5m"))
    );
    assert_eq!(
        (c.escalate_to.as_deref(), c.escalate_below),
        (Some("b"), Some(0.5))
    );
    assert_eq!(models[0].flavor, Flavor::Typesafe, "the documented default");
    assert_eq!(models[1].layout, Layout::Cost);
    assert_eq!((models[0].permutations, models[1].permutations), (1, 4));
    assert_eq!(models[0].label_scheme, LabelScheme::Numerals);
    assert_eq!(models[1].label_scheme, LabelScheme::Letters);
    assert_eq!(models[1].aliases, vec!["bee".to_string()]);
    assert_eq!(models[0].rerank_question, DEFAULT_RERANK_QUESTION);
    assert_eq!(
        models[1].rerank_question,
        "Does the document answer the query?"
    );
    std::fs::write(&path, "[[model]]\nname = \"a\"\nbogus = 1\n").expect("write");
    assert!(load_registry(&path).is_err());
}

#[test]
fn backend_url_lists_replicas_by_flag_env_or_registry_and_one_url_still_works() {
    let model = |flags: &[&str]| serve_flags(flags).model_configs().expect("models")[0].clone();
    let one = model(&["--backend-url", "http://a:1/v1"]);
    assert_eq!(one.backend_url, ["http://a:1/v1"]);
    assert_eq!(one.replica_load_factor, 1.25);
    assert_eq!(
        one.routing_key_headers,
        ["x-session-id", "x-smg-routing-key"]
    );
    let listed = model(&["--backend-url", "http://a:1/v1,http://b:2/v1"]);
    let repeated = model(&[
        "--backend-url",
        "http://a:1/v1",
        "--backend-url",
        "http://b:2/v1",
    ]);
    assert_eq!(listed.backend_url, ["http://a:1/v1", "http://b:2/v1"]);
    assert_eq!(repeated.backend_url, listed.backend_url);
    let toml = |urls: &str, extra: &str| {
        let text =
            format!("[[model]]\nname = \"a\"\nbackend = \"vllm\"\nbackend_url = {urls}\n{extra}");
        toml::from_str::<crate::config::RegistryFile>(&text).map(|f| f.model[0].clone())
    };
    let file = toml(
        "[\"http://a:1/v1\", \"http://b:2/v1\"]",
        "replica_load_factor = 1.5\nrouting_key_headers = [\"x-route\"]",
    )
    .expect("a list");
    assert_eq!(file.backend_url, listed.backend_url);
    assert_eq!(file.replica_load_factor, 1.5);
    assert_eq!(file.routing_key_headers, ["x-route"]);
    assert_eq!(
        toml("\"http://a:1/v1\"", "").expect("a string").backend_url,
        ["http://a:1/v1"]
    );
    let refused = |c: ModelConfig| c.check().expect_err("refused").to_string();
    let twice = ModelConfig {
        backend_url: vec!["http://a:1/v1".into(), "http://a:1/v1".into()],
        ..one.clone()
    };
    assert!(refused(twice).contains("lists \"http://a:1/v1\" twice"));
    let low = ModelConfig {
        replica_load_factor: 0.9,
        ..one.clone()
    };
    assert!(refused(low).contains("replica_load_factor must be from 1 to 100, got 0.9"));
    let bad_header = ModelConfig {
        routing_key_headers: vec!["bad header".into()],
        ..one.clone()
    };
    assert!(refused(bad_header).contains("\"bad header\" is not a header name"));
    let none = ModelConfig {
        backend_url: vec![],
        ..one
    };
    assert!(refused(none).contains("backend_url must name at least one URL"));
}
