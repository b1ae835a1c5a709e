//! vLLM's native `/v1/systemone` (0.32 and later, for the model families it reads
//! natively, Qwen 3 among them): it answers 501 for a model it cannot serve natively. That
//! is a refusal of the model, found by a probe at startup (the model's upkeep): the model
//! stays disabled (503 `system_one_backend_unsupported`, `/readyz` says why) rather than
//! answering every request with an error.

use super::quirks::Quirks;
use crate::backend::BackendError;

/// vLLM's native route takes as many options as the contract.
const MAX_OPTIONS: usize = 255;

/// The vLLM native flavor.
#[derive(Debug)]
pub(super) struct VllmNative;

impl Quirks for VllmNative {
    fn max_options(&self) -> usize {
        MAX_OPTIONS
    }

    fn refusal(&self, status: u16, model: &str) -> Option<BackendError> {
        (status == 501).then(|| {
            BackendError::Unsupported(format!(
                "the vLLM upstream does not serve model {model} natively (it answered 501)"
            ))
        })
    }

    fn probes(&self) -> bool {
        true
    }
}
