//! The live tier: the suites that need what `scripts/test.sh` fetches and starts (a real
//! llama-server and vLLM serving Gemma 3 270M, redis-server, PostgreSQL, headless Chromium,
//! the official Python and npm SDKs, the real tokenizers, the SpamAssassin sample), and the
//! preflight that says which of them this machine can run (`scripts/preflight.sh`). Each
//! test fails at once, naming the script that provides what it lacks, when its environment
//! variable is not set (`setup::require`); none skips.

/// The fakes' harness, here only under the fake vLLM (see above).
#[allow(dead_code)]
#[path = "../support/fake_server.rs"]
mod fake_server;
/// The fake vLLM of `tests/support/`, here a plain backend behind the SDKs, the real
/// stores and the browser. Its fault levers (`set_fault`, the `Fault` variants, the tokenizer
/// and context-length knobs) are turned only by the hermetic tier, which builds the same
/// file with dead code denied, so nothing in it goes unused there; hence this one allow.
#[allow(dead_code)]
#[path = "../support/fake_vllm.rs"]
mod fake_vllm;
mod setup;
#[path = "../support/mod.rs"]
mod support;

mod auto_table;
mod calibration_browser;
mod calibration_watch;
mod eval_e2e;
mod eval_recipe;
mod examples;
mod images;
mod ledger;
mod limits_faults;
mod limits_shared;
mod llamacpp_batches;
mod llamacpp_cancel;
mod llamacpp_decisions;
mod llamacpp_exactness;
mod llamacpp_in_flight;
mod llamacpp_labels;
mod llamacpp_ledger;
mod llamacpp_rerank;
mod llamacpp_sdk;
mod llamacpp_shapes;
mod native_upstream;
mod openai_llama;
mod openapi;
mod playground_browser;
mod preflight;
mod prior_shared;
mod profiles;
mod sdk_token;
mod token_check;
mod token_tables;
mod vllm_cache_salt;
mod vllm_real;
mod vllm_traces;
