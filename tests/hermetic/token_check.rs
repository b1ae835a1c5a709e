//! The live token-table check (`docs/token-tables.md`) and the token limits (`docs/reference/flags.md` and
//! the 503 row), over HTTP against the fake vLLM server.
//!
//! * The check runs in the model's background upkeep task: when the service starts, then
//!   every `--token-check-interval-secs` (600 by default); a first check that cannot
//!   conclude is retried with backoff (1 s doubling to 30 s) until one does. Requests and
//!   `/readyz` never start a check; only a request that arrives before the very first check
//!   finished waits for it, and `/readyz` never waits (section 9).
//! * A mismatch disables the model (503 `system_one_token_table_mismatch` with
//!   `Retry-After`, `/readyz` 503) until a later check passes; a check that cannot conclude
//!   (429, its own 30 s bound, a malformed body, a 5xx) keeps the previous verdict.
//! * The fake's `/tokenize` tokenizes with the toy tokenizer the `golden-fake` table
//!   was built from; `set_token_id_offset` shifts its digit ids to simulate a different
//!   tokenizer served under the same model name; `set_split_digits` makes it split numbers
//!   into single digits, for tables with multi-token numeral labels (section 8).
//!
//! Every check test runs on a paused tokio clock: the 10-minute interval is crossed with
//! `tokio::time::advance`, a background check is awaited by polling the verifier's status
//! in a loop bounded in paused time, and no test sleeps in real time.
//!
//! The limit tests, which need the real Gemma 3 and Qwen 3 `tokenizer.json` files, are in
//! the live tier (`tests/live/token_check.rs`).

use crate::support;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::setup::{assert_mismatch_503, assert_ready};
use crate::support::bodies::choice_about;
use crate::support::fake_vllm::{toy_tokenize, toy_tokenize_split_digits, FakeVllm, Fault};
use crate::support::{ask, assert_answered, get, setup, Service};
use systemone::models::tokens::build::numeral_schemes;
use systemone::models::tokens::verify::{Status, Verdict};
use systemone::models::tokens::TokenTable;

/// The public model name the test configuration serves.
const MODEL: &str = "glm-5.3-flash";
/// The default time between checks.
const INTERVAL: Duration = Duration::from_secs(600);
/// The default bound on one check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// How far (in paused time) to poll for a background check before giving up: longer than
/// the check's own bound, so a check that never answers still finishes (inconclusively).
const CHECK_WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------

/// A small request with one 3-option choice question.
fn request() -> Value {
    choice_about(json!("A customer writes: my invoice is wrong."), 3)
}

/// The default model's verifier status.
fn status(service: &Service) -> Status {
    service.state.models.default_model().verifier.status()
}

/// Asserts that `/metrics` has the line `systemone_token_table_verdict{model=...} value`.
async fn assert_verdict_metric(service: &Service, value: i64) {
    let reply = get(service, "/metrics").await;
    assert_eq!(reply.status, 200);
    let line = format!("systemone_token_table_verdict{{model=\"{MODEL}\"}} {value}");
    assert!(
        reply.text.lines().any(|l| l == line),
        "no line {line:?} in\n{}",
        reply.text
    );
}

/// Waits, on the paused clock, until a check finishes: no check runs and the verifier's
/// verdict or the time of its last finished check differs from `before`. Each round yields
/// and then sleeps 100 ms of paused time, so the loop is bounded by `within` of paused time.
async fn check_finished(service: &Service, before: Status, within: Duration) -> Status {
    let started = Instant::now();
    loop {
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        let now = status(service);
        let moved = now.verdict != before.verdict || now.last_check != before.last_check;
        if moved && !now.checking {
            return now;
        }
        assert!(
            started.elapsed() <= within,
            "no check finished within {within:?} of paused time; status {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lets I/O progress without advancing the paused clock (yields only) until `cond` holds.
async fn until_without_time(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..10_000 {
        if cond() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    cond()
}

/// A service whose first check has passed: one request answered, verdict `verified`.
async fn verified() -> (FakeVllm, Service) {
    let (fake, service) = setup(&[]).await;
    assert_answered(&ask(&service, &request()).await);
    assert_eq!(status(&service).verdict, Verdict::Verified);
    assert_eq!(fake.tokenizer_checks(), 1);
    (fake, service)
}

/// Crosses the interval (the upkeep task starts the next check on its own, no request
/// needed), waits for that check to finish and returns the verifier's status after it,
/// with the paused time the check took.
async fn next_check(fake: &FakeVllm, service: &Service) -> (Status, Duration) {
    let before = status(service);
    let sent = fake.tokenizer_checks();
    let chats = fake.chat_requests();
    tokio::time::advance(INTERVAL).await;
    let started = Instant::now();
    let after = check_finished(service, before, CHECK_WAIT).await;
    assert_eq!(fake.chat_requests(), chats, "a check sends no read");
    assert_eq!(fake.tokenizer_checks(), sent + 1, "one tokenizer check");
    (after, started.elapsed())
}

// ---------------------------------------------------------------------------------------
// 1. A matching table.
// ---------------------------------------------------------------------------------------

/// A matching table: the service checks it once when it starts (one tokenizer request, no
/// read, no request needed), then the first request is answered 200; `/readyz` is 200 with
/// `"token_table": "verified"` and `/metrics` shows verdict 1, neither sending another
/// tokenizer request.
#[tokio::test(start_paused = true)]
async fn a_matching_table_is_verified_once_and_served() {
    let (fake, service) = setup(&[]).await;
    let now = check_finished(&service, status(&service), CHECK_WAIT).await;
    assert_eq!(now.verdict, Verdict::Verified);
    assert!(now.last_check.is_some());
    assert_eq!(fake.tokenizer_checks(), 1);
    assert_eq!(fake.chat_requests(), 0);

    assert_answered(&ask(&service, &request()).await);
    assert_eq!(fake.tokenizer_checks(), 1);
    assert_eq!(fake.chat_requests(), 1);

    assert_ready(&service, 200, "verified").await;
    assert_verdict_metric(&service, 1).await;
    assert_answered(&ask(&service, &request()).await);
    assert_eq!(fake.tokenizer_checks(), 1, "no check is due yet");
}

// ---------------------------------------------------------------------------------------
// 2. The tokenizer changes mid-run.
// ---------------------------------------------------------------------------------------

/// The serving tokenizer changes after the first verified check (digit ids shifted): ten
/// minutes later the background check finds it; requests then get 503
/// `system_one_token_table_mismatch` with `Retry-After` in 1..=60 and no read is sent for
/// them, `/readyz` is 503 "mismatch" and the metric is -1. With the tokenizer restored,
/// requests keep getting the 503 until the next check has passed; then the model answers
/// 200 again and `/readyz` is back to 200.
#[tokio::test(start_paused = true)]
async fn a_changed_tokenizer_disables_the_model_until_a_check_passes() {
    let (fake, service) = verified().await;
    fake.set_token_id_offset(1);

    let (after, _) = next_check(&fake, &service).await;
    assert_eq!(after.verdict, Verdict::Mismatch);

    let chats = fake.chat_requests();
    for _ in 0..3 {
        assert_mismatch_503(&ask(&service, &request()).await);
    }
    assert_eq!(
        fake.chat_requests(),
        chats,
        "a disabled model sends no read"
    );
    assert_ready(&service, 503, "mismatch").await;
    assert_verdict_metric(&service, -1).await;
    assert_eq!(
        fake.tokenizer_checks(),
        2,
        "no check until the interval passes"
    );

    fake.set_token_id_offset(0);
    assert_mismatch_503(&ask(&service, &request()).await);
    let (after, _) = next_check(&fake, &service).await;
    assert_eq!(after.verdict, Verdict::Verified);
    assert_answered(&ask(&service, &request()).await);
    assert_ready(&service, 200, "verified").await;
    assert_verdict_metric(&service, 1).await;
}

// ---------------------------------------------------------------------------------------
// 3. Inconclusive checks.
// ---------------------------------------------------------------------------------------

/// The tokenizer-endpoint faults that make a check inconclusive, in the order tried. A
/// 1-hour delay is cut short by the check's own 30 s bound.
fn inconclusive_faults() -> Vec<Fault> {
    vec![
        Fault::RateLimited(Some("5".into())),
        Fault::Slow(Duration::from_secs(3600)),
        Fault::MalformedJson,
        Fault::ServerError,
    ]
}

/// Inconclusive checks keep a `verified` verdict: after the first check passed, a check
/// answered 429, one that runs into its own 30 s bound (the endpoint takes an hour), one
/// answered with a malformed body and one answered 500 each finish (the last check time
/// moves) without changing the verdict, and requests after each are still answered 200.
/// `/readyz`, though, is 503 after each (`"backend_answered": false`: the backend did not
/// answer its last health probe), and 200 again once a check concludes.
#[tokio::test(start_paused = true)]
async fn inconclusive_checks_keep_a_verified_model_served() {
    let (fake, service) = verified().await;
    assert_eq!(
        get(&service, "/readyz").await.body["models"][0]["backend_answered"],
        json!(true)
    );
    for fault in inconclusive_faults() {
        fake.set_tokenizer_fault(fault.clone());
        let before = status(&service);
        let (after, took) = next_check(&fake, &service).await;
        assert_eq!(after.verdict, Verdict::Verified, "after {fault:?}");
        assert_ne!(after.last_check, before.last_check, "after {fault:?}");
        if matches!(fault, Fault::Slow(_)) {
            assert!(
                took >= CHECK_TIMEOUT && took < CHECK_WAIT,
                "the check's own bound ended it: {took:?}"
            );
        }
        assert_answered(&ask(&service, &request()).await);
        assert_ready(&service, 503, "verified").await;
        let ready = get(&service, "/readyz").await;
        assert_eq!(
            ready.body["models"][0]["backend_answered"],
            json!(false),
            "{}",
            ready.text
        );
    }
    assert_eq!(fake.tokenizer_checks(), 1 + inconclusive_faults().len());
    fake.set_tokenizer_fault(Fault::None);
    let (after, _) = next_check(&fake, &service).await;
    assert_eq!(after.last_check_concluded, Some(true));
    assert_ready(&service, 200, "verified").await;
}

/// Inconclusive checks keep a `mismatch` verdict too: once a check has found the table
/// wrong, later checks answered 429, timed out, malformed or 500 leave the model disabled
/// (503 and no read sent), even though the tokenizer has meanwhile been fixed.
#[tokio::test(start_paused = true)]
async fn inconclusive_checks_keep_a_mismatched_model_disabled() {
    let (fake, service) = verified().await;
    fake.set_token_id_offset(7);
    let (after, _) = next_check(&fake, &service).await;
    assert_eq!(after.verdict, Verdict::Mismatch);
    // Fixed, but no check can conclude.
    fake.set_token_id_offset(0);
    for fault in inconclusive_faults() {
        fake.set_tokenizer_fault(fault.clone());
        let (after, _) = next_check(&fake, &service).await;
        assert_eq!(after.verdict, Verdict::Mismatch, "after {fault:?}");
        let chats = fake.chat_requests();
        assert_mismatch_503(&ask(&service, &request()).await);
        assert_eq!(fake.chat_requests(), chats);
        assert_ready(&service, 503, "mismatch").await;
    }
}

// ---------------------------------------------------------------------------------------
// 4. A slow check does not delay requests.
// ---------------------------------------------------------------------------------------

/// A slow background check does not delay requests: with the tokenizer endpoint taking
/// 20 s, a request sent while the check ten minutes later runs (its tokenizer request has
/// arrived, but no check has finished since) is answered 200 in well under 20 s of paused
/// time; the check then passes 20 s in.
#[tokio::test(start_paused = true)]
async fn a_slow_check_does_not_delay_requests() {
    let (fake, service) = verified().await;
    let slow = Duration::from_secs(20);
    fake.set_tokenizer_fault(Fault::Slow(slow));
    let before = status(&service);
    let sent = fake.tokenizer_checks();
    tokio::time::advance(INTERVAL).await;
    let started = Instant::now();
    assert!(
        until_without_time(|| fake.tokenizer_checks() == sent + 1).await,
        "the check's tokenizer request arrived"
    );
    let before = Status {
        checking: true,
        ..before
    };
    assert_eq!(status(&service), before, "the check runs, not finished");
    let reply = ask(&service, &request()).await;
    let took = started.elapsed();
    assert_answered(&reply);
    assert!(took < Duration::from_secs(1), "the request took {took:?}");
    assert!(started.elapsed() < slow);
    // A second request meanwhile neither waits nor starts another check.
    assert_answered(&ask(&service, &request()).await);
    assert_eq!(fake.tokenizer_checks(), sent + 1);
    assert_eq!(status(&service), before);

    let after = check_finished(&service, before, CHECK_WAIT).await;
    assert_eq!(after.verdict, Verdict::Verified);
    assert!(started.elapsed() >= slow, "{:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------
// 5. The first check.
// ---------------------------------------------------------------------------------------

/// Before any verdict, requests wait for the first check: with the tokenizer endpoint
/// taking 5 s (within the 30 s bound), two concurrent first requests both wait at least
/// 5 s of paused time, share the one check (one tokenizer request) and are answered 200.
#[tokio::test(start_paused = true)]
async fn the_first_request_waits_for_the_first_check() {
    let slow = Duration::from_secs(5);
    let (fake, service) = cold_setup(Fault::Slow(slow)).await;
    let started = Instant::now();
    let body = request();
    let (a, b) = tokio::join!(ask(&service, &body), ask(&service, &body));
    let took = started.elapsed();
    assert_answered(&a);
    assert_answered(&b);
    assert!(took >= slow && took < CHECK_TIMEOUT, "took {took:?}");
    assert_eq!(fake.tokenizer_checks(), 1, "one check for both");
    assert_eq!(status(&service).verdict, Verdict::Verified);
    assert_ready(&service, 200, "verified").await;
}

/// A fake whose tokenizer endpoint has `fault` from the start, and a service in front of
/// it (so the check the service starts with meets the fault).
async fn cold_setup(fault: Fault) -> (FakeVllm, Service) {
    let fake = FakeVllm::start().await;
    fake.set_tokenizer_fault(fault);
    let service = support::start(support::config(&fake.base_url(), &[])).await;
    (fake, service)
}

/// A first check that cannot conclude (429) leaves no verdict, and no verdict is not a
/// mismatch: requests are answered 200, while `/readyz` stays 503 (the table is not
/// verified) and the verdict metric 0.
#[tokio::test(start_paused = true)]
async fn an_inconclusive_first_check_still_serves() {
    let (fake, service) = cold_setup(Fault::RateLimited(None)).await;
    assert_answered(&ask(&service, &request()).await);
    assert!(fake.tokenizer_checks() >= 1);
    let now = status(&service);
    assert_eq!(now.verdict, Verdict::Unchecked);
    assert!(now.last_check.is_some(), "the check did run");
    assert_answered(&ask(&service, &request()).await);
    let ready = get(&service, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    let word = &ready.body["models"][0]["token_table"];
    assert!(
        *word == json!("unchecked") || *word == json!("checking"),
        "{}",
        ready.text
    );
    assert_verdict_metric(&service, 0).await;
}

/// A cold backend: while no check has concluded, the upkeep retries with backoff (1 s,
/// 2 s, 4 s, …, at most 30 s apart) rather than waiting a whole interval, with no request
/// needed; once the tokenizer answers, the model is verified well before the 10-minute
/// mark.
#[tokio::test(start_paused = true)]
async fn a_cold_backend_is_retried_with_backoff_until_a_check_concludes() {
    let (fake, service) = cold_setup(Fault::RateLimited(None)).await;
    let started = Instant::now();
    let mut seen = Vec::new();
    while fake.tokenizer_checks() < 4 {
        assert!(started.elapsed() < Duration::from_secs(60), "{seen:?}");
        let n = fake.tokenizer_checks();
        if seen.last().is_none_or(|(m, _)| *m != n) {
            seen.push((n, started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Attempts 1..4 started at about 0, 1, 3 and 7 s.
    let at = |n: usize| seen.iter().find(|(m, _)| *m == n).map(|(_, t)| *t);
    let (Some(two), Some(three)) = (at(2), at(3)) else {
        panic!("attempts seen: {seen:?}");
    };
    let gap = three - two;
    assert!(
        gap >= Duration::from_secs(2) && gap < Duration::from_secs(3),
        "the third attempt came {gap:?} after the second: {seen:?}"
    );
    assert_eq!(status(&service).verdict, Verdict::Unchecked);
    fake.set_tokenizer_fault(Fault::None);
    let after = check_finished(&service, status(&service), Duration::from_secs(60)).await;
    assert_eq!(after.verdict, Verdict::Verified);
    assert!(started.elapsed() < Duration::from_secs(120));
    assert_ready(&service, 200, "verified").await;
}

// ---------------------------------------------------------------------------------------
// 6. Checks turned off.
// ---------------------------------------------------------------------------------------

/// `--token-check-interval-secs 0` turns checks off: across requests, `/readyz` and more
/// than ten minutes, no tokenizer request is ever sent; requests are answered 200 and
/// `/readyz` is 200 with "disabled" (metric 2).
#[tokio::test(start_paused = true)]
async fn interval_zero_turns_checks_off() {
    let (fake, service) = setup(&["--token-check-interval-secs", "0"]).await;
    assert_answered(&ask(&service, &request()).await);
    assert_ready(&service, 200, "disabled").await;
    tokio::time::advance(INTERVAL * 2).await;
    assert_answered(&ask(&service, &request()).await);
    assert_ready(&service, 200, "disabled").await;
    assert_verdict_metric(&service, 2).await;
    assert_eq!(fake.tokenizer_checks(), 0);
    assert_eq!(status(&service).verdict, Verdict::Disabled);
    assert_eq!(status(&service).last_check, None);
}

// ---------------------------------------------------------------------------------------
// 8. Multi-token labels.
// ---------------------------------------------------------------------------------------

/// Token ids of `text` by the fake's tokenizer (`split`: every digit its own token).
fn toy_ids(text: &str, split: bool) -> Vec<u32> {
    let ids = if split {
        toy_tokenize_split_digits(text)
    } else {
        toy_tokenize(text)
    };
    ids.into_iter()
        .map(|id| u32::try_from(id).expect("small id"))
        .collect()
}

/// The `golden-fake` table (cut to labels 0–9 when `split`, since the split tokenizer has
/// no other single-token numbers) with numeral schemes 00–99 and 000–254 built by the
/// library from the fake's tokenizer, `tamper` applied, written to a temp file.
fn numeral_table(split: bool, tamper: impl FnOnce(&mut TokenTable)) -> (TokenTable, String) {
    let mut table = TokenTable::load("golden-fake").expect("built in");
    if split {
        table.labels.truncate(10);
    }
    table.multi_token = numeral_schemes(
        |text| Ok(toy_ids(text, split)),
        &table.prefix,
        &table.prefix_ids,
        &[2, 3],
        255,
    )
    .expect("the fake's numerals are prefix-free");
    tamper(&mut table);
    let path = support::temp_file("numerals.json", &table.to_json());
    (table, path.to_str().expect("utf-8 path").to_string())
}

/// A service on a fresh fake (splitting digits when `split`) with the table at `path`.
async fn numeral_service(split: bool, path: &str) -> (FakeVllm, Service) {
    let fake = FakeVllm::start().await;
    fake.set_split_digits(split);
    let service = support::start(support::config_with_table(&fake.base_url(), path, &[])).await;
    (fake, service)
}

/// With the golden toy tokenizer, numerals with a leading zero are several tokens (`07` is
/// `0`, `7`; `191` is `19`, `1`) and others one (`42`): a table holding those ids passes
/// the live check, which tokenized the prefix, the 191 single-token labels and all 355
/// multi-token labels.
#[tokio::test(start_paused = true)]
async fn multi_token_labels_are_checked_in_the_same_batch() {
    let (table, path) = numeral_table(false, |_| {});
    let two = &table.multi_token[0];
    assert_eq!(two.labels[7].ids, [1000, 1007]);
    assert_eq!(two.labels[42].ids, [1042]);
    assert!(!two.one_token_per_digit);
    assert_eq!(table.multi_token[1].labels[191].ids, [1019, 1001]);
    assert_eq!(table.multi_token[1].labels[0].ids, [1000, 1000, 1000]);

    let (fake, service) = numeral_service(false, &path).await;
    assert_answered(&ask(&service, &request()).await);
    assert_eq!(status(&service).verdict, Verdict::Verified);
    assert_eq!(fake.tokenizer_checks(), 1, "one tokenizer check");
    assert_eq!(fake.tokenize_requests(), 1 + 191 + 100 + 255);
    assert_ready(&service, 200, "verified").await;
}

/// One id of one multi-token label changed (`07` says `0`, `777` instead of `0`, `7`): the
/// first check finds the mismatch and the model is disabled, 503 and no read sent, though
/// every single-token label still matches.
#[tokio::test(start_paused = true)]
async fn a_changed_multi_token_id_disables_the_model() {
    let (_, path) = numeral_table(false, |t| t.multi_token[0].labels[7].ids[1] = 777);
    let (fake, service) = numeral_service(false, &path).await;
    assert_mismatch_503(&ask(&service, &request()).await);
    assert_eq!(status(&service).verdict, Verdict::Mismatch);
    assert_eq!(fake.chat_requests(), 0, "a disabled model sends no read");
    assert_eq!(fake.tokenize_requests(), 547);
    assert_ready(&service, 503, "mismatch").await;
    assert_verdict_metric(&service, -1).await;
}

/// A tokenizer that splits numbers into digits (as Gemma 3 does): with labels 0–9 and
/// numerals of exactly `width` tokens each, the table is verified. When the serving
/// tokenizer starts merging digits again (the golden toy tokenizer: `42` one token), only
/// multi-token labels differ, and the next check disables the model; once digits are split
/// again, a later check passes and the model answers.
#[tokio::test(start_paused = true)]
async fn digit_split_labels_pass_and_a_tokenizer_that_merges_digits_is_caught() {
    let (table, path) = numeral_table(true, |_| {});
    assert!(table.multi_token.iter().all(|s| s.one_token_per_digit));
    assert_eq!(table.multi_token[1].labels[254].ids, [1002, 1005, 1004]);

    let (fake, service) = numeral_service(true, &path).await;
    assert_answered(&ask(&service, &request()).await);
    assert_eq!(status(&service).verdict, Verdict::Verified);
    assert_eq!(fake.tokenize_requests(), 1 + 10 + 100 + 255);

    fake.set_split_digits(false);
    let (after, _) = next_check(&fake, &service).await;
    assert_eq!(after.verdict, Verdict::Mismatch);
    assert_mismatch_503(&ask(&service, &request()).await);

    fake.set_split_digits(true);
    let (after, _) = next_check(&fake, &service).await;
    assert_eq!(after.verdict, Verdict::Verified);
    assert_answered(&ask(&service, &request()).await);
}

// ---------------------------------------------------------------------------------------
// 9. `/readyz` answers from memory.
// ---------------------------------------------------------------------------------------

/// A backend that accepts connections and never answers: the first check hangs (its
/// bound is an hour here), and `/readyz` answers at once all the same, 503 with
/// `"token_table": "checking"`, in well under 100 ms of paused time (a `/readyz` that
/// waited for the check would take the hour), while the check still runs.
#[tokio::test(start_paused = true)]
async fn readyz_answers_within_100_ms_while_the_backend_hangs() {
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/v1", hung.local_addr().expect("addr"));
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hung.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(socket);
        }
    });
    let config = support::config(&url, &["--token-check-timeout-secs", "3600"]);
    let service = support::start(config).await;
    assert!(
        until_without_time(|| accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1).await,
        "the check connected to the hung backend"
    );
    for _ in 0..3 {
        let started = Instant::now();
        let reply = get(&service, "/readyz").await;
        let took = started.elapsed();
        assert!(took < Duration::from_millis(100), "/readyz took {took:?}");
        assert_eq!(reply.status, 503, "{}", reply.text);
        assert_eq!(
            reply.body["models"][0]["token_table"],
            json!("checking"),
            "{}",
            reply.text
        );
    }
    assert!(status(&service).checking, "the check still runs");
}
