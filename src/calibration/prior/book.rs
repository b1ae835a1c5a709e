//! A model's book of priors: one estimate per shape, the sampler, and what single reads get.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::shape::PriorShape;
use super::stats::PositionStats;
use super::strength::{Declined, StrengthFit};
use super::sums::ShapeSums;
use crate::config::DEFAULT_PRIOR_SAMPLE_SHARE;

/// Samples a shape takes from every single-read request before the share applies.
pub const WARMUP_SAMPLES: u64 = 4;

/// Shapes one book holds (tenants times frames): a new one past this is neither sampled
/// nor learned, so callers with ever new names cannot grow the book without bound.
pub const MAX_SHAPES: usize = 4096;

/// A model's settings for the correction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriorSettings {
    /// Learn and apply the correction.
    pub enabled: bool,
    /// Share of single-read questions asked once more, rotated by one, to learn from.
    pub sample_share: f64,
}

impl Default for PriorSettings {
    fn default() -> Self {
        PriorSettings {
            enabled: false,
            sample_share: DEFAULT_PRIOR_SAMPLE_SHARE,
        }
    }
}

/// What a single read of a shape gets taken out.
#[derive(Debug, Clone, PartialEq)]
pub struct Correction {
    /// `strength · shrink`, in (0, 1].
    pub weight: f64,
    /// The prior by position (log space, sums to 0).
    pub prior: Vec<f64>,
}

/// One shape's state, for `/metrics` and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeReport {
    /// The shape's label without its tenant (`noul/2/accuracy`).
    pub shape: String,
    /// The tenant's id (empty: an open service's one caller).
    pub tenant: String,
    /// Questions learned from.
    pub samples: u64,
    /// The prior by position.
    pub prior: Vec<f64>,
    /// The fitted strength (0: declined).
    pub strength: f64,
    /// The weight single reads get now.
    pub weight: f64,
    /// Questions the strength was scored on (held out from the prior that scored them).
    pub scored: u64,
    /// Mean held-out gain per scored question at the fitted strength (cross-entropy
    /// against the rotation average, nats; 0 when declined).
    pub gain: f64,
    /// Why single reads are answered raw (`None`: corrected).
    pub declined: Option<Declined>,
    /// Reads scored, and how many of them pick the rotation average's answer raw and
    /// corrected at the strength of most gain.
    pub agreement: Agreement,
}

/// How often scored reads pick their rotation average's answer.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Agreement {
    /// Reads scored.
    pub reads: u64,
    /// Of them, read raw.
    pub raw: u64,
    /// Of them, corrected at the strength of most held-out gain.
    pub corrected: u64,
}

/// One shape's estimate.
#[derive(Debug, Clone)]
struct ShapePrior {
    /// Everything known: the store's sums (when one is configured) plus `pending`.
    sums: ShapeSums,
    /// What this process added since it last handed its sums to the store.
    pending: ShapeSums,
    /// `sums.stats.prior()`, solved once per change rather than once per answer.
    prior: Vec<f64>,
}

impl ShapePrior {
    fn new(n: usize) -> Self {
        ShapePrior {
            sums: ShapeSums::new(n),
            pending: ShapeSums::new(n),
            prior: vec![0.0; n],
        }
    }

    fn weight(&self) -> f64 {
        self.decide().unwrap_or(0.0)
    }

    /// The weight served, or why none: [`StrengthFit::decide`], and a prior of all zeros
    /// (shrunk to nothing) has no gain to serve.
    fn decide(&self) -> Result<f64, Declined> {
        let g = self.sums.fit.decide()?;
        let weight = super::strength::grid_strength(g) * self.sums.stats.shrink(&self.prior);
        (weight > 0.0).then_some(weight).ok_or(Declined::NoGain)
    }
}

/// A model's priors: its settings and one estimate per shape seen. Shared by every request
/// the model serves; a sample is a few `n×n` additions under the lock.
#[derive(Debug, Default)]
pub struct PriorBook {
    settings: PriorSettings,
    state: Mutex<BookState>,
}

#[derive(Debug, Default)]
struct BookState {
    shapes: BTreeMap<PriorShape, ShapePrior>,
    /// The sampler's running share: a question is sampled each time it passes 1, so the
    /// share is met exactly (no randomness for a test to wait on).
    due: f64,
}

impl BookState {
    /// `shape`'s estimate, made when the book has room for it.
    fn entry(&mut self, shape: PriorShape) -> Option<&mut ShapePrior> {
        let room = self.shapes.len() < MAX_SHAPES;
        let n = shape.options;
        match self.shapes.entry(shape) {
            std::collections::btree_map::Entry::Occupied(e) => Some(e.into_mut()),
            std::collections::btree_map::Entry::Vacant(e) => {
                room.then(|| e.insert(ShapePrior::new(n)))
            }
        }
    }
}

impl PriorBook {
    /// An empty book with `settings`.
    pub fn new(settings: PriorSettings) -> Self {
        PriorBook {
            settings,
            state: Mutex::default(),
        }
    }

    /// The model's settings.
    pub fn settings(&self) -> PriorSettings {
        self.settings
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BookState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the next single-read request, whose questions have `shapes`, is asked once
    /// more to learn from: always while one of them is warming up, else at the share.
    pub fn take_sample(&self, shapes: &[PriorShape]) -> bool {
        let mut state = self.state();
        let room = state.shapes.len() < MAX_SHAPES;
        let warming = shapes.iter().any(|s| match state.shapes.get(s) {
            Some(e) => e.sums.stats.count < WARMUP_SAMPLES,
            None => room,
        });
        if warming {
            return true;
        }
        state.due += self.settings.sample_share.clamp(0.0, 1.0);
        let due = state.due >= 1.0;
        if due {
            state.due -= 1.0;
        }
        due
    }

    /// Learns from one question read in two or more orders: `(shift, log-probabilities by
    /// position)` per order. The strength is scored on it first, with the prior that has
    /// not seen it.
    pub fn observe(&self, shape: PriorShape, orders: &[(usize, Vec<f64>)]) {
        let n = shape.options;
        let mut state = self.state();
        let Some(entry) = state.entry(shape) else {
            return;
        };
        let mut one = ShapeSums {
            stats: PositionStats::new(n),
            fit: StrengthFit::default(),
        };
        one.fit.score(orders, &entry.prior);
        one.stats.observe(orders);
        entry.sums.merge(&one);
        entry.pending.merge(&one);
        if one.stats.count > 0 {
            entry.prior = entry.sums.stats.prior();
        }
    }

    /// Takes what this process learned since the last call, per shape, for a store to add
    /// to its sums (shapes with nothing new are left out).
    pub fn take_pending(&self) -> Vec<(PriorShape, ShapeSums)> {
        let mut state = self.state();
        state
            .shapes
            .iter_mut()
            .filter(|(_, e)| !e.pending.is_empty())
            .map(|(shape, e)| {
                let n = shape.options;
                (
                    shape.clone(),
                    std::mem::replace(&mut e.pending, ShapeSums::new(n)),
                )
            })
            .collect()
    }

    /// Gives back what [`PriorBook::take_pending`] took, when the store could not take it.
    pub fn restore_pending(&self, taken: &[(PriorShape, ShapeSums)]) {
        let mut state = self.state();
        for (shape, sums) in taken {
            if let Some(e) = state.shapes.get_mut(shape) {
                e.pending.merge(sums);
            }
        }
    }

    /// Installs the store's sums (every replica's, this one's taken pending included):
    /// each shape's estimate becomes them plus what was learned here since they were
    /// taken. A shape the store does not name keeps its own; sums of the wrong option
    /// count are ignored.
    pub fn install(&self, totals: Vec<(PriorShape, ShapeSums)>) {
        let mut state = self.state();
        for (shape, mut sums) in totals {
            if sums.options() != shape.options {
                continue;
            }
            let Some(entry) = state.entry(shape) else {
                continue;
            };
            sums.merge(&entry.pending);
            entry.prior = sums.stats.prior();
            entry.sums = sums;
        }
    }

    /// What a single read of `shape` gets taken out, or why it is answered raw (a shape
    /// not seen yet has too few scored).
    pub fn correction(&self, shape: &PriorShape) -> Result<Correction, Declined> {
        let state = self.state();
        let entry = state.shapes.get(shape).ok_or(Declined::TooFewScored)?;
        Ok(Correction {
            weight: entry.decide()?,
            prior: entry.prior.clone(),
        })
    }

    /// Every shape's state, in shape order.
    pub fn report(&self) -> Vec<ShapeReport> {
        let state = self.state();
        state
            .shapes
            .iter()
            .map(|(shape, e)| ShapeReport {
                shape: shape.frame(),
                tenant: shape.tenant.clone(),
                samples: e.sums.stats.count,
                prior: e.prior.clone(),
                strength: e.sums.fit.strength(),
                weight: e.weight(),
                scored: e.sums.fit.scored,
                gain: e.sums.fit.mean_gain(),
                declined: e.decide().err(),
                agreement: {
                    let (raw, corrected) = e.sums.fit.agreement();
                    Agreement {
                        reads: e.sums.fit.reads,
                        raw,
                        corrected,
                    }
                },
            })
            .collect()
    }
}

/// Each frame's reports over its tenants, in frame order (for `/metrics`: tenants are not
/// a bounded label): samples and scored questions summed; the weight, prior, strength and
/// gain of the tenant whose single reads are corrected most.
pub fn by_frame(reports: Vec<ShapeReport>) -> Vec<ShapeReport> {
    let mut frames: BTreeMap<String, ShapeReport> = BTreeMap::new();
    for r in reports {
        match frames.get_mut(&r.shape) {
            None => {
                frames.insert(
                    r.shape.clone(),
                    ShapeReport {
                        tenant: String::new(),
                        ..r
                    },
                );
            }
            Some(f) => {
                let (samples, scored) = (f.samples + r.samples, f.scored + r.scored);
                if r.weight > f.weight {
                    *f = ShapeReport {
                        tenant: String::new(),
                        ..r
                    };
                }
                (f.samples, f.scored) = (samples, scored);
            }
        }
    }
    frames.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> PriorShape {
        PriorShape {
            kind: "noul",
            options: 2,
            layout: "accuracy".into(),
            tenant: String::new(),
        }
    }

    #[test]
    fn the_sampler_meets_its_share_exactly() {
        let book = PriorBook::new(PriorSettings {
            enabled: true,
            sample_share: 0.25,
        });
        let warm: Vec<(usize, Vec<f64>)> = vec![(0, vec![0.0, 0.0]), (1, vec![0.0, 0.0])];
        assert!(book.take_sample(&[shape()]), "a new shape warms up");
        for _ in 0..WARMUP_SAMPLES {
            book.observe(shape(), &warm);
        }
        let taken = (0..100).filter(|_| book.take_sample(&[shape()])).count();
        assert_eq!(taken, 25);
    }

    #[test]
    fn a_consistent_prior_is_learned_and_served_shrunk() {
        let book = PriorBook::default();
        assert_eq!(
            book.correction(&shape()),
            Err(Declined::TooFewScored),
            "nothing seen"
        );
        for q in 0..40 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            book.observe(
                shape(),
                &[(0, vec![x + 1.5, -x - 1.5]), (1, vec![-x + 1.5, x - 1.5])],
            );
        }
        let c = book.correction(&shape()).expect("a correction");
        assert!((c.prior[0] - 1.5).abs() < 1e-9, "{c:?}");
        assert!((c.weight - 1.0).abs() < 1e-6, "consistent reads: {c:?}");
        let report = book.report();
        assert_eq!(
            (report[0].shape.as_str(), report[0].samples),
            ("noul/2/accuracy", 40)
        );
    }

    #[test]
    fn a_book_hands_its_new_sums_over_once_and_installs_the_merged_ones() {
        let one = PriorBook::default();
        let other = PriorBook::default();
        let reads = |x: f64| [(0, vec![x + 1.5, -x - 1.5]), (1, vec![-x + 1.5, x - 1.5])];
        for q in 0..20 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            one.observe(shape(), &reads(x));
            other.observe(shape(), &reads(-x));
        }
        let mine = one.take_pending();
        assert_eq!(mine[0].1.stats.count, 20);
        assert!(one.take_pending().is_empty(), "taken once");
        one.restore_pending(&mine);
        assert_eq!(one.take_pending(), mine, "given back when the store failed");
        let mut store = mine[0].1.clone();
        store.merge(&other.take_pending()[0].1);
        one.observe(shape(), &reads(1.0));
        one.install(vec![(shape(), store)]);
        assert_eq!(
            one.report()[0].samples,
            41,
            "both replicas and the one since"
        );
        assert_eq!(one.take_pending()[0].1.stats.count, 1);
        assert!(one.correction(&shape()).is_ok());
    }

    #[test]
    fn each_tenant_learns_and_is_corrected_by_its_own_samples_within_a_bound() {
        let book = PriorBook::default();
        let theirs = PriorShape {
            tenant: super::super::shape::tenant_id(Some("lure")),
            ..shape()
        };
        for q in 0..40 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            book.observe(
                theirs.clone(),
                &[(0, vec![x + 3.0, -x - 3.0]), (1, vec![-x + 3.0, x - 3.0])],
            );
        }
        assert!(book.correction(&theirs).is_ok());
        assert_eq!(
            book.correction(&shape()),
            Err(Declined::TooFewScored),
            "another tenant's book is empty"
        );
        assert!(book.take_sample(&[shape()]), "and warms up on its own");
        let frames = by_frame(book.report());
        assert_eq!((frames.len(), frames[0].samples), (1, 40));
        assert_eq!(frames[0].tenant, "", "no tenant in a metric");
        let full = PriorBook::default();
        for t in 0..MAX_SHAPES {
            let s = PriorShape {
                tenant: format!("{t:016x}"),
                ..shape()
            };
            full.observe(s, &[(0, vec![0.0, 0.0]), (1, vec![0.0, 0.0])]);
        }
        assert!(!full.take_sample(&[shape()]), "no room: not sampled");
        full.observe(shape(), &[(0, vec![0.0, 0.0]), (1, vec![0.0, 0.0])]);
        assert_eq!(full.report().len(), MAX_SHAPES, "nor learned");
    }

    #[test]
    fn without_a_position_preference_the_book_declines() {
        let book = PriorBook::default();
        for q in 0..40 {
            let x = if q % 2 == 0 { 1.0 } else { -1.0 };
            book.observe(shape(), &[(0, vec![x, -x]), (1, vec![-x, x])]);
        }
        assert_eq!(book.correction(&shape()), Err(Declined::NoGain));
        assert_eq!(book.report()[0].strength, 0.0);
    }
}
