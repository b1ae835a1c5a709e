//! The `openai` dialect against fakes of each host family (`tests/hermetic/setup/fake_openai.rs`):
//! the probe picks the strategy the family allows and `/readyz` and the metric report it;
//! every strategy is exact to 1e-12 against the masked distribution computed here from the
//! fake's own logits (post-bias renormalised, the anchor merge of 50 options at cap 20,
//! the raw top-K with its option mass, text-only tokens, trie nodes read raw); options
//! outside a raw top-K are a 502 naming how many; and every refusal disables the model
//! (503 `system_one_backend_unsupported`) with a message naming what the host lacks.

use crate::support;
use std::collections::HashMap;

use serde_json::{json, Value};

use crate::setup::at_temperature_1;
use crate::setup::fake_openai::{FakeOpenAi, Family, OverCap};
use crate::support::answers::probabilities;
use crate::support::bodies::one_choice;
use crate::support::{ask, assert_error, get, metrics, openai_config, start, Service};

/// The golden-fake table's labels: option `i` is id `1000 + i`, text `i`.
fn golden_labels() -> Vec<(u32, String)> {
    (0..191).map(|i| (1000 + i, i.to_string())).collect()
}

/// The Gemma 3 table's single-token labels (the digits) as `(id, text)`.
fn gemma_digits() -> Vec<(u32, String)> {
    let table = systemone::models::tokens::TokenTable::load("gemma-3").expect("ships");
    table
        .labels
        .iter()
        .map(|l| (l.id, l.number.to_string()))
        .collect()
}

async fn setup(family: Family) -> (FakeOpenAi, Service) {
    setup_with(family, &golden_labels(), "golden-fake", &[]).await
}

async fn setup_with(
    family: Family,
    labels: &[(u32, String)],
    table: &str,
    extra: &[&str],
) -> (FakeOpenAi, Service) {
    let fake = FakeOpenAi::start(family, labels).await;
    let mut flags = vec![
        "--model",
        "compat-model",
        "--max-request-tokens",
        "10000000",
        "--max-question-tokens",
        "1000000",
    ];
    flags.extend_from_slice(extra);
    let service = start(openai_config(&fake.base_url(), table, &flags)).await;
    (fake, service)
}

/// The masked distribution over `ids` for these logits, computed here: a softmax over the
/// options' logits alone.
fn masked(logits: &HashMap<u32, f64>, ids: &[u32]) -> Vec<f64> {
    let l: Vec<f64> = ids.iter().map(|id| logits[id]).collect();
    let max = l.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = l.iter().map(|x| (x - max).exp()).collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// The raw probability mass of `ids` under these logits (the whole vocabulary's softmax).
fn mass(logits: &HashMap<u32, f64>, ids: &[u32]) -> f64 {
    let max = logits.values().copied().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = logits.values().map(|l| (l - max).exp()).sum();
    ids.iter().map(|id| (logits[id] - max).exp() / z).sum()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() < tol,
            "option {i}: {g} vs {w} (diff {})",
            (g - w).abs()
        );
    }
}

fn golden_ids(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| 1000 + i).collect()
}

/// The ids a read body biases, sorted.
fn biased_ids(body: &Value) -> Vec<u32> {
    let mut ids: Vec<u32> = body["logit_bias"]
        .as_object()
        .map(|m| m.keys().map(|k| k.parse().expect("id")).collect())
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// `/readyz`'s report of the one model's host.
/// `/readyz` and the host report in it, once the model's upkeep task has finished its
/// first probe (`/readyz` never waits for one: it says `unprobed` meanwhile).
async fn host(service: &Service) -> (u16, Value) {
    support::settled(service).await;
    let reply = get(service, "/readyz").await;
    (reply.status, reply.body["models"][0]["host"].clone())
}

#[tokio::test]
async fn the_probe_picks_each_familys_strategy_and_reports_it() {
    let cases = [
        (
            "post-bias cap 20",
            Family::post_bias_cap_20(),
            "post_bias",
            20,
            "id",
            "after_logprobs",
            "trailing_message",
        ),
        (
            "pre-bias, no bias",
            Family::pre_bias_no_bias(),
            "raw_top_k",
            20,
            "id",
            "ignored",
            "trailing_message",
        ),
        (
            "pre-bias, bias honoured",
            Family::pre_bias_cap_20(),
            "raw_top_k",
            20,
            "id",
            "before_logprobs",
            "trailing_message",
        ),
        (
            "text-only tokens",
            Family::text_only(),
            "post_bias",
            20,
            "text",
            "after_logprobs",
            "trailing_message",
        ),
        (
            "top_n_tokens <= 5",
            Family::tgi(),
            "raw_top_k",
            5,
            "text",
            "ignored",
            "continue_final_message",
        ),
    ];
    for (name, family, strategy, cap, ids, bias, prefill) in cases {
        let (_fake, service) = setup(family).await;
        let (status, report) = host(&service).await;
        assert_eq!(status, 200, "{name}: {report}");
        assert_eq!(report["probe"], "ready", "{name}");
        assert_eq!(report["strategy"], strategy, "{name}: {report}");
        assert_eq!(report["top_logprobs"], cap, "{name}: {report}");
        assert_eq!(report["token_ids"], ids, "{name}: {report}");
        assert_eq!(report["logit_bias"], bias, "{name}: {report}");
        assert_eq!(report["prefill"], prefill, "{name}: {report}");
        let text = metrics(&service).await;
        let line = format!(
            "systemone_backend_read_strategy{{model=\"compat-model\",strategy=\"{strategy}\"}} 1"
        );
        assert!(text.contains(&line), "{name}: no {line} in\n{text}");
        for other in ["post_bias", "raw_top_k", "unprobed", "refused"]
            .iter()
            .filter(|s| **s != strategy)
        {
            let zero = format!(
                "systemone_backend_read_strategy{{model=\"compat-model\",strategy=\"{other}\"}} 0"
            );
            assert!(text.contains(&zero), "{name}: no {zero}");
        }
    }
}

#[tokio::test]
async fn a_token_id_strings_host_is_read_by_id() {
    let family = Family {
        ids: crate::setup::fake_openai::FakeIds::Strings,
        ..Family::post_bias_cap_20()
    };
    let (fake, service) = setup(family).await;
    let reply = ask(&service, &at_temperature_1(one_choice(4))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(host(&service).await.1["token_ids"], "token_id:N");
    let reads = fake.read_bodies();
    assert_eq!(reads.len(), 1);
    let want = masked(&fake.logits(&reads[0]), &golden_ids(4));
    assert_close(&probabilities(&reply.body["answers"]["q"]), &want, 1e-12);
}

#[tokio::test]
async fn post_bias_reads_renormalise_to_the_masked_distribution() {
    let (fake, service) = setup(Family::post_bias_cap_20()).await;
    for n in [2usize, 4, 20] {
        let before = fake.read_bodies().len();
        let reply = ask(&service, &at_temperature_1(one_choice(n))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let reads = &fake.read_bodies()[before..];
        assert_eq!(reads.len(), 1, "{n} options fit the cap: one read");
        assert_eq!(
            biased_ids(&reads[0]),
            golden_ids(n),
            "every option biased alike"
        );
        assert_eq!(reads[0]["logit_bias"]["1000"], 100.0);
        assert_eq!(reads[0]["top_logprobs"], n);
        assert_eq!(
            reads[0]["messages"][1],
            json!({"role": "assistant", "content": "answer="})
        );
        assert!(
            reads[0].get("continue_final_message").is_none(),
            "plain trailing message"
        );
        let answer = &reply.body["answers"]["q"];
        let want = masked(&fake.logits(&reads[0]), &golden_ids(n));
        assert_close(&probabilities(answer), &want, 1e-12);
        assert_eq!(answer["option_mass_unknown"], true, "{answer}");
        assert!(answer.get("option_mass").is_none());
        assert_eq!(reply.body["usage"]["upstream_requests"], 1);
    }
}

#[tokio::test]
async fn the_anchor_merge_reads_50_options_at_cap_20_exactly() {
    let (fake, service) = setup(Family::post_bias_cap_20()).await;
    let reply = ask(&service, &at_temperature_1(one_choice(50))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reads = fake.read_bodies();
    // 49 options besides the anchor in groups of at most 19: 3 reads.
    assert_eq!(reads.len(), 3, "reads: {}", reads.len());
    assert_eq!(reply.body["usage"]["upstream_requests"], 3);
    let mut covered = std::collections::BTreeSet::new();
    for read in &reads {
        let group = biased_ids(read);
        assert!(
            group.len() <= 20,
            "a group of {} is over the cap",
            group.len()
        );
        assert!(
            group.contains(&1000),
            "every group holds the anchor: {group:?}"
        );
        assert_eq!(read["top_logprobs"], group.len());
        covered.extend(group);
        assert_eq!(
            read["messages"], reads[0]["messages"],
            "one prompt for every group"
        );
    }
    assert_eq!(covered.into_iter().collect::<Vec<_>>(), golden_ids(50));
    let want = masked(&fake.logits(&reads[0]), &golden_ids(50));
    let answer = &reply.body["answers"]["q"];
    assert_close(&probabilities(answer), &want, 1e-12);
    assert_eq!(answer["option_mass_unknown"], true);
    // 21 options: the first group holds the anchor and 18 more, the second 2 and the anchor.
    let before = fake.read_bodies().len();
    let reply = ask(&service, &at_temperature_1(one_choice(21))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reads = &fake.read_bodies()[before..];
    assert_eq!(reads.len(), 2);
    let want = masked(&fake.logits(&reads[0]), &golden_ids(21));
    assert_close(&probabilities(&reply.body["answers"]["q"]), &want, 1e-12);
}

#[tokio::test]
async fn the_anchor_merge_holds_with_text_only_tokens_and_permutations() {
    let (fake, service) = setup(Family::text_only()).await;
    let mut body = at_temperature_1(one_choice(50));
    body["permutations"] = json!(2);
    let reply = ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reads = fake.read_bodies();
    assert_eq!(reads.len(), 6, "3 groups per order, 2 orders");
    // Order r puts caller option (p + shift) at position p: average the two orders' masked
    // distributions in the caller's order.
    let mut want = vec![0.0; 50];
    for (order, shift) in [(0usize, 0usize), (1, 25)] {
        let p = masked(&fake.logits(&reads[order * 3]), &golden_ids(50));
        for (pos, q) in p.iter().enumerate() {
            want[(pos + shift) % 50] += q / 2.0;
        }
    }
    assert_close(&probabilities(&reply.body["answers"]["q"]), &want, 1e-12);
}

#[tokio::test]
async fn raw_top_k_reads_are_exact_and_carry_the_option_mass() {
    for family in [Family::pre_bias_no_bias(), Family::pre_bias_cap_20()] {
        let (fake, service) = setup(family).await;
        let reply = ask(&service, &at_temperature_1(one_choice(4))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let reads = fake.read_bodies();
        assert_eq!(reads.len(), 1);
        assert!(
            reads[0].get("logit_bias").is_none(),
            "a raw read sends no bias"
        );
        assert_eq!(reads[0]["top_logprobs"], 20);
        let logits = fake.logits(&reads[0]);
        let answer = &reply.body["answers"]["q"];
        assert_close(
            &probabilities(answer),
            &masked(&logits, &golden_ids(4)),
            1e-12,
        );
        let got = answer["option_mass"].as_f64().expect("mass known");
        let want = mass(&logits, &golden_ids(4));
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        assert!(answer.get("option_mass_unknown").is_none());
    }
}

/// How many of `ids` are outside the top `k` of these logits.
fn outside_top_k(logits: &HashMap<u32, f64>, ids: &[u32], k: usize) -> usize {
    let mut all: Vec<(u32, f64)> = logits.iter().map(|(i, l)| (*i, *l)).collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<u32> = all[..k].iter().map(|(i, _)| *i).collect();
    ids.iter().filter(|i| !top.contains(i)).count()
}

#[tokio::test]
async fn options_outside_a_raw_top_k_are_a_502_naming_how_many() {
    let (fake, service) = setup(Family::pre_bias_no_bias()).await;
    let reply = ask(&service, &at_temperature_1(one_choice(30))).await;
    let reads = fake.read_bodies();
    let missing = outside_top_k(&fake.logits(&reads[0]), &golden_ids(30), 20);
    assert!(missing >= 10, "30 options cannot fit a top-20");
    assert_error(&reply, 502, "system_one_upstream_protocol", "protocol");
    let message = reply.message();
    assert!(
        message.contains(&format!("{missing} of the 30 options")) && message.contains("top-20"),
        "{message}"
    );
}

#[tokio::test]
async fn a_top_n_tokens_5_host_is_exact_where_the_options_fit_and_502_where_not() {
    let (fake, service) = setup(Family::tgi()).await;
    for n in [2usize, 6] {
        let before = fake.read_bodies().len();
        let reply = ask(&service, &at_temperature_1(one_choice(n))).await;
        let read = &fake.read_bodies()[before];
        assert_eq!(
            read["continue_final_message"], true,
            "TGI continues only when asked"
        );
        assert_eq!(read["add_generation_prompt"], false);
        assert_eq!(read["top_logprobs"], 5);
        let logits = fake.logits(read);
        let missing = outside_top_k(&logits, &golden_ids(n), 5);
        if missing == 0 {
            assert_eq!(reply.status, 200, "{}", reply.text);
            let answer = &reply.body["answers"]["q"];
            assert_close(
                &probabilities(answer),
                &masked(&logits, &golden_ids(n)),
                1e-12,
            );
        } else {
            assert_error(&reply, 502, "system_one_upstream_protocol", "protocol");
            assert!(reply
                .message()
                .contains(&format!("{missing} of the {n} options")));
        }
        if n == 6 {
            assert!(missing >= 1, "6 options never fit a top-5");
        }
    }
}

#[tokio::test]
async fn trie_nodes_on_a_post_bias_host_are_read_raw_by_the_chain_rule() {
    let (fake, service) =
        setup_with(Family::post_bias_cap_20(), &gemma_digits(), "gemma-3", &[]).await;
    let reply = ask(&service, &at_temperature_1(one_choice(11))).await;
    let reads = fake.read_bodies();
    assert_eq!(reads.len(), 3, "11 numerals: the root, `0` and `1`");
    for read in &reads {
        assert!(read.get("logit_bias").is_none(), "a trie node is read raw");
    }
    assert_eq!(reply.status, 200, "{}", reply.text);
    // The chain rule, here: P(label) ∝ Π raw p(digit | prefix), renormalised.
    let digit = |d: u32| gemma_digits()[d as usize].0;
    let by_prefill: HashMap<String, HashMap<u32, f64>> = reads
        .iter()
        .map(|r| {
            let logits = fake.logits(r);
            let max = logits.values().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = logits.values().map(|l| (l - max).exp()).sum();
            let lp = logits.iter().map(|(i, l)| (*i, l - max - z.ln())).collect();
            (
                r["messages"][1]["content"]
                    .as_str()
                    .expect("prefill")
                    .to_string(),
                lp,
            )
        })
        .collect();
    let joint: Vec<f64> = (0..11u32)
        .map(|i| {
            let (a, b) = (i / 10, i % 10);
            let root = by_prefill["answer="][&digit(a)];
            let second = by_prefill[&format!("answer={a}")][&digit(b)];
            (root + second).exp()
        })
        .collect();
    let total: f64 = joint.iter().sum();
    let want: Vec<f64> = joint.iter().map(|j| j / total).collect();
    let answer = &reply.body["answers"]["q"];
    assert_close(&probabilities(answer), &want, 1e-12);
    let got_mass = answer["option_mass"]
        .as_f64()
        .expect("raw reads know the mass");
    assert!((got_mass - total).abs() < 1e-12, "{got_mass} vs {total}");
}

/// A refused host: `/readyz` is 503 naming what is missing, the metric says `refused`, a
/// request is 503 `system_one_backend_unsupported` with the same words, and no read is sent.
async fn assert_refused(family: Family, labels: &[(u32, String)], what: &str) {
    let (fake, service) = setup_with(family, labels, "golden-fake", &[]).await;
    let (status, report) = host(&service).await;
    assert_eq!(status, 503, "{report}");
    assert_eq!(report["probe"], "refused");
    let refused = report["refused"].as_str().expect("reason");
    assert!(refused.contains(what), "{refused:?} does not say {what:?}");
    let text = metrics(&service).await;
    assert!(text.contains(
        "systemone_backend_read_strategy{model=\"compat-model\",strategy=\"refused\"} 1"
    ));
    let probes = fake.requests();
    let reply = ask(&service, &at_temperature_1(one_choice(4))).await;
    assert_error(&reply, 503, "system_one_backend_unsupported", "unavailable");
    assert!(reply.message().contains(what), "{}", reply.message());
    assert!(reply.retry_after().is_some());
    assert_eq!(fake.requests(), probes, "a refused host gets no read");
    assert!(!reply.text.contains("secret-backend") && !reply.text.contains("127.0.0.1"));
}

#[tokio::test]
async fn every_refusal_names_what_the_host_lacks() {
    let labels = golden_labels();
    assert_refused(
        Family::no_prefill(),
        &labels,
        "does not continue a trailing assistant message",
    )
    .await;
    assert_refused(
        Family::no_logprobs(),
        &labels,
        "returns no logprobs (`logprobs: true`",
    )
    .await;
    let rejects_all = Family {
        cap: 0,
        over_cap: OverCap::Reject(400),
        ..Family::post_bias_cap_20()
    };
    assert_refused(
        rejects_all,
        &labels,
        "rejects `logprobs` with every `top_logprobs` tried (1000, 20, 5)",
    )
    .await;
    let one = Family {
        cap: 1,
        over_cap: OverCap::Clamp,
        ..Family::post_bias_cap_20()
    };
    assert_refused(one, &labels, "returns 1 top logprob(s) per position").await;
    // The host's token 1000 is "7", the table's label 0: the table is not this host's.
    let mut shifted = labels.clone();
    shifted[0].1 = "7".into();
    assert_refused(
        Family::pre_bias_no_bias(),
        &shifted,
        "the token table does not match the backend's tokens: id 1000 is \"7\"",
    )
    .await;
}

#[tokio::test]
async fn concurrent_first_requests_share_one_probe() {
    let (fake, service) = setup(Family::post_bias_cap_20()).await;
    let body = at_temperature_1(one_choice(4));
    let asks: Vec<_> = (0..4).map(|_| ask(&service, &body)).collect();
    for reply in futures::future::join_all(asks).await {
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let probes = fake.requests() - fake.read_bodies().len();
    // 1000 rejected, 20 accepted; the pattern twice; the bias unbiased and biased.
    assert_eq!(probes, 6, "one probe for all: {probes} probe requests");
    assert_eq!(fake.read_bodies().len(), 4);
}

#[tokio::test]
async fn an_unreachable_host_is_unprobed_and_503_until_it_answers() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let service = start(openai_config(
        &format!("http://{closed}/v1"),
        "golden-fake",
        &["--model", "compat-model"],
    ))
    .await;
    let reply = ask(&service, &at_temperature_1(one_choice(4))).await;
    assert_error(
        &reply,
        503,
        "system_one_upstream_unavailable",
        "unavailable",
    );
    // The probe is retried in the background; `/readyz` says what stands meanwhile.
    let ready = get(&service, "/readyz").await;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.body["models"][0]["host"]["probe"], "unprobed");
    assert!(metrics(&service).await.contains(
        "systemone_backend_read_strategy{model=\"compat-model\",strategy=\"unprobed\"} 1"
    ));
}

/// A host without a tokenizer endpoint cannot count a request exactly: one the byte
/// estimate puts over a token limit is refused on the estimate, and the message says so
/// (where the backend has one, its `/tokenize` settles it first). Nothing is read.
#[tokio::test]
async fn without_a_tokenizer_a_request_over_the_estimate_is_refused_saying_so() {
    let (fake, service) = setup_with(
        Family::post_bias_cap_20(),
        &golden_labels(),
        "golden-fake",
        &["--max-state-tokens", "100"],
    )
    .await;
    let before = fake.read_bodies().len();
    let mut body = at_temperature_1(one_choice(3));
    body["state"] = json!("s".repeat(200));
    let reply = ask(&service, &body).await;
    assert_error(&reply, 413, "system_one_state_too_large", "cap_exceeded");
    let message = reply.body["error"]["message"].as_str().expect("a message");
    assert!(
        message.starts_with("state: the state is about 202 tokens, more than the limit of 100")
            && message.contains("the backend's tokenizer could not count it"),
        "{message}"
    );
    assert_eq!(fake.read_bodies().len(), before, "nothing was read");
}
