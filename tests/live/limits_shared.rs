//! Per-key limits shared by replicas through a real `redis-server` (issue 13).
//!
//! * Three replicas on one Redis, driven concurrently (2,100 requests): a key with
//!   `requests_per_minute = 100` gets exactly 100 answered per window in total, not 300;
//!   the window edge is moved with a test clock the limit store reads (Redis's own clock
//!   cannot be paused), so nothing depends on how fast the machine is.
//! * A `daily_questions = 500` cap holds exactly across the three.
//! * A request refused before any upstream call (the model's token table failed its check)
//!   gives its questions back.
//! * A replica restarted mid-day keeps the day's count, with Redis and with the embedded
//!   `redb` store (`--state-dir`).
//! * Usage: the counters equal the sums of the answered requests' `usage` fields; only the
//!   admin key reads another key's; `systemone usage` prints the same rows.

use crate::support;
use std::sync::atomic::Ordering;

use futures::stream::{self, StreamExt};
use serde_json::{json, Value};

use crate::setup::redis::shared_url;
use crate::setup::redis::{manual_clock, replica, state_with_clock};
use crate::support::bodies::choices;
use crate::support::fake_vllm::FakeVllm;
use crate::support::limits::{config, restart_keeps_the_count, ADMIN, KEY};
use crate::support::replicas::{unique_prefix, used_today};
use crate::support::{ask_as, get_as, Reply, Service};
use systemone::config::ServeConfig;

/// A Tuesday noon, UTC: the test clock's start.
const NOON: u64 = 20_423 * 86_400 + 12 * 3600;

/// `n` requests with `body` as KEY, spread round-robin over `replicas`, `concurrency` at a
/// time; the replies in completion order.
async fn drive(replicas: &[Service], body: &Value, n: usize, concurrency: usize) -> Vec<Reply> {
    stream::iter(0..n)
        .map(|i| ask_as(&replicas[i % replicas.len()], Some(KEY), body))
        .buffer_unordered(concurrency)
        .collect()
        .await
}

/// How many replies have this status and error code (`""`: none).
fn count(replies: &[Reply], status: u16, code: &str) -> usize {
    replies
        .iter()
        .filter(|r| r.status == status && r.body["error"]["code"].as_str().unwrap_or("") == code)
        .count()
}

/// Flags for a replica on Redis `url` under `prefix`, with a bound on a Redis call long
/// enough that the failure policy never steps in: these tests are about exact shared
/// counting, and with every replica, the fake and the driver on 2 shared cores a call can
/// wait more than the 50 ms default for a worker thread (then `fail_open` would count
/// locally, as `tests/live/limits_faults.rs` shows).
fn on_redis<'a>(url: &'a str, prefix: &'a str) -> [&'a str; 6] {
    [
        "--redis-url",
        url,
        "--redis-prefix",
        prefix,
        "--limits-timeout-ms",
        "5000",
    ]
}

/// Asserts that no replica's failure policy decided anything (every call reached Redis).
async fn assert_no_fallback(replicas: &[Service]) {
    for r in replicas {
        let text = support::metrics(r).await;
        assert!(
            !text.contains("systemone_limit_store_decisions_total{"),
            "a replica fell back:\n{text}"
        );
    }
}

/// Three replicas of `config` sharing one Redis, on one test clock.
async fn three_replicas(
    config: &ServeConfig,
) -> (Vec<Service>, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let (clock, micros) = manual_clock(NOON);
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(replica(state_with_clock(config, clock.clone())).await);
    }
    (replicas, micros)
}

/// 2,100 requests over three replicas with `requests_per_minute = 100`: exactly 100
/// answered in the first window (1,200 sent at one instant) and exactly 100 in the next
/// (900 sent a minute later), every other one a 429 `system_one_rate_limited` with a
/// `Retry-After` of 1 to 60 s; only the answered ones reach the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_answer_exactly_the_keys_requests_per_minute() {
    let url = shared_url();
    let fake = FakeVllm::start().await;
    let prefix = unique_prefix();
    let config = config(&fake, "requests_per_minute = 100", &on_redis(&url, &prefix));
    let (replicas, clock) = three_replicas(&config).await;
    let body = choices(1);

    let first = drive(&replicas, &body, 1_200, 48).await;
    assert_eq!(count(&first, 200, ""), 100, "answered in the first window");
    assert_eq!(count(&first, 429, "system_one_rate_limited"), 1_100);
    for refused in first.iter().filter(|r| r.status == 429) {
        assert!((1..=60).contains(&refused.retry_secs()), "{}", refused.text);
    }
    assert_eq!(
        fake.chat_requests(),
        100,
        "refused requests reach no backend"
    );

    clock.fetch_add(60_000_000, Ordering::SeqCst);
    let second = drive(&replicas, &body, 900, 48).await;
    assert_eq!(
        count(&second, 200, ""),
        100,
        "answered in the second window"
    );
    assert_eq!(count(&second, 429, "system_one_rate_limited"), 800);
    assert_eq!(fake.chat_requests(), 200);
    assert_no_fallback(&replicas).await;
}

/// A daily cap of 500 questions over three replicas, 700 one-question requests at once:
/// exactly 500 answered, 200 refused with `system_one_daily_cap`, and Redis's count is 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_cap_holds_exactly_across_replicas() {
    let url = shared_url();
    let fake = FakeVllm::start().await;
    let prefix = unique_prefix();
    let config = config(&fake, "daily_questions = 500", &on_redis(&url, &prefix));
    let (replicas, _clock) = three_replicas(&config).await;
    let replies = drive(&replicas, &choices(1), 700, 48).await;
    assert_eq!(count(&replies, 200, ""), 500);
    assert_eq!(count(&replies, 429, "system_one_daily_cap"), 200);
    assert_eq!(fake.chat_requests(), 500);
    assert_no_fallback(&replicas).await;
    let used = used_today(&replicas[1], KEY).await.expect("Redis answers");
    assert_eq!(used, 500);
}

/// The model's token table does not match the backend's tokenizer, so the pipeline refuses
/// the request after its questions were counted and before any read: a 503
/// `system_one_token_table_mismatch`, and the 3 questions are given back (Redis's count
/// stays 0, and a 3-question cap still admits 3 questions once the table matches).
#[tokio::test]
async fn a_request_refused_before_any_upstream_call_is_refunded() {
    let url = shared_url();
    let fake = FakeVllm::start().await;
    fake.set_token_id_offset(1);
    let prefix = unique_prefix();
    let config = config(&fake, "daily_questions = 3", &on_redis(&url, &prefix));
    let service = replica(systemone::build_state(&config).expect("state")).await;
    let refused = ask_as(&service, Some(KEY), &choices(3)).await;
    refused.assert_code(503, "system_one_token_table_mismatch", "unavailable");
    assert_eq!(fake.chat_requests(), 0, "nothing was sent upstream");
    assert_eq!(
        used_today(&service, KEY).await.expect("Redis answers"),
        0,
        "the 3 questions came back"
    );

    // Another replica whose table matches (a fresh verifier) admits all 3 of them.
    fake.set_token_id_offset(0);
    let healthy = replica(systemone::build_state(&config).expect("state")).await;
    assert_eq!(ask_as(&healthy, Some(KEY), &choices(3)).await.status, 200);
    ask_as(&healthy, Some(KEY), &choices(1)).await.assert_code(
        429,
        "system_one_daily_cap",
        "quota",
    );
}

/// A replica restarted mid-day keeps the day's count in Redis.
#[tokio::test]
async fn a_restarted_replica_keeps_the_days_count_in_redis() {
    let url = shared_url();
    let fake = FakeVllm::start().await;
    let prefix = unique_prefix();
    let config = config(&fake, "daily_questions = 6", &on_redis(&url, &prefix));
    restart_keeps_the_count(&config, &fake).await;
}

/// Sums the `usage` fields of answered replies: [requests, questions, input tokens,
/// cached tokens, upstream requests].
fn sums(replies: &[(usize, Reply)]) -> [u64; 5] {
    let mut total = [0u64; 5];
    for (k, reply) in replies.iter().filter(|(_, r)| r.status == 200) {
        let u = &reply.body["usage"];
        let field = |name: &str| u[name].as_u64().expect("a usage count");
        total[0] += 1;
        total[1] += *k as u64;
        total[2] += field("input_tokens");
        total[3] += field("cached_tokens");
        total[4] += field("upstream_requests");
    }
    total
}

/// Twelve requests of 1 to 4 questions over two replicas sharing Redis: `/v1/usage` (as
/// the admin, and as the key itself) equals the sums of the answers' `usage`; another
/// key's usage is a 403 for a non-admin; bad dates are 422s naming the field and value;
/// `systemone usage` prints the same numbers as CSV.
#[tokio::test]
async fn usage_counters_equal_the_sums_of_the_answers() {
    let url = shared_url();
    let fake = FakeVllm::start().await;
    let prefix = unique_prefix();
    let config = config(
        &fake,
        "questions_per_minute = 1000",
        &on_redis(&url, &prefix),
    );
    let replicas = [
        replica(systemone::build_state(&config).expect("state")).await,
        replica(systemone::build_state(&config).expect("state")).await,
    ];
    let mut replies = Vec::new();
    for i in 0..12 {
        let k = 1 + i % 4;
        replies.push((k, ask_as(&replicas[i % 2], Some(KEY), &choices(k)).await));
    }
    assert!(replies.iter().all(|(_, r)| r.status == 200));
    let expected = sums(&replies);
    assert_eq!(expected[1], 30);

    for bearer in [ADMIN, KEY] {
        let reply = get_as(&replicas[1], "/v1/usage?key=user", Some(bearer)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let rows = reply.body["usage"].as_array().expect("rows");
        assert_eq!(rows.len(), 1, "{}", reply.text);
        let row = &rows[0];
        assert_eq!(row["key"], json!("user"));
        let got = [
            "requests",
            "questions",
            "input_tokens",
            "cached_tokens",
            "upstream_requests",
        ]
        .map(|f| row[f].as_u64().expect("a count"));
        assert_eq!(got, expected, "{}", reply.text);
    }
    let all = get_as(&replicas[0], "/v1/usage", Some(ADMIN)).await;
    assert_eq!(all.body["keys"], json!(["user", "admin"]), "{}", all.text);
    assert_eq!(all.body["total"]["questions"], json!(30), "{}", all.text);

    let forbidden = get_as(&replicas[0], "/v1/usage?key=admin", Some(KEY)).await;
    support::assert_error(&forbidden, 403, "system_one_usage_forbidden", "auth");
    for (query, names) in [
        ("from=2026-02-30", "from"),
        ("to=yesterday", "to"),
        ("from=2026-12-02&to=2026-12-01", "after"),
        ("from=2020-01-01&to=2026-01-01", "366"),
        ("day=2026-12-01", "day"),
    ] {
        let bad = get_as(&replicas[0], &format!("/v1/usage?{query}"), Some(ADMIN)).await;
        support::assert_error(&bad, 422, "system_one_bad_usage_query", "invalid");
        assert!(bad.message().contains(names), "{query}: {}", bad.text);
    }

    let args = systemone::cli::usage::UsageArgs {
        url: replicas[0].url(""),
        api_key: Some(systemone::secret::Secret::new(ADMIN)),
        key: Some("user".into()),
        from: None,
        to: None,
        format: systemone::cli::usage::UsageFormat::Csv,
    };
    let body = systemone::cli::usage::fetch(&args).await.expect("fetches");
    let csv = systemone::cli::usage::render(&body, args.format).expect("renders");
    let line = csv.lines().nth(1).expect("a row");
    let numbers: Vec<u64> = line
        .split(',')
        .skip(2)
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert_eq!(numbers, expected.to_vec(), "{csv}");
    let wrong = systemone::cli::usage::UsageArgs {
        api_key: Some(systemone::secret::Secret::new(KEY)),
        key: Some("admin".into()),
        ..args
    };
    let e = systemone::cli::usage::fetch(&wrong)
        .await
        .expect_err("refused");
    assert!(e.contains("403") && e.contains("own usage"), "{e}");
    assert!(!e.contains(KEY), "{e}");
}

/// Usage in Redis saturates at Redis's largest integer (`ADD_USAGE`'s overflow branch)
/// instead of failing or wrapping: two additions of near-maximal counts read back as the
/// maximum, and the fields that did not overflow as their sums.
#[tokio::test]
async fn redis_usage_saturates_instead_of_wrapping() {
    use systemone::quota::{redis::RedisStore, LimitStore, UsageCounts};
    let url = systemone::secret::Secret::new(shared_url());
    let store =
        RedisStore::open(&url, &unique_prefix(), std::time::Duration::from_secs(2)).expect("opens");
    let huge = UsageCounts {
        requests: 1,
        questions: 2,
        input_tokens: u64::MAX,
        cached_tokens: (i64::MAX as u64) - 5,
        upstream_requests: 3,
    };
    for _ in 0..2 {
        store.record("k", 20_000, huge).await.expect("records");
    }
    let rows = store
        .usage(&["k".to_owned()], 20_000, 20_000)
        .await
        .expect("reads");
    let max = i64::MAX as u64;
    let want = UsageCounts {
        requests: 2,
        questions: 4,
        input_tokens: max,
        cached_tokens: max,
        upstream_requests: 6,
    };
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].counts, want, "{rows:?}");
}

/// Batch lines on Redis count against the daily cap and are charged once per line id, as in
/// the embedded store: a line taken again through a second store on the same prefix (what a
/// crashed and restarted replica is) or the next day counts nothing more; a refund forgets
/// the line (its questions go back to the day it was counted on), which then counts anew; a
/// line refused leaves no marker. Charges given twice (a group committed again after a kill)
/// add once to the caller's usage and once to its batch counters.
#[tokio::test]
async fn redis_counts_and_charges_a_batch_line_once() {
    use std::sync::Arc;
    use systemone::quota::redis::RedisStore;
    use systemone::quota::{Charge, KeyLimits, KeyQuota, LimitStore, Now, Refusal, UsageCounts};
    let url = systemone::secret::Secret::new(shared_url());
    let prefix = unique_prefix();
    let open =
        || RedisStore::open(&url, &prefix, std::time::Duration::from_secs(2)).expect("opens");
    let limits = KeyLimits {
        daily_questions: Some(10),
        ..KeyLimits::default()
    };
    let key = Arc::new(KeyQuota::new("acme".into(), limits));
    let at = |day: u64| Now {
        micros: (day * 86_400 + 10) * 1_000_000,
        server_clock: false,
    };
    let (first, store) = (open(), open());
    async fn take_line(
        store: &RedisStore,
        key: &Arc<KeyQuota>,
        now: Now,
        line: &str,
    ) -> Result<(), String> {
        let verdict = store.take_line_questions(key, 4, now, line).await;
        verdict.expect("answers").map_err(|r| format!("{r:?}"))
    }
    assert_eq!(take_line(&first, &key, at(5), "req_a").await, Ok(()));
    assert_eq!(
        take_line(&store, &key, at(5), "req_a").await,
        Ok(()),
        "a second run"
    );
    assert_eq!(
        take_line(&store, &key, at(6), "req_a").await,
        Ok(()),
        "the next day"
    );
    assert_eq!(store.daily_used(&key, 5).await.expect("reads"), 4);
    assert_eq!(store.daily_used(&key, 6).await.expect("reads"), 0);
    store
        .refund_line(&key, 6, 4, "req_a")
        .await
        .expect("refunds");
    assert_eq!(
        store.daily_used(&key, 5).await.expect("reads"),
        0,
        "its day"
    );
    assert_eq!(take_line(&store, &key, at(6), "req_a").await, Ok(()));
    assert_eq!(take_line(&store, &key, at(6), "req_b").await, Ok(()));
    let over = store
        .take_line_questions(&key, 4, at(6), "req_c")
        .await
        .expect("answers");
    assert!(matches!(over, Err(Refusal::DailyCap { .. })), "{over:?}");
    assert!(
        take_line(&store, &key, at(6), "req_c").await.is_err(),
        "a refused line left no marker"
    );
    assert_eq!(store.daily_used(&key, 6).await.expect("reads"), 8);

    let counts = UsageCounts {
        requests: 1,
        questions: 2,
        input_tokens: 30,
        cached_tokens: 4,
        upstream_requests: 2,
    };
    let charges: Vec<Charge> = ["req_a", "req_b"]
        .iter()
        .map(|id| Charge {
            id: (*id).to_owned(),
            name: "acme".to_owned(),
            counts,
        })
        .collect();
    first.charge(6, &charges).await.expect("charges");
    store.charge(6, &charges).await.expect("charges again");
    store
        .charge(6, &charges[1..])
        .await
        .expect("charges one again");
    let names = [
        "acme".to_owned(),
        systemone::quota::batch_usage_name("acme"),
    ];
    let rows = store.usage(&names, 6, 6).await.expect("reads");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row.counts.to_array(), [2, 4, 60, 8, 4], "{row:?}");
    }
}
