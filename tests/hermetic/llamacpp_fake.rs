//! The llama.cpp dialect against a small fake `llama-server`, for what the real Gemma 3
//! 270M server cannot be made to do on demand: an option outside the raw top-K (recovered
//! exactly from the `post_sampling_probs` read), no option in it (the whole-vocabulary
//! read), an option's −∞ or NaN (502), a chat template that opens a reasoning block
//! (refused), and `--disable-thinking` reaching the template.

use crate::support;
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
    /// Leave every option out of the raw top-1000 (a wider read has them all).
    no_option_in_top_k: bool,
    /// Say `null` for the first option's raw logprob: what llama-server's JSON writer
    /// makes of −∞ and NaN.
    non_finite_option: bool,
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

/// The masked distribution the fake's `post_sampling_probs` reports, as a real server's
/// is: the raw probabilities renormalised over the options.
fn masked_p(i: usize, n: usize) -> f64 {
    raw_p(i) / (0..n).map(raw_p).sum::<f64>()
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
        .as_object()
        .expect("logit_bias as OpenAI's map")
        .keys()
        .map(|id| id.parse().expect("an id"))
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
        let wide = body["top_logprobs"].as_u64().unwrap_or(0) > 1000;
        let keep = match (wide, f.no_option_in_top_k, f.drop_last_option) {
            (true, _, _) => n,
            (false, true, _) => 0,
            (false, false, true) => n - 1,
            (false, false, false) => n,
        };
        let mut top: Vec<Value> = ids[..keep]
            .iter()
            .enumerate()
            .map(|(i, id)| json!({"id": id, "token": "x", "logprob": raw_p(i).ln()}))
            .collect();
        if f.non_finite_option {
            top[0]["logprob"] = Value::Null;
        }
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
        "timings": {"cache_n": 40, "prompt_n": 60},
    }))
}

async fn start_fake(fake: FakeLlama) -> (String, Shared) {
    let shared: Shared = Arc::new(Mutex::new(fake));
    let app = Router::new()
        .route("/tokenize", post(tokenize))
        .route("/apply-template", post(apply_template))
        .route("/v1/chat/completions", post(chat))
        .with_state(shared.clone());
    let addr = support::spawn_app(app).await;
    (format!("http://{addr}/v1"), shared)
}

fn four_options() -> Value {
    json!({"state": "s", "temperature": 1, "questions": {"q": {"type": "choice", "instructions": "Which?",
        "criteria": {"a": null, "b": null, "c": null, "d": null}}}})
}

/// Starts `fake` and a service in front of it with `extra` flags; returns them with the
/// service's response to [`four_options`].
async fn ask_four(
    fake: FakeLlama,
    extra: &[&str],
) -> (Shared, support::Service, reqwest::Response) {
    let (url, fake) = start_fake(fake).await;
    // The fake's `/tokenize` knows only digits: the table is named, not built (`auto`).
    let flags = [&["--token-table", "gemma-3"], extra].concat();
    let service = support::start(support::llamacpp_config(&url, &flags)).await;
    let response = service.post_raw(&four_options()).await;
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
    assert_eq!(body["usage"]["evaluated_tokens"], 60, "timings.prompt_n");
    assert_eq!(body["model"], "gemma-3-270m");
    let f = fake.lock().expect("lock");
    let chat = *f.at("/v1/chat/completions").first().expect("a read");
    assert_eq!(
        chat["logit_bias"],
        json!({
            DIGITS[0].to_string(): 100.0,
            DIGITS[1].to_string(): 100.0,
            DIGITS[2].to_string(): 100.0,
            DIGITS[3].to_string(): 100.0
        }),
        "OpenAI's map form, which routers that parse the body (vllm-router) accept"
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

/// The service's answer to [`four_options`] is the fake's raw probabilities renormalised,
/// with their whole mass as `option_mass`: exact, whatever reads it took.
fn assert_exact(body: &Value) {
    let answer = &body["answers"]["q"];
    let total: f64 = (0..4).map(raw_p).sum();
    for (i, label) in ["a", "b", "c", "d"].iter().enumerate() {
        let p = answer["probabilities"][label].as_f64().expect("p");
        assert!((p - raw_p(i) / total).abs() < 1e-12, "{label}: {p}");
    }
    let mass = answer["option_mass"].as_f64().expect("a number");
    assert!((mass - total).abs() < 1e-12, "{answer}");
    assert!(answer.get("option_mass_unknown").is_none(), "{answer}");
}

/// [`four_options`] asked of `fake` with `flags`: answered exactly ([`assert_exact`]) in two
/// upstream reads, whose bodies are returned.
async fn exact_in_two_reads(fake: FakeLlama, flags: &[&str]) -> Vec<Value> {
    let (fake, _service, reply) = ask_four(fake, flags).await;
    assert_eq!(reply.status(), 200);
    let body: Value = reply.json().await.expect("json");
    assert_exact(&body);
    assert_eq!(body["usage"]["upstream_requests"], 2);
    let f = fake.lock().expect("lock");
    let chats: Vec<Value> = f.at("/v1/chat/completions").into_iter().cloned().collect();
    assert_eq!(chats.len(), 2);
    chats
}

/// An option outside the raw top-K: a second read of the same prompt with
/// `post_sampling_probs` gives the masked distribution, from which the missing option's raw
/// log-probability is recovered by the ratio to the most probable option of the raw read:
/// the answer and `option_mass` are the raw read's, exactly.
#[tokio::test]
async fn an_option_outside_the_top_k_is_recovered_exactly() {
    let fake = FakeLlama {
        drop_last_option: true,
        ..FakeLlama::default()
    };
    let chats = exact_in_two_reads(fake, &["--cache-prompt", "false"]).await;
    assert_eq!(chats[1]["post_sampling_probs"], true);
    assert_eq!(chats[0]["cache_prompt"], false);
}

/// No option in the raw top-1000: nothing to recover by, so the raw read is widened to
/// the whole vocabulary (llama-server clamps `top_logprobs` to it), and the answer is
/// exact again.
#[tokio::test]
async fn no_option_in_the_top_k_widens_the_read_to_the_whole_vocabulary() {
    let fake = FakeLlama {
        no_option_in_top_k: true,
        ..FakeLlama::default()
    };
    let chats = exact_in_two_reads(fake, &[]).await;
    assert_eq!(chats[0]["top_logprobs"], 1000);
    assert_eq!(
        chats[1]["top_logprobs"],
        systemone::backend::llamacpp::WHOLE_VOCABULARY
    );
    assert!(chats[1].get("post_sampling_probs").is_none());
}

/// An option whose raw logprob is −∞ or NaN (`null` in llama-server's JSON) is the
/// documented 502 `system_one_upstream_protocol`, never a probability of 0.
#[tokio::test]
async fn a_non_finite_option_logprob_is_a_502() {
    let fake = FakeLlama {
        non_finite_option: true,
        ..FakeLlama::default()
    };
    let (_fake, _service, reply) = ask_four(fake, &[]).await;
    assert_eq!(reply.status(), 502);
    let body: Value = reply.json().await.expect("json");
    assert_eq!(
        body["error"]["code"], "system_one_upstream_protocol",
        "{body}"
    );
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
