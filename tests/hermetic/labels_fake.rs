//! Multi-token option labels against the fake vLLM, with the shipped Gemma 3 table (a
//! digit-splitting tokenizer: 10 single-token labels, then the numerals `00`…`99` and
//! `000`…`254`, one token per digit). The fake answers any mask, deterministically from the
//! rendered prompt (prefill included), so every node of the trie gets its own numbers.
//!
//! * For 11, 37, 100, 101 and 255 options the service sends exactly one read per trie node
//!   (computed here from the label texts, independently of the service): the assistant
//!   prefill `answer=` plus the node's digits so far, masked to (and reading) the ids of the
//!   digits that may follow, `continue_final_message` on; `usage.upstream_requests` counts
//!   them.
//! * At T = 1 each option's probability is the product of its digits' conditional
//!   probabilities, renormalised over the question's labels, and `option_mass` is the sum
//!   of the products: recomputed here from the fake's own log-probabilities to 1e-12.
//! * A missing id at a node is a 502; the first failing node cancels the nodes still
//!   waiting; the in-flight cap holds across every node read and is reached.
//! * A 10-option question still goes out as one read of the ten single-token ids.
//! * `--label-scheme letters`: 11–52 options are one read of the letters `A`… (the table's
//!   ids), 53 fall back to numerals; the default never writes a letter; Qwen 3's table has
//!   no letters, so a model asking for them does not start.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::setup::at_temperature_1;
use crate::setup::ids_of;
use crate::support::answers::probabilities;
use crate::support::bodies::one_choice;
use crate::support::fake_vllm::{render_toy_prompt, toy_logprobs, FakeVllm, Fault};
use crate::support::{ask, assert_error, config_with_table, criteria, start, Service};

/// Gemma 3's id of each digit (`docs/token-tables.md`).
const DIGIT_IDS: [u64; 10] = [
    236771, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819,
];

/// The fake and a service on the `gemma-3` table (live check off: the fake's toy tokenizer
/// is not Gemma's), with no practical request- or question-token limit (without a
/// tokenizer they are byte estimates; a 255-option question is 30 reads of its prompt).
async fn setup(extra: &[&str]) -> (FakeVllm, Service) {
    let fake = FakeVllm::start().await;
    let mut flags = vec![
        "--token-check-interval-secs",
        "0",
        "--max-request-tokens",
        "100000000",
        "--max-question-tokens",
        "100000",
    ];
    flags.extend_from_slice(extra);
    let service = start(config_with_table(&fake.base_url(), "gemma-3", &flags)).await;
    (fake, service)
}

/// The label texts of `n` options: one digit for up to 10, else the narrowest zero-padded
/// width of the shipped schemes (2 up to 100, 3 up to 255).
fn label_texts(n: usize) -> Vec<String> {
    let width = match n {
        0..=10 => 1,
        11..=100 => 2,
        _ => 3,
    };
    (0..n).map(|i| format!("{i:0width$}")).collect()
}

/// The reads a trie of `texts` needs: prefill digits → the ids of the digits that follow.
fn expected_nodes(texts: &[String]) -> BTreeMap<String, Vec<u64>> {
    let mut nodes: BTreeMap<String, BTreeSet<u8>> = BTreeMap::new();
    for text in texts {
        for depth in 0..text.len() {
            let digit = text.as_bytes()[depth] - b'0';
            nodes
                .entry(text[..depth].to_string())
                .or_default()
                .insert(digit);
        }
    }
    nodes
        .into_iter()
        .map(|(prefix, digits)| {
            let ids = digits.iter().map(|d| DIGIT_IDS[*d as usize]).collect();
            (prefix, ids)
        })
        .collect()
}

/// What one upstream body asked: the prefill's digits and the mask.
fn node_of(body: &Value) -> (String, Vec<u64>) {
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{body}");
    assert_eq!(messages[1]["role"], "assistant");
    let prefill = messages[1]["content"].as_str().expect("prefill");
    let digits = prefill.strip_prefix("answer=").expect("answer= prefill");
    assert_eq!(body["continue_final_message"], true);
    let allowed = ids_of(&body["allowed_token_ids"]);
    assert_eq!(
        ids_of(&body["logprob_token_ids"]),
        allowed,
        "reads its own mask"
    );
    (digits.to_string(), allowed)
}

/// Each label's probability and the option mass, computed from the fake's log-probabilities
/// for the bodies it received: Π P(digit | prefix), renormalised; mass = Σ Π.
fn chain_rule(texts: &[String], bodies: &[Value]) -> (Vec<f64>, f64) {
    let mut reads: BTreeMap<String, BTreeMap<u64, f64>> = BTreeMap::new();
    for body in bodies {
        let (digits, ids) = node_of(body);
        let lps = toy_logprobs(&render_toy_prompt(body), &ids, &ids);
        reads.insert(digits, ids.into_iter().zip(lps).collect());
    }
    let products: Vec<f64> = texts
        .iter()
        .map(|text| {
            (0..text.len())
                .map(|depth| {
                    let id = DIGIT_IDS[(text.as_bytes()[depth] - b'0') as usize];
                    reads[&text[..depth]][&id].exp()
                })
                .product()
        })
        .collect();
    let mass: f64 = products.iter().sum();
    (products.iter().map(|p| p / mass).collect(), mass.min(1.0))
}

#[tokio::test]
async fn each_trie_node_is_one_read_and_the_chain_rule_joins_them() {
    let (fake, service) = setup(&[]).await;
    for n in [11, 37, 100, 101, 255] {
        let before = fake.chat_bodies().len();
        let reply = ask(&service, &at_temperature_1(one_choice(n))).await;
        assert_eq!(reply.status, 200, "{n} options: {}", reply.text);
        let bodies: Vec<Value> = fake.chat_bodies()[before..].to_vec();
        let texts = label_texts(n);
        let expected = expected_nodes(&texts);
        let sent: BTreeMap<String, Vec<u64>> = bodies.iter().map(node_of).collect();
        assert_eq!(sent.len(), bodies.len(), "{n}: one read per node");
        assert_eq!(
            sent, expected,
            "{n} options: the reads are the trie's nodes"
        );
        assert_eq!(
            reply.body["usage"]["upstream_requests"],
            json!(expected.len()),
            "{n}"
        );
        let (want, mass) = chain_rule(&texts, &bodies);
        let got = probabilities(&reply.body["answers"]["q"]);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-12, "{n} options, option {i}: {g} vs {w}");
        }
        let option_mass = reply.body["answers"]["q"]["option_mass"]
            .as_f64()
            .expect("mass");
        assert!(
            (option_mass - mass).abs() < 1e-12,
            "{n}: {option_mass} vs {mass}"
        );
        // The prompt numbers the options with their labels, as strings.
        let content = bodies[0]["messages"][0]["content"].as_str().expect("text");
        let last = texts.last().expect("a label");
        assert!(
            content.contains(&format!(
                "{{\"number\": \"{last}\", \"label\": \"opt_{}\"",
                n - 1
            )),
            "{n}: the prompt numbers option {} as \"{last}\"",
            n - 1
        );
    }
    // 11 options: the root (0, 1) and the nodes "0" (ten digits) and "1" (one).
    assert_eq!(expected_nodes(&label_texts(11)).len(), 3);
    assert_eq!(expected_nodes(&label_texts(255)).len(), 30);
}

#[tokio::test]
async fn ten_options_are_still_one_single_token_read() {
    let (fake, service) = setup(&[]).await;
    let reply = ask(&service, &at_temperature_1(one_choice(10))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let bodies = fake.chat_bodies();
    assert_eq!(bodies.len(), 1);
    let (digits, ids) = node_of(&bodies[0]);
    assert_eq!(digits, "");
    assert_eq!(ids, DIGIT_IDS.to_vec());
    let content = bodies[0]["messages"][0]["content"].as_str().expect("text");
    assert!(
        content.contains("{\"number\": 9, \"label\": \"opt_9\""),
        "{content}"
    );
}

#[tokio::test]
async fn a_missing_id_at_a_node_is_a_502() {
    let (fake, service) = setup(&[]).await;
    fake.set_fault(Fault::MissingId);
    let reply = ask(&service, &at_temperature_1(one_choice(37))).await;
    assert_error(&reply, 502, "system_one_upstream_protocol", "protocol");
}

/// With one slot, the first node read fails and the other four nodes of a 37-option
/// question are never sent.
#[tokio::test]
async fn the_first_failing_node_cancels_the_rest() {
    let (fake, service) = setup(&["--max-in-flight", "1"]).await;
    fake.set_fault(Fault::ServerError);
    let reply = ask(&service, &at_temperature_1(one_choice(37))).await;
    assert_error(&reply, 502, "system_one_upstream_error", "protocol");
    assert_eq!(fake.chat_requests(), 1, "queued node reads were still sent");
    assert_eq!(service.state.pipeline.in_flight().in_use(), 0);
}

/// 30 node reads of a 255-option question and 5 of a 37-option one, sent together, never
/// exceed the cap of 3 at the backend, and do reach it.
#[tokio::test]
async fn the_in_flight_cap_holds_across_node_reads() {
    let (fake, service) = setup(&["--max-in-flight", "3"]).await;
    fake.set_delay(std::time::Duration::from_millis(20));
    let mut body = at_temperature_1(one_choice(255));
    body["questions"]["r"] =
        json!({"type": "choice", "instructions": "And this one?", "criteria": criteria(37)});
    let reply = ask(&service, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(fake.chat_requests(), 35);
    assert_eq!(fake.max_in_flight(), 3, "the cap is held and reached");
}

/// The letter ids of the shipped Gemma 3 table, read from the file itself.
fn letter_ids() -> Vec<(String, u64)> {
    let path = format!("{}/token-tables/gemma-3.json", env!("CARGO_MANIFEST_DIR"));
    let table: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("table")).expect("json");
    let letters = table["multi_token"]
        .as_array()
        .expect("schemes")
        .iter()
        .find(|s| s["scheme"] == "letters")
        .expect("a letters scheme");
    letters["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|l| {
            let ids = ids_of(&l["ids"]);
            assert_eq!(ids.len(), 1, "{l}");
            (l["text"].as_str().expect("text").to_string(), ids[0])
        })
        .collect()
}

/// `--label-scheme letters`: 11 to 52 options are one read at `answer=` masked to the
/// first `n` letters, the prompt numbers them `"A"`, `"B"`, …, and the answer is the
/// read's probabilities renormalised; 53 options fall back to the numerals' trie. The
/// default scheme never writes a letter.
#[tokio::test]
async fn letters_answer_up_to_52_options_in_one_read() {
    let letters = letter_ids();
    assert_eq!(letters.len(), 52);
    let (fake, service) = setup(&["--label-scheme", "letters"]).await;
    for n in [11, 26, 52] {
        let before = fake.chat_bodies().len();
        let reply = ask(&service, &at_temperature_1(one_choice(n))).await;
        assert_eq!(reply.status, 200, "{n} options: {}", reply.text);
        let bodies: Vec<Value> = fake.chat_bodies()[before..].to_vec();
        assert_eq!(bodies.len(), 1, "{n}: one read");
        assert_eq!(reply.body["usage"]["upstream_requests"], json!(1));
        let (prefilled, ids) = node_of(&bodies[0]);
        assert_eq!(prefilled, "");
        let want_ids: Vec<u64> = letters[..n].iter().map(|(_, id)| *id).collect();
        assert_eq!(ids, want_ids, "{n}: masked to the first {n} letters");
        let lps = toy_logprobs(&render_toy_prompt(&bodies[0]), &ids, &ids);
        let mass: f64 = lps.iter().map(|lp| lp.exp()).sum();
        for (i, (g, lp)) in probabilities(&reply.body["answers"]["q"])
            .iter()
            .zip(&lps)
            .enumerate()
        {
            let w = lp.exp() / mass;
            assert!((g - w).abs() < 1e-12, "{n} options, option {i}: {g} vs {w}");
        }
        let content = bodies[0]["messages"][0]["content"].as_str().expect("text");
        let (last, _) = &letters[n - 1];
        assert!(
            content.contains(&format!(
                "{{\"number\": \"{last}\", \"label\": \"opt_{}\"",
                n - 1
            )),
            "{n}: option {} is numbered \"{last}\"",
            n - 1
        );
    }
    let before = fake.chat_bodies().len();
    let reply = ask(&service, &at_temperature_1(one_choice(53))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent: BTreeMap<String, Vec<u64>> =
        fake.chat_bodies()[before..].iter().map(node_of).collect();
    assert_eq!(sent, expected_nodes(&label_texts(53)), "53: numerals");

    let (fake, service) = setup(&[]).await;
    let reply = ask(&service, &at_temperature_1(one_choice(26))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let content = fake.chat_bodies()[0]["messages"][0]["content"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(content.contains("{\"number\": \"25\", \"label\": \"opt_25\""));
    assert!(!content.contains("\"number\": \"A\""), "default: numerals");
}

/// A model asked to use letters whose table has none (Qwen 3's, where `=` merges with
/// most letters) does not start, and the error says which table and why.
#[test]
fn letters_on_a_table_without_them_refuse_to_start() {
    let config = config_with_table(
        "http://127.0.0.1:9/v1",
        "qwen-3",
        &["--label-scheme", "letters"],
    );
    let err = match systemone::build_state(&config) {
        Ok(_) => panic!("letters on qwen-3 must not start"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("letters") && err.contains("qwen-3"), "{err}");
}
