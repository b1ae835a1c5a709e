//! What one answer brings to the sums, and the bins its top probability falls in.

/// Equal-width bins of the figures (reliability, histogram, equal-width ECE).
pub const BINS: usize = 15;
/// Fine bins (four per bin): the equal-mass ECE groups whole fine bins.
pub(super) const FINE: usize = BINS * 4;
/// Most options for which per-option figures and the EM prior are kept (their memory grows
/// with the square of the option count).
pub const MAX_OPTION_FIGURES: usize = 8;

/// The fine bin of a top probability: bin `i` of [`BINS`] holds `(i/15, (i+1)/15]` (0 in
/// the first), as `calibration::fit::metrics::reliability_bins` does; `(c·15)·4` is
/// exact, so a fine bin never straddles a bin's edge.
pub(super) fn fine_bin(c: f64) -> usize {
    ((c * BINS as f64 * 4.0).ceil() as usize).clamp(1, FINE) - 1
}

/// What one answer brings, checked finite ([`super::Answer::checked`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Point<'a> {
    pub(super) probabilities: &'a [f64],
    /// The answered option (the most probable).
    pub(super) answer: usize,
    /// The answered option's probability (what calibration calls confidence).
    pub(super) top: f64,
    /// The service's `confidence` (1 − H/ln n), which escalation compares.
    pub(super) confidence: f64,
    pub(super) option_mass: Option<f64>,
    /// Under the model's escalation threshold (`None`: it has none).
    pub(super) below: Option<bool>,
}
