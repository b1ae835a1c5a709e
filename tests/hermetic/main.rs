//! The hermetic tier: every suite that needs only the Rust toolchain. The backends are the
//! fakes in `tests/support/` (or an in-process router), the service runs in this process or
//! as this build's own binary, and every socket is 127.0.0.1:0, so `cargo test --test
//! hermetic` passes offline on a machine where nothing else was installed or started.
//! Suites needing a real llama-server, vLLM, Redis, PostgreSQL, Chromium, an SDK or the real
//! tokenizers are in `tests/live/`; a subject with tests in both keeps one module name in each.

#[path = "../support/fake_server.rs"]
mod fake_server;
#[path = "../support/fake_vllm.rs"]
mod fake_vllm;
mod setup;
#[path = "../support/mod.rs"]
mod support;

mod api_keys;
mod architecture;
mod auto_table;
mod batches;
mod body_memory;
mod book_examples;
mod calibrate_jobs;
mod calibration_watch;
mod circuit;
mod cli_errors;
mod context_window;
mod decisions_validation;
mod edge;
mod escalation;
mod eval_cmd;
mod examples;
mod faults;
mod fleet;
mod flow_refunds;
mod golden;
mod golden_compact;
mod grafana_dashboard;
mod hung_backend;
mod ignored_fields;
mod images;
mod in_flight_exact;
mod keys_in_logs;
mod labels_fake;
mod ledger;
mod ledger_files;
mod ledger_routes;
mod limits_shared;
mod llamacpp_fake;
mod load_faults;
mod openai_fake;
mod prior_correction;
mod prior_decline;
mod prior_offline;
mod prior_sample_layouts;
mod prior_stores;
mod prior_tenants;
mod profiles;
mod reference_pages;
mod rerank_validation;
mod robustness_answers;
mod robustness_malformed;
mod robustness_privacy;
mod signed_tokens;
mod signed_tokens_jwks;
mod systemone_native;
mod tiers_scopes;
mod token_check;
mod token_tables;
mod traces;
mod validation_rules;
mod validation_transport;
mod vllm_fanout;
