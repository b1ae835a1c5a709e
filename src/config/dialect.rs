//! Which upstream a model is served by: the wire dialect and, for a native upstream, its
//! flavor.

use clap::ValueEnum;
use serde::Deserialize;

/// Which wire dialect a backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// vLLM's OpenAI-compatible server with `allowed_token_ids` and `logprob_token_ids`.
    Vllm,
    /// llama.cpp's `llama-server` (the default: the local backend).
    Llamacpp,
    /// Any OpenAI-compatible host (standard fields only), read the way a startup probe
    /// found exact, or refused.
    Openai,
    /// A native System One server (`POST /v1/systemone`): the whole request is forwarded,
    /// in the dialect of its [`Flavor`].
    Systemone,
}

impl BackendKind {
    /// The dialect's name, as `--backend` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Vllm => "vllm",
            BackendKind::Llamacpp => "llamacpp",
            BackendKind::Openai => "openai",
            BackendKind::Systemone => "systemone",
        }
    }
}

/// Which native System One server a `systemone` backend is: each flavor's quirks are in
/// its own file under `src/backend/systemone/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// TypeSafe's API (and another `systemone`): `x-typesafe-request-id`, 422 `detail`
    /// lists, `retry-after-ms`, 529 when overloaded.
    #[default]
    Typesafe,
    /// Ollama's `/v1/systemone`: `{"error": …}` bodies, images as a base64 list,
    /// `keep_alive` from configuration only, 2–26 options.
    Ollama,
    /// vLLM's native `/v1/systemone`: 501 for a model it cannot serve natively.
    Vllm,
}

impl Flavor {
    /// The flavor's name, as `--flavor` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavor::Typesafe => "typesafe",
            Flavor::Ollama => "ollama",
            Flavor::Vllm => "vllm",
        }
    }
}
