//! Shared test support: the fake vLLM server and a service started against it on port 0.

#![allow(dead_code)]

pub mod fake_vllm;

use std::net::SocketAddr;

use clap::Parser;
use systemone::config::{Cli, Command, ServeConfig};
use systemone::AppState;

/// A service running on 127.0.0.1:0 in the current runtime.
pub struct Service {
    pub addr: SocketAddr,
    pub state: AppState,
    pub client: reqwest::Client,
}

impl Service {
    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs a JSON value to `/v1/systemone`.
    pub async fn ask(&self, body: &serde_json::Value) -> reqwest::Response {
        self.client
            .post(self.url("/v1/systemone"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("service answers")
    }
}

/// The serve configuration for a backend at `backend_url`, with extra flags.
pub fn config(backend_url: &str, extra: &[&str]) -> ServeConfig {
    let mut args = vec![
        "systemone",
        "serve",
        "--backend",
        "vllm",
        "--backend-url",
        backend_url,
        "--token-table",
        "golden-fake",
        "--model",
        "glm-5.3-flash",
    ];
    args.extend_from_slice(extra);
    match Cli::try_parse_from(args).expect("valid flags").command {
        Command::Serve(config) => *config,
        other => panic!("not serve: {other:?}"),
    }
}

/// Starts the service with `config`.
pub async fn start(config: ServeConfig) -> Service {
    let state = systemone::build_state(&config).expect("state builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = systemone::app(state.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Service {
        addr,
        state,
        client: reqwest::Client::new(),
    }
}
