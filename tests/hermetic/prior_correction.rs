//! The position prior (`calibration::prior`), hermetic: a fake whose label log-probabilities
//! are a known signal plus a planted position bias of known size ([`Planted`]). Per bias
//! size and option count, side by side: the unbiased model's accuracy, one read raw, one
//! read corrected (learning while serving, its samples included in the reads), every
//! rotation. Run with `-- --nocapture` to print the table (docs/calibration/prior.md).

use serde_json::{json, Value};

use crate::support::fake_vllm::{FakeVllm, Planted};
use crate::support::{self, Service};

/// Requests per run: sequential, so the sampler and the fit are deterministic.
const ANSWERS: usize = 200;
const LABELS: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

/// A bias of `size` spread evenly over `n` positions, from `+size/2` to `−size/2`.
fn bias(n: usize, size: f64) -> Vec<f64> {
    (0..n)
        .map(|p| size * (0.5 - p as f64 / (n - 1) as f64))
        .collect()
}

fn plant(fake: &FakeVllm, n: usize, size: f64) {
    fake.set_planted(Some(Planted {
        bias: bias(n, size),
        clarity: 1.5,
        read_noise: 0.3,
    }));
}

/// Question `i` of a run over `n` options: its true label and its body.
fn question(i: usize, n: usize, extra: &Value) -> (&'static str, Value) {
    let truth = LABELS[i % n];
    let criteria: serde_json::Map<String, Value> = LABELS[..n]
        .iter()
        .map(|l| (l.to_string(), Value::Null))
        .collect();
    let mut body = json!({
        "state": {"truth": truth, "seed": i},
        "questions": {"q": {"type": "choice", "instructions": "Which one?", "criteria": criteria}}
    });
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    (truth, body)
}

/// One run's result.
#[derive(Debug, Clone, Copy)]
struct Run {
    accuracy: f64,
    reads_per_answer: f64,
    /// Answers that said the prior was taken out.
    corrected: usize,
}

async fn run(service: &Service, fake: &FakeVllm, n: usize, extra: Value) -> Run {
    let before = fake.chat_requests();
    let (mut right, mut corrected) = (0, 0);
    for i in 0..ANSWERS {
        let (truth, body) = question(i, n, &extra);
        let reply = support::ask(service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let answer = &reply.body["answers"]["q"];
        right += usize::from(answer["choice"] == truth);
        corrected += usize::from(answer.get("prior_correction").is_some());
    }
    Run {
        accuracy: right as f64 / ANSWERS as f64,
        reads_per_answer: (fake.chat_requests() - before) as f64 / ANSWERS as f64,
        corrected,
    }
}

/// The standard error of an accuracy `p` over the run.
fn standard_error(p: f64) -> f64 {
    (p * (1.0 - p) / ANSWERS as f64).sqrt()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corrected_read_recovers_the_unbiased_accuracy_and_declines_without_a_bias() {
    let fake = FakeVllm::start().await;
    let plain = support::start(support::config(&fake.base_url(), &[])).await;
    eprintln!("| options | bias | unbiased | one read raw | one read corrected | reads/answer | corrected answers | every rotation (reads) |");
    eprintln!("|---|---|---|---|---|---|---|---|");
    let mut failed = Vec::new();
    for size in [0.0, 1.5, 3.0] {
        let learning = support::start(support::config(
            &fake.base_url(),
            &["--prior-correction", "true"],
        ))
        .await;
        for n in [2usize, 4] {
            plant(&fake, n, 0.0);
            let unbiased = run(&plain, &fake, n, json!({})).await;
            plant(&fake, n, size);
            let raw = run(&plain, &fake, n, json!({})).await;
            let every = run(&plain, &fake, n, json!({"permutations": n})).await;
            let fixed = run(&learning, &fake, n, json!({})).await;
            eprintln!(
                "| {n} | {size} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {:.3} ({:.0}) |",
                unbiased.accuracy,
                raw.accuracy,
                fixed.accuracy,
                fixed.reads_per_answer,
                fixed.corrected,
                every.accuracy,
                every.reads_per_answer
            );
            let row = format!(
                "n={n} bias {size}: corrected {fixed:?}, unbiased {unbiased:?}, raw {raw:?}"
            );
            if fixed.reads_per_answer > 1.1 {
                failed.push(format!("reads per answer over 1.1: {row}"));
            }
            if size > 0.0 && fixed.accuracy < 0.95 * unbiased.accuracy {
                failed.push(format!("under 0.95x the unbiased accuracy: {row}"));
            }
            // Nothing to correct: the prior declines, and the answers are the raw ones.
            let within = (fixed.accuracy - raw.accuracy).abs() <= standard_error(raw.accuracy);
            if size == 0.0 && (fixed.corrected > 0 || !within) {
                failed.push(format!("did not decline: {row}"));
            }
        }
        let metrics = support::metrics(&learning).await;
        for n in [2, 4] {
            let samples = format!(
                "systemone_prior_samples{{model=\"glm-5.3-flash\",shape=\"choice/{n}/accuracy\"}}"
            );
            assert!(metrics.contains(&samples), "{samples} not in {metrics}");
        }
        assert!(!metrics.contains("Which one"), "no caller text in metrics");
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The per-request switch: where the model learns a prior, `false` keeps a request out of
/// it (not corrected, not sampled: one read); where it does not, `true` is refused on both
/// doors before any read, naming the field, the value and the model.
#[tokio::test]
async fn a_request_opts_out_of_the_prior_and_cannot_insist_where_none_is_learned() {
    let fake = FakeVllm::start().await;
    plant(&fake, 2, 3.0);
    let learning = support::start(support::config(
        &fake.base_url(),
        &["--prior-correction", "true"],
    ))
    .await;
    // Learn until an answer comes back corrected (the 2-option, bias-3 cell corrects 197
    // of its first 200 answers).
    let mut learned = false;
    for i in 0..100 {
        let (_, body) = question(i, 2, &json!({"prior_correction": true}));
        let reply = support::ask(&learning, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        if reply.body["answers"]["q"].get("prior_correction").is_some() {
            learned = true;
            break;
        }
    }
    assert!(learned, "no answer corrected within 100 requests");
    let opted_out = json!({"prior_correction": false});
    let samples = || support::metrics(&learning);
    let before = samples().await;
    for i in 100..120 {
        let (_, body) = question(i, 2, &opted_out);
        let reads = fake.chat_requests();
        let reply = support::ask(&learning, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let answer = &reply.body["answers"]["q"];
        assert!(answer.get("prior_correction").is_none(), "{answer}");
        assert_eq!(fake.chat_requests() - reads, 1, "one read, no sample");
    }
    // Not learned from either (20 single reads at a 5% share would have taken one).
    let line = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("systemone_prior_samples{"))
            .map(str::to_string)
    };
    assert_eq!(line(&before), line(&samples().await));

    let plain = support::start(support::config(&fake.base_url(), &[])).await;
    let (_, body) = question(0, 2, &json!({"prior_correction": true}));
    let reads = fake.chat_requests();
    let reply = support::ask(&plain, &body).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(
        reply.header("x-systemone-error-code"),
        Some("system_one_prior_correction_off")
    );
    for word in ["prior_correction true", "glm-5.3-flash"] {
        assert!(reply.text.contains(word), "{word} not in {}", reply.text);
    }
    let decisions = json!({
        "input": "a customer writes",
        "questions": [{"type": "predicate", "instructions": "Is it a refund?"}],
        "prior_correction": true
    });
    let reply = support::post(&plain.client, &plain.url("/v1/decisions"), &decisions).await;
    assert_eq!(
        reply.body["error"]["code"], "system_one_prior_correction_off",
        "{}",
        reply.text
    );
    assert_eq!(
        reply.body["error"]["param"], "prior_correction",
        "{}",
        reply.text
    );
    assert_eq!(fake.chat_requests(), reads, "refused before any read");
}

/// With `--state-dir`, the prior a service learned is in `prior.redb` once it has synced,
/// and a service started again on the directory begins with it: the same samples, and its
/// first answer corrected at one read (no warm-up sample).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prior_survives_a_restart_in_the_state_dir() {
    use crate::support::prior::{
        learn_until_corrected, loaded, plant_two, planted, samples, synced,
    };
    use crate::support::replicas::{unique_prefix, Stoppable};
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    let dir = std::env::temp_dir().join(format!("systemone-prior-{}", unique_prefix()));
    let dir_flag = dir.to_str().expect("utf-8");
    let flags = crate::support::prior::syncing(&["--state-dir", dir_flag]);
    let config = support::config(&fake.base_url(), &flags);
    let first = Stoppable::start(systemone::build_state(&config).expect("state")).await;
    let next = learn_until_corrected(&first.service, 0).await;
    synced(&first.service, "file").await;
    let learned = samples(&first.service);
    assert!(learned >= 4, "{learned}");
    first.stop().await;
    assert!(dir.join("prior.redb").exists());

    let again = Stoppable::start(systemone::build_state(&config).expect("reopens")).await;
    let service = &again.service;
    loaded(service, learned).await;
    let reads = fake.chat_requests();
    let reply = support::ask(service, &planted(next, json!({}))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(
        reply.body["answers"]["q"].get("prior_correction").is_some(),
        "{}",
        reply.text
    );
    assert_eq!(fake.chat_requests() - reads, 1, "no warm-up sample");
    again.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `eval --compare-prior` on the planted bias: every line asked with the service's prior
/// and again with `"prior_correction": false`, side by side. With the prior the answers
/// are more accurate, some corrected, at the reads its samples cost (more than one per
/// answer); without, none corrected and exactly one read per answer (no sample taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_compares_answers_with_and_without_the_prior() {
    use crate::support::prior::{plant_two, planted, samples};
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    let service = support::start(support::config(
        &fake.base_url(),
        &["--prior-correction", "true"],
    ))
    .await;
    let dir = std::env::temp_dir().join(format!(
        "systemone-prior-eval-{}",
        crate::support::replicas::unique_prefix()
    ));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let mut text = String::new();
    for i in 0..120 {
        let mut line = planted(i, json!({}));
        let truth = ["alpha", "beta"][i % 2];
        line["gold"] = json!({ "q": truth });
        text.push_str(&format!("{line}\n"));
    }
    let data = dir.join("planted.jsonl");
    std::fs::write(&data, text).expect("data");
    let url = service.url("");
    let args = support::eval_args(&[
        "--data",
        data.to_str().expect("utf-8"),
        "--url",
        &url,
        "--compare-prior",
        "--concurrency",
        "1",
        "--progress",
        "false",
    ]);
    let outcome = systemone::cli::eval::run(&args).await.expect("eval runs");
    eprint!("{}", outcome.table);
    let prior = &outcome.report["prior"];
    let (with, without) = (&prior["with"], &prior["without"]);
    let accuracy = |v: &Value| v["families"]["q"]["accuracy"].as_f64().expect("accuracy");
    assert!(accuracy(with) > accuracy(without) + 0.05, "{prior}");
    assert!(with["corrected_answers"].as_u64() > Some(50), "{prior}");
    assert_eq!(without["corrected_answers"], 0, "{prior}");
    let reads = |v: &Value| v["reads_per_answer"].as_f64().expect("reads");
    assert!(reads(with) > 1.0 && reads(with) <= 1.1, "{prior}");
    assert_eq!(reads(without), 1.0, "{prior}");
    assert!(samples(&service) >= 4, "the prior was learned");
    assert!(
        outcome.table.contains("position prior, with / without"),
        "{}",
        outcome.table
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Redis that does not answer costs the prior nothing but sharing: the service learns and
/// corrects from its own samples, counts each failed exchange, and keeps what it learned
/// for the next one (the samples are not lost to the failed sends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_redis_the_prior_is_learned_and_kept_here() {
    use crate::support::prior::{learn_until_corrected, plant_two, samples, sync_failed};
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    let flags = crate::support::prior::syncing(&["--redis-url", "redis://127.0.0.1:1"]);
    let service = support::start(support::config(&fake.base_url(), &flags)).await;
    learn_until_corrected(&service, 0).await;
    let learned = samples(&service);
    let seen = sync_failed(&service, "redis").await;
    assert!(!seen.contains("outcome=\"ok\",store=\"redis\""), "{seen}");
    assert_eq!(
        samples(&service),
        learned,
        "nothing lost to the failed exchanges"
    );
}

/// `serve` stopped by SIGTERM hands its books to the store before it exits: the real
/// binary, exchanging once at start and then only every hour, learns, is stopped, and a
/// service started on its `--state-dir` begins with every sample it learned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_keeps_what_was_learned_since_the_last_exchange() {
    use crate::support::prior::{loaded, plant_two, planted};
    use crate::support::replicas::{unique_prefix, Stoppable};
    let fake = FakeVllm::start().await;
    plant_two(&fake);
    let dir = std::env::temp_dir().join(format!("systemone-prior-{}", unique_prefix()));
    let dir_flag = dir.to_str().expect("utf-8").to_string();
    let backend = fake.base_url();
    let mut flags = vec!["--prior-correction", "true", "--state-dir", &dir_flag];
    flags.extend(["--prior-sync-ms", "3600000", "--backend", "vllm"]);
    flags.extend(["--backend-url", &backend, "--token-table", "golden-fake"]);
    flags.extend(["--model", "glm-5.3-flash"]);
    let args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    let (mut child, addr) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        support::spawn_serve(&args)
    })
    .await
    .expect("spawned");
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/systemone");
    let mut corrected = false;
    for i in 0..100 {
        let reply = support::post(&client, &url, &planted(i, json!({}))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        if reply.body["answers"]["q"].get("prior_correction").is_some() {
            corrected = true;
            break;
        }
    }
    assert!(corrected, "no answer corrected within 100 requests");
    let metrics = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let line = "systemone_prior_samples{model=\"glm-5.3-flash\",shape=\"choice/2/accuracy\"} ";
    let learned: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|v| v.trim().parse().ok())
        .expect("the samples gauge");
    let pid = child.id().to_string();
    let status = tokio::task::spawn_blocking(move || {
        let term = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(term.success());
        child.wait().expect("the binary ends")
    })
    .await
    .expect("waited");
    assert!(status.success(), "{status}");

    let flags = ["--prior-correction", "true", "--state-dir", &dir_flag];
    let config = support::config(&fake.base_url(), &flags);
    let again = Stoppable::start(systemone::build_state(&config).expect("state")).await;
    let service = &again.service;
    loaded(service, learned).await;
    again.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
