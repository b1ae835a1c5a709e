//! [`Limits`]: the sizes a request may reach.

use clap::Args;

use super::parse::clap_defaults;

/// Request limits (`docs/reference/flags.md`). Every one is configurable.
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Most questions in one request.
    #[arg(long, env = "SYSTEMONE_MAX_QUESTIONS", default_value_t = 64)]
    pub max_questions: usize,
    /// Most options in one choice question (also capped by the model's labels).
    #[arg(long, env = "SYSTEMONE_MAX_OPTIONS", default_value_t = 255)]
    pub max_options: usize,
    /// Most levels in one score question.
    #[arg(long, env = "SYSTEMONE_MAX_LEVELS", default_value_t = 10)]
    pub max_levels: usize,
    /// Most tokens in the state.
    #[arg(long, env = "SYSTEMONE_MAX_STATE_TOKENS", default_value_t = 32_768)]
    pub max_state_tokens: usize,
    /// Most tokens in one question (instructions + criteria).
    #[arg(long, env = "SYSTEMONE_MAX_QUESTION_TOKENS", default_value_t = 16_384)]
    pub max_question_tokens: usize,
    /// Most upstream prompt tokens over all upstream requests of one call.
    #[arg(long, env = "SYSTEMONE_MAX_REQUEST_TOKENS", default_value_t = 200_000)]
    pub max_request_tokens: usize,
    /// Most bytes in a request body, after decompression.
    #[arg(long, env = "SYSTEMONE_MAX_BODY_BYTES", default_value_t = 24 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Most documents in one `/v2/rerank` call (Cohere recommends at most 1,000); they are
    /// asked in batches of `--max-questions`.
    #[arg(long, env = "SYSTEMONE_MAX_RERANK_DOCUMENTS", default_value_t = 1000)]
    pub max_rerank_documents: usize,
    /// Most images in one request (`images` entries plus `assets` entries).
    #[arg(long, env = "SYSTEMONE_MAX_IMAGES", default_value_t = 4)]
    pub max_images: usize,
    /// Most bytes in one image, decoded.
    #[arg(long, env = "SYSTEMONE_MAX_IMAGE_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_image_bytes: usize,
    /// Most bytes in all images of one request together, decoded.
    #[arg(long, env = "SYSTEMONE_MAX_IMAGE_TOTAL_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_image_total_bytes: usize,
}

impl Default for Limits {
    /// The `--max-*` flags' defaults (the contract's limits).
    fn default() -> Self {
        clap_defaults()
    }
}
