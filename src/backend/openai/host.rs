//! [`Host`]: what the probe found out about the host, and [`ProbeState`], the probe's
//! standing verdict.

use tokio::time::Instant;

use crate::backend::host_report::{LogitBias, Prefill, Probe, Strategy, TokenIds};
use crate::backend::{BackendError, HostReport};

/// What the probe found out about the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Host {
    /// Most `top_logprobs` entries one answer carries.
    pub(super) cap: usize,
    /// How its entries name tokens.
    pub(super) ids: TokenIds,
    /// What `logit_bias` does to its logprobs.
    pub(super) bias: LogitBias,
    /// What continues the `answer=` prefill.
    pub(super) prefill: Prefill,
}

impl Host {
    /// The read strategy that follows from what `logit_bias` does.
    pub(super) fn strategy(&self) -> Strategy {
        match self.bias {
            LogitBias::AfterLogprobs => Strategy::PostBias,
            LogitBias::BeforeLogprobs | LogitBias::Ignored => Strategy::RawTopK,
        }
    }

    pub(super) fn report(&self) -> HostReport {
        HostReport {
            probe: Probe::Ready,
            strategy: Some(self.strategy()),
            refused: None,
            top_logprobs: Some(self.cap),
            token_ids: Some(self.ids),
            logit_bias: Some(self.bias),
            prefill: Some(self.prefill),
        }
    }
}

/// The probe's standing verdict.
#[derive(Debug, Clone)]
pub(super) enum ProbeState {
    /// No probe has concluded: none finished yet (`None`), or the last one could not
    /// conclude, for this reason (refused requests are answered with it).
    Unprobed(Option<BackendError>),
    Ready(Host),
    /// The host cannot be read exactly; since when.
    Refused {
        what: String,
        since: Instant,
    },
}

/// The report before any probe concluded.
pub(super) fn empty_report() -> HostReport {
    HostReport {
        probe: Probe::Unprobed,
        strategy: None,
        refused: None,
        top_logprobs: None,
        token_ids: None,
        logit_bias: None,
        prefill: None,
    }
}
