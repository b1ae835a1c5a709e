//! A proxy that makes llama-server a post-bias OpenAI-compatible host with a top-K cap, as
//! hosted APIs are: it adds `post_sampling_probs: true` and a neutral sampler (`top_k: 0,
//! min_p: 0`) to every chat request, answers `top_logprobs` above the cap with a 400, and
//! turns the answer's `top_probs` (probabilities after the bias) into `top_logprobs`.
//! Shared by `tests/live/openai_llama.rs` and `benches/openai.rs`.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// The proxy's settings: llama-server's base URL (ending in `/v1`) and the cap.
#[derive(Clone)]
struct Upstream {
    client: reqwest::Client,
    base: String,
    cap: u64,
}

/// Starts the proxy on 127.0.0.1:0 in front of llama-server at `base` (ending in `/v1`);
/// returns its base URL (ending in `/v1`).
pub async fn start(base: &str, cap: u64) -> String {
    let upstream = Upstream {
        client: reqwest::Client::new(),
        base: base.trim_end_matches('/').to_string(),
        cap,
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(proxy))
        .with_state(upstream);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

/// One chat request, rewritten and forwarded; its answer's probabilities as logprobs.
async fn proxy(State(up): State<Upstream>, Json(mut body): Json<Value>) -> Response {
    if body["top_logprobs"].as_u64().unwrap_or(0) > up.cap {
        return (StatusCode::BAD_REQUEST, "top_logprobs is above the cap").into_response();
    }
    body["post_sampling_probs"] = json!(true);
    body["top_k"] = json!(0);
    body["min_p"] = json!(0);
    let answer = up
        .client
        .post(format!("{}/chat/completions", up.base))
        .json(&body)
        .send()
        .await;
    let Ok(answer) = answer else {
        return (StatusCode::BAD_GATEWAY, "llama-server unreachable").into_response();
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let Ok(mut value) = answer.json::<Value>().await else {
        return (StatusCode::BAD_GATEWAY, "llama-server answer unreadable").into_response();
    };
    if let Some(content) = value["choices"][0]["logprobs"]["content"].as_array_mut() {
        for position in content {
            as_logprob(position);
            if let Some(mut top) = position.get_mut("top_probs").map(Value::take) {
                if let Some(entries) = top.as_array_mut() {
                    entries.iter_mut().for_each(as_logprob);
                }
                position["top_logprobs"] = top;
            }
        }
    }
    (status, Json(value)).into_response()
}

/// `prob` → `logprob` in one entry.
fn as_logprob(entry: &mut Value) {
    if let Some(p) = entry.get("prob").and_then(Value::as_f64) {
        entry["logprob"] = json!(p.ln());
        if let Some(map) = entry.as_object_mut() {
            map.remove("prob");
        }
    }
}
