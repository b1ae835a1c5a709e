//! `--token-table auto`: the table is built from the tokenizer the backend serves, with the
//! rules of `systemone tokens build`, and no file is prepared.
//!
//! * Over the fake vLLM (its `/tokenize` is the toy tokenizer `golden-fake` was built
//!   from): the built table holds golden-fake's labels and the numeral schemes the library
//!   builds from the same tokenizer, and answers exactly as that table does; while the
//!   backend cannot tokenize, requests get 503 `system_one_token_table_pending` and no read
//!   is sent, until a retry builds it; a changed tokenizer rebuilds it, and while the
//!   rebuild fails or times out the mismatch stands (503 `system_one_token_table_mismatch`,
//!   `/readyz` "mismatch") until a rebuilt table passes its check; a plain OpenAI host (no
//!   tokenizer endpoint) is refused at startup.
//! * Over the real llama-server with Gemma 3 270M: in the live tier
//!   (`tests/live/auto_table.rs`).
//!
//! The fake tests run in real time (a build is ~10,400 loopback requests, which a paused
//! clock would cut short by jumping to the next timer while they are in flight); every wait
//! polls a condition with a bound. The one test of a rebuild that times out pauses the clock
//! once the first table is built, for the rebuild that never finishes, and resumes it
//! before the build that succeeds.

use crate::support;
use std::time::Duration;

use crate::setup::{assert_mismatch_503, assert_ready};
use crate::support::answers::probabilities;
use crate::support::bodies::one_choice;
use crate::support::fake_vllm::{toy_tokenize, FakeVllm, Fault, PREFIX};
use crate::support::{ask, assert_error, get, Service};
use crate::support::{table_built, until};
use systemone::models::tokens::build::numeral_schemes;
use systemone::models::tokens::TokenTable;

/// The most real time a fake-backed wait may take.
const WITHIN: Duration = Duration::from_secs(120);
/// The most paused time a wait for a rebuild that never answers may take: longer than its
/// bound (`BUILD_TIMEOUTS` check timeouts of 30 s) and the backoff before the next try.
const PAUSED_WITHIN: Duration = Duration::from_secs(600);

/// A service on `backend_url` with `--token-table auto` and `extra` flags.
async fn auto_service(backend_url: &str, extra: &[&str]) -> Service {
    support::start(support::config_with_table(backend_url, "auto", extra)).await
}

/// The ids the fake's toy tokenizer gives `text`.
fn toy_ids(text: &str) -> Vec<u32> {
    toy_tokenize(text)
        .into_iter()
        .map(|id| u32::try_from(id).expect("small id"))
        .collect()
}

/// A request sent as the service starts waits for the table's first build and is answered.
/// Built from the fake's tokenizer, the table holds `golden-fake`'s prefix ids and labels
/// (0–190, ids 1000 + i) and the numeral schemes the library builds from the same
/// tokenizer, records where it came from (no file, so no sha256), and answers a 4-option
/// and a 150-option question (two id slices) exactly as a service on those tables answers
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_table_is_the_serving_tokenizers_and_answers_as_the_file_does() {
    let fake = FakeVllm::start().await;
    let service = auto_service(&fake.base_url(), &[]).await;
    let first = ask(&service, &one_choice(3)).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let table = table_built(&service).await;

    let golden = TokenTable::load("golden-fake").expect("shipped");
    assert_eq!(table.prefix, PREFIX);
    assert_eq!(table.prefix_ids, golden.prefix_ids);
    assert_eq!(table.labels, golden.labels);
    let numerals = numeral_schemes(|t| Ok(toy_ids(t)), PREFIX, &golden.prefix_ids, &[2, 3], 255)
        .expect("the fake's numerals are prefix-free");
    assert_eq!(table.multi_token, numerals);
    assert_eq!(table.tokenizer.name, "vllm glm-5.3-flash");
    assert_eq!(table.tokenizer.sha256, None);
    assert!(
        fake.tokenize_requests() > 10_000,
        "the search tried every integer below 10,000: {} requests",
        fake.tokenize_requests()
    );

    let mut file = golden.clone();
    file.multi_token = numerals;
    let path = support::temp_file("golden-numerals.json", &file.to_json());
    let path = path.to_str().expect("utf-8 path");
    let from_file = support::start(support::config_with_table(&fake.base_url(), path, &[])).await;
    for n in [4, 150] {
        let auto = ask(&service, &one_choice(n)).await;
        assert_eq!(auto.status, 200, "{}", auto.text);
        let file = ask(&from_file, &one_choice(n)).await;
        assert_eq!(file.status, 200, "{}", file.text);
        assert_eq!(
            probabilities(&auto.body["answers"]["q"]),
            probabilities(&file.body["answers"]["q"]),
            "{n} options"
        );
    }
    let ready = get(&service, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    assert_eq!(ready.body["models"][0]["token_table"], "verified");
}

/// While the backend's tokenizer refuses (429), the table cannot be built: once the first
/// attempt has failed, requests get 503 `system_one_token_table_pending` with `Retry-After: 5` and send no read, and
/// `/readyz` is 503. Once the tokenizer answers, a retry (backoff from 1 s) builds the
/// table and the model answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_get_a_503_until_the_table_is_built() {
    let fake = FakeVllm::start().await;
    fake.set_tokenizer_fault(Fault::RateLimited(Some("1".into())));
    let service = auto_service(&fake.base_url(), &[]).await;
    until("a build attempt", WITHIN, || fake.tokenizer_checks() >= 1).await;

    let refused = ask(&service, &one_choice(3)).await;
    assert_error(
        &refused,
        503,
        "system_one_token_table_pending",
        "unavailable",
    );
    assert_eq!(refused.header("retry-after"), Some("5"));
    assert_eq!(fake.chat_requests(), 0, "no read without a table");
    let ready = get(&service, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text);

    fake.set_tokenizer_fault(Fault::None);
    table_built(&service).await;
    let answered = ask(&service, &one_choice(3)).await;
    assert_eq!(answered.status, 200, "{}", answered.text);
}

/// The tokenizer behind the model changes (digit ids shifted by one): the next check finds
/// the mismatch and rebuilds the table from the new tokenizer instead of disabling the
/// model; the rebuilt labels carry the new ids and requests are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tokenizer_rebuilds_the_table() {
    let fake = FakeVllm::start().await;
    let service = auto_service(&fake.base_url(), &["--token-check-interval-secs", "1"]).await;
    let before = table_built(&service).await;
    fake.set_token_id_offset(1);
    until_rebuilt(&service, &before).await;
    let after = table_built(&service).await;
    for (old, new) in before.labels.iter().zip(&after.labels) {
        assert_eq!((new.number, new.id), (old.number, old.id + 1));
    }
    let answered = ask(&service, &one_choice(3)).await;
    assert_eq!(answered.status, 200, "{}", answered.text);
}

/// The tokenizer changes and the rebuild then fails (the texts only a build sends answer
/// 500): the mismatch the check found stands, so nothing is read with the old label ids,
/// until the tokenizer builds again and a retry rebuilds the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rebuild_keeps_the_model_disabled_until_one_succeeds() {
    let fake = FakeVllm::start().await;
    let service = auto_service(&fake.base_url(), &["--token-check-interval-secs", "1"]).await;
    let before = table_built(&service).await;
    let sent = fake.build_requests();
    fake.set_build_fault(Fault::ServerError);
    fake.set_token_id_offset(1);
    assert_disabled_after_a_rebuild(&fake, &service, sent, WITHIN).await;
    fake.set_build_fault(Fault::None);
    assert_rebuilt_and_answering(&service, &before).await;
}

/// The tokenizer changes and the rebuild then times out (the texts only a build sends never
/// answer; paused time crosses the build's bound): the mismatch stands as after a failed
/// rebuild, until the tokenizer answers again and a retry rebuilds the table.
#[tokio::test]
async fn a_rebuild_that_times_out_keeps_the_model_disabled_until_one_succeeds() {
    let fake = FakeVllm::start().await;
    let service = auto_service(&fake.base_url(), &["--token-check-interval-secs", "1"]).await;
    let before = table_built(&service).await;
    tokio::time::pause();
    let sent = fake.build_requests();
    fake.set_build_fault(Fault::Slow(Duration::from_secs(24 * 3600)));
    fake.set_token_id_offset(1);
    assert_disabled_after_a_rebuild(&fake, &service, sent, PAUSED_WITHIN).await;
    tokio::time::resume();
    fake.set_build_fault(Fault::None);
    assert_rebuilt_and_answering(&service, &before).await;
}

/// Waits until a rebuild has reached the texts only a build sends (more than `sent` of
/// them) and has ended, then asserts the model is disabled: a request gets the 503
/// `system_one_token_table_mismatch` and sends no read, `/readyz` is 503 "mismatch".
async fn assert_disabled_after_a_rebuild(
    fake: &FakeVllm,
    service: &Service,
    sent: usize,
    within: Duration,
) {
    let model = service.state.models.default_model();
    until("a rebuild that did not finish", within, || {
        fake.build_requests() > sent && !model.verifier.status().checking
    })
    .await;
    let reads = fake.chat_requests();
    assert_mismatch_503(&ask(service, &one_choice(3)).await);
    assert_eq!(
        fake.chat_requests(),
        reads,
        "no read with a table found wrong"
    );
    assert_ready(service, 503, "mismatch").await;
}

/// Waits until the table is rebuilt from the changed tokenizer: digit ids one higher than
/// `before`'s.
async fn until_rebuilt(service: &Service, before: &TokenTable) {
    let model = service.state.models.default_model();
    until("the table was rebuilt", WITHIN, || {
        model
            .table
            .get()
            .is_some_and(|t| t.labels[0].id == before.labels[0].id + 1)
    })
    .await;
}

/// Waits until the table is rebuilt ([`until_rebuilt`]) and verified, then asserts the
/// model answers and `/readyz` is 200 again.
async fn assert_rebuilt_and_answering(service: &Service, before: &TokenTable) {
    until_rebuilt(service, before).await;
    table_built(service).await;
    let answered = ask(service, &one_choice(3)).await;
    assert_eq!(answered.status, 200, "{}", answered.text);
    assert_ready(service, 200, "verified").await;
}

/// A plain OpenAI-compatible host serves no tokenizer: `auto` is refused at startup, with
/// the reason.
#[test]
fn auto_needs_a_backend_that_tokenizes() {
    let config = support::openai_config("http://127.0.0.1:9/v1", "auto", &[]);
    let err = systemone::build_state(&config).expect_err("refused");
    let message = err.to_string();
    assert!(message.contains("token_table auto"), "{message}");
    assert!(message.contains("vllm or llamacpp"), "{message}");
}
