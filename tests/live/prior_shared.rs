//! The position prior shared by replicas through a real `redis-server` (issue 41): one
//! replica learns it, the other, which has read nothing, serves it after the next
//! exchange (corrected at one read, no warm-up sample of its own), and the keys written
//! hold the prefix, the model's name and the shape, nothing a caller sent. A replica that
//! learned while its Redis was down sends all of it once Redis is back.

use std::time::Duration;

use serde_json::json;

use crate::setup::redis::{shared_url, RedisServer};
use crate::support::fake_vllm::FakeVllm;
use crate::support::prior::{
    learn_until_corrected, plant_two, planted, samples, sync_failed, synced,
};
use crate::support::replicas::unique_prefix;
use crate::support::{self, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_prior_through_redis() {
    let url = shared_url();
    let prefix = unique_prefix();
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    let flags = crate::support::prior::syncing(&[
        "--redis-url",
        url.as_str(),
        "--redis-prefix",
        prefix.as_str(),
    ]);
    let one = support::start(support::config(&fake.base_url(), &flags)).await;
    let other = support::start(support::config(&fake.base_url(), &flags)).await;
    let next = learn_until_corrected(&one, 0).await;
    synced(&one, "redis").await;
    let learned = samples(&one);
    assert!(learned >= 4, "{learned}");
    until(
        "the other replica has the prior",
        Duration::from_secs(30),
        || samples(&other) >= learned,
    )
    .await;
    let reads = fake.chat_requests();
    let reply = support::ask(&other, &planted(next, json!({}))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let answer = &reply.body["answers"]["q"];
    assert!(answer.get("prior_correction").is_some(), "{answer}");
    assert_eq!(fake.chat_requests() - reads, 1, "no warm-up sample");

    let client = redis::Client::open(url.as_str()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:prior:*"))
        .query_async(&mut conn)
        .await
        .expect("keys");
    keys.sort();
    let model = format!("{prefix}:prior:{{glm-5.3-flash}}");
    assert_eq!(
        keys,
        [
            format!("{model}:choice/2/accuracy"),
            format!("{model}:shapes")
        ],
        "only the shape's sums and the index"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_replica_learned_while_redis_was_down_reaches_redis() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    let flags = crate::support::prior::syncing(&["--redis-url", url.as_str()]);
    let service = support::start(support::config(&fake.base_url(), &flags)).await;
    learn_until_corrected(&service, 0).await;
    let learned = samples(&service);
    sync_failed(&service, "redis").await;
    server.restart();
    synced(&service, "redis").await;
    let client = redis::Client::open(url.as_str()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let count: f64 = redis::cmd("HGET")
        .arg("systemone:prior:{glm-5.3-flash}:choice/2/accuracy")
        .arg("count")
        .query_async(&mut conn)
        .await
        .expect("the shape's sums");
    assert_eq!(count, learned as f64, "every sample learned while down");
    assert_eq!(samples(&service), learned);
}

/// Sums Redis holds that no samples make are set aside, not served: a shape whose sums say
/// +/-13,158 (which forced answers at full weight), one with a count that is not a number
/// and one with a NaN (either stopped every exchange). Each is renamed to `…:unreadable`,
/// counted by reason, and the shapes learn afresh while the exchanges go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sums_redis_holds_that_no_samples_make_are_set_aside_and_counted() {
    let url = shared_url();
    let prefix = unique_prefix();
    let client = redis::Client::open(url.as_str()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let model = format!("{prefix}:prior:{{glm-5.3-flash}}");
    let forced: &[(&str, &str)] = &[
        ("count", "1"),
        ("equations", "2"),
        ("sum_sq", "4"),
        ("normal:0:0", "2"),
        ("normal:1:1", "2"),
        ("normal:0:1", "-2"),
        ("normal:1:0", "-2"),
        ("rhs:0", "52632"),
        ("rhs:1", "-52632"),
        ("scored", "10"),
        ("gain:10", "50"),
        ("gain_sq:10", "300"),
    ];
    let garbled = [
        ("choice/2/accuracy", forced.to_vec()),
        ("choice/3/accuracy", vec![("count", "abc")]),
        ("choice/4/accuracy", vec![("count", "3"), ("sum_sq", "nan")]),
    ];
    for (shape, fields) in &garbled {
        let mut hset = redis::cmd("HSET");
        hset.arg(format!("{model}:{shape}"));
        for (f, v) in fields {
            hset.arg(*f).arg(*v);
        }
        hset.query_async::<()>(&mut conn).await.expect("hset");
        redis::cmd("SADD")
            .arg(format!("{model}:shapes"))
            .arg(*shape)
            .query_async::<()>(&mut conn)
            .await
            .expect("sadd");
    }
    let fake = FakeVllm::start().await;
    fake.set_planted(Some(crate::support::fake_vllm::Planted {
        bias: vec![0.0, 0.0],
        clarity: 1.5,
        read_noise: 0.3,
    }));
    let flags = crate::support::prior::syncing(&[
        "--redis-url",
        url.as_str(),
        "--redis-prefix",
        prefix.as_str(),
    ]);
    let service = support::start(support::config(&fake.base_url(), &flags)).await;
    synced(&service, "redis").await;
    for i in 0..20 {
        let reply = support::ask(&service, &planted(i, json!({}))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let answer = &reply.body["answers"]["q"];
        assert!(
            answer.get("prior_correction").is_none(),
            "not forced: {answer}"
        );
    }
    synced(&service, "redis").await;
    let metrics = support::metrics(&service).await;
    for (reason, n) in [("implausible", 1), ("not_a_number", 2)] {
        let line = format!(
            "systemone_prior_store_set_aside_total{{reason=\"{reason}\",store=\"redis\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} not in {metrics}");
    }
    let ready = support::get(&service, "/readyz").await;
    assert_eq!(ready.body["prior"]["set_aside"], 3, "{}", ready.text);
    assert_eq!(ready.body["prior"]["synced"], true, "{}", ready.text);
    for (shape, _) in &garbled {
        let aside: bool = redis::cmd("EXISTS")
            .arg(format!("{model}:{shape}:unreadable"))
            .query_async(&mut conn)
            .await
            .expect("exists");
        assert!(aside, "{shape} kept aside for a look");
    }
    let count: f64 = redis::cmd("HGET")
        .arg(format!("{model}:choice/2/accuracy"))
        .arg("count")
        .query_async(&mut conn)
        .await
        .expect("learned afresh");
    assert_eq!(
        count,
        samples(&service) as f64,
        "only what was learned since"
    );
}
