//! The llama.cpp dialect against a small fake `llama-server`, for what the real Gemma 3
//! 270M server cannot be made to do on demand: an option outside the raw top-K (the
//! `post_sampling_probs` fallback and `option_mass_unknown`), a chat template that opens a
//! reasoning block (refused), and `--disable-thinking` reaching the template.

mod common;

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// Gemma 3's digit ids (token-tables/gemma-3.json).
const DIGITS: [u64; 10] = [
    236771, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819,
];
const PREFIX_IDS: [u64; 2] = [14433, 236784];

#[derive(Default)]
struct FakeLlama {
    /// Leave the last option out of the raw top-K.
    drop_last_option: bool,
    /// Open a `<think>` block before the prefill in `/apply-template`.
    thinking_template: bool,
    /// Every body received, by path.
    bodies: Vec<(String, Value)>,
}

impl FakeLlama {
    /// The bodies received at `path`, in arrival order.
    fn at(&self, path: &str) -> Vec<&Value> {
        self.bodies
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b)
            .collect()
    }
}

type Shared = Arc<Mutex<FakeLlama>>;

/// The raw (pre-mask) probability the fake gives option `i` of `n`: 0.01·(i+1).
fn raw_p(i: usize) -> f64 {
    0.01 * (i as f64 + 1.0)
}

/// The masked distribution the fake's `post_sampling_probs` reports: ∝ (n − i).
fn masked_p(i: usize, n: usize) -> f64 {
    let total: usize = (1..=n).sum();
    (n - i) as f64 / total as f64
}

async fn tokenize(State(fake): State<Shared>, Json(body): Json<Value>) -> Json<Value> {
    fake.lock()
        .expect("lock")
        .bodies
        .push(("/tokenize".into(), body.clone()));
    let text = body["content"].as_str().unwrap_or("");
    let mut tokens: Vec<u64> = PREFIX_IDS.to_vec();
    if let Some(rest) = text.strip_prefix("answer=") {
        tokens.extend(rest.bytes().map(|b| DIGITS[usize::from(b - b'0')]));
    }
    Json(json!({"tokens": tokens}))
}

async fn apply_template(State(fake): State<Shared>, Json(body): Json<Value>) -> Json<Value> {
    let mut f = fake.lock().expect("lock");
    f.bodies.push(("/apply-template".into(), body.clone()));
    let user = body["messages"][0]["content"].as_str().unwrap_or("");
    let think = if f.thinking_template { "<think>\n" } else { "" };
    Json(
        json!({"prompt": format!("<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n{think}answer=")}),
    )
}

async fn chat(State(fake): State<Shared>, Json(body): Json<Value>) -> Json<Value> {
    let mut f = fake.lock().expect("lock");
    f.bodies.push(("/v1/chat/completions".into(), body.clone()));
    let ids: Vec<u64> = body["logit_bias"]
        .as_array()
        .expect("logit_bias")
        .iter()
        .map(|pair| pair[0].as_u64().expect("id"))
        .collect();
    let n = ids.len();
    let position = if body["post_sampling_probs"] == json!(true) {
        let top: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| json!({"id": id, "token": "x", "prob": masked_p(i, n)}))
            .collect();
        json!({"id": ids[0], "token": "x", "prob": masked_p(0, n), "top_probs": top})
    } else {
        let keep = if f.drop_last_option { n - 1 } else { n };
        let mut top: Vec<Value> = ids[..keep]
            .iter()
            .enumerate()
            .map(|(i, id)| json!({"id": id, "token": "x", "logprob": raw_p(i).ln()}))
            .collect();
        top.insert(
            0,
            json!({"id": 623, "token": " \"", "logprob": (0.5f64).ln()}),
        );
        json!({"id": 623, "token": " \"", "logprob": (0.5f64).ln(), "top_logprobs": top})
    };
    Json(json!({
        "model": "gemma-3-270m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "answer=0"}, "logprobs": {"content": [position]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 40}},
    }))
}

async fn start_fake(fake: FakeLlama) -> (String, Shared) {
    let shared: Shared = Arc::new(Mutex::new(fake));
    let app = Router::new()
        .route("/tokenize", post(tokenize))
        .route("/apply-template", post(apply_template))
        .route("/v1/chat/completions", post(chat))
        .with_state(shared.clone());
    let addr = common::spawn_app(app).await;
    (format!("http://{addr}/v1"), shared)
}

fn four_options() -> Value {
    json!({"state": "s", "temperature": 1, "questions": {"q": {"type": "choice", "instructions": "Which?",
        "criteria": {"a": null, "b": null, "c": null, "d": null}}}})
}

/// Starts `fake` and a service in front of it with `extra` flags; returns them with the
/// service's response to [`four_options`].
async fn ask_four(fake: FakeLlama, extra: &[&str]) -> (Shared, common::Service, reqwest::Response) {
    let (url, fake) = start_fake(fake).await;
    // The fake's `/tokenize` knows only digits: the table is named, not built (`auto`).
    let flags = [&["--token-table", "gemma-3"], extra].concat();
    let service = common::start(common::llamacpp_config(&url, &flags)).await;
    let response = service.ask(&four_options()).await;
    (fake, service, response)
}

/// When every option is in the raw top-K, one read gives the renormalised options and the
/// option mass Σ p; the request carries the logit_bias mask on the Gemma 3 digit ids.
#[tokio::test]
async fn one_raw_read_gives_probabilities_and_mass() {
    let (fake, _service, reply) = ask_four(FakeLlama::default(), &[]).await;
    assert_eq!(reply.status(), 200);
    let body: Value = reply.json().await.expect("json");
    let answer = &body["answers"]["q"];
    let total: f64 = (0..4).map(raw_p).sum();
    for (i, label) in ["a", "b", "c", "d"].iter().enumerate() {
        let p = answer["probabilities"][label].as_f64().expect("p");
        assert!((p - raw_p(i) / total).abs() < 1e-12, "{label}: {p}");
    }
    assert!((answer["option_mass"].as_f64().expect("mass") - total).abs() < 1e-12);
    assert!(answer.get("option_mass_unknown").is_none());
    assert_eq!(body["usage"]["upstream_requests"], 1);
    assert_eq!(body["usage"]["cached_tokens"], 40);
    assert_eq!(body["model"], "gemma-3-270m");
    let f = fake.lock().expect("lock");
    let chat = *f.at("/v1/chat/completions").first().expect("a read");
    assert_eq!(
        chat["logit_bias"],
        json!([
            [DIGITS[0], 100.0],
            [DIGITS[1], 100.0],
            [DIGITS[2], 100.0],
            [DIGITS[3], 100.0]
        ])
    );
    assert_eq!(chat["top_logprobs"], 1000);
    assert_eq!(chat["temperature"], 1.0);
    assert_eq!(chat["top_k"], 0);
    assert_eq!(chat["cache_prompt"], true);
    assert_eq!(chat["continue_final_message"], true);
    assert_eq!(
        chat["messages"][1],
        json!({"role": "assistant", "content": "answer="})
    );
    assert!(
        chat.get("allowed_token_ids").is_none(),
        "no silently ignored vLLM extras"
    );
}

/// An option outside the raw top-K: a second read with `post_sampling_probs` gives the
/// masked distribution, and the answer says the option mass is unknown instead of
/// reporting a number that is not the mass.
#[tokio::test]
async fn an_option_outside_the_top_k_falls_back_and_says_the_mass_is_unknown() {
    let fake = FakeLlama {
        drop_last_option: true,
        ..FakeLlama::default()
    };
    let (fake, _service, reply) = ask_four(fake, &["--cache-prompt", "false"]).await;
    assert_eq!(reply.status(), 200);
    let body: Value = reply.json().await.expect("json");
    let answer = &body["answers"]["q"];
    for (i, label) in ["a", "b", "c", "d"].iter().enumerate() {
        let p = answer["probabilities"][label].as_f64().expect("p");
        assert!((p - masked_p(i, 4)).abs() < 1e-12, "{label}: {p}");
    }
    assert!(answer.get("option_mass").is_none(), "{answer}");
    assert_eq!(answer["option_mass_unknown"], true);
    assert_eq!(body["usage"]["upstream_requests"], 2);
    let f = fake.lock().expect("lock");
    let chats = f.at("/v1/chat/completions");
    assert_eq!(chats.len(), 2);
    assert_eq!(chats[1]["post_sampling_probs"], true);
    assert_eq!(chats[0]["cache_prompt"], false);
}

/// A chat template that opens a reasoning block before `answer=` is refused: the model is
/// disabled with 503 `system_one_token_table_mismatch`, and no read is sent.
#[tokio::test]
async fn a_template_that_opens_a_reasoning_block_is_refused() {
    let fake = FakeLlama {
        thinking_template: true,
        ..FakeLlama::default()
    };
    let (fake, service, reply) = ask_four(fake, &[]).await;
    assert_eq!(reply.status(), 503);
    assert!(reply.headers().get("retry-after").is_some());
    let body: Value = reply.json().await.expect("json");
    assert_eq!(body["error"]["code"], "system_one_token_table_mismatch");
    let ready = service
        .client
        .get(service.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 503);
    let f = fake.lock().expect("lock");
    assert!(f.at("/v1/chat/completions").is_empty());
}

/// `--disable-thinking` sends `chat_template_kwargs: {"enable_thinking": false}` with every
/// read and with the template check; the live check tokenizes through `/tokenize`
/// without special tokens.
#[tokio::test]
async fn disable_thinking_reaches_the_template() {
    let (fake, _service, reply) = ask_four(FakeLlama::default(), &["--disable-thinking"]).await;
    assert_eq!(reply.status(), 200);
    let f = fake.lock().expect("lock");
    let kwargs = json!({"enable_thinking": false});
    let template = *f.at("/apply-template").first().expect("template check");
    assert_eq!(template["chat_template_kwargs"], kwargs);
    let chat = *f.at("/v1/chat/completions").first().expect("read");
    assert_eq!(chat["chat_template_kwargs"], kwargs);
    let tokenized = f.at("/tokenize");
    assert_eq!(
        tokenized.len(),
        1 + 10 + 100 + 255,
        "the prefix, 10 labels and the 355 multi-token labels of gemma-3"
    );
    assert!(tokenized.iter().all(|b| b["add_special"] == false));
}
