//! One window's running sums for one shape: everything a figure needs, added to (and, for a
//! replaced outcome, taken from) in constant work per answer, of a size bounded by the
//! shape. Nothing is kept per answer.

use super::cells::Cells;
use super::point::{fine_bin, Point, FINE};
pub use super::point::{BINS, MAX_OPTION_FIGURES};

/// The EM prior of a window: its cells while the window is open, the estimate once closed.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Prior {
    /// Too many options to keep ([`MAX_OPTION_FIGURES`]).
    None,
    Open(Cells),
    /// Estimated when the window closed (`None`: no reference then, or no answers), with
    /// the answers it was over.
    Closed(Option<Vec<f64>>, u64),
}

/// One window's sums.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sums {
    pub(super) options: usize,
    pub(super) answers: u64,
    pub(super) confidence: f64,
    pub(super) top: f64,
    pub(super) mass_answers: u64,
    pub(super) mass: f64,
    pub(super) threshold_answers: u64,
    pub(super) below: u64,
    /// Per fine bin: answers and their top probabilities' sum.
    pub(super) fine_answers: [u32; FINE],
    pub(super) fine_top: [f64; FINE],
    /// The probability vectors' sum (≤ [`MAX_OPTION_FIGURES`] options, else empty).
    pub(super) posterior: Vec<f64>,
    pub(super) prior: Prior,
    pub(super) outcomes: u64,
    pub(super) correct: u64,
    pub(super) brier: f64,
    pub(super) nll: f64,
    /// Per fine bin, over answers with an outcome: count, top sum, right answers.
    pub(super) fine_outcomes: [u32; FINE],
    pub(super) fine_outcome_top: [f64; FINE],
    pub(super) fine_right: [u32; FINE],
    /// Per option over answers with an outcome: probability sum, times it was the outcome.
    pub(super) option_p: Vec<f64>,
    pub(super) option_hits: Vec<u64>,
}

/// Probabilities below this are taken as it in the NLL (a zero would make it infinite).
pub(super) const NLL_FLOOR: f64 = 1e-12;

impl Sums {
    pub(super) fn new(options: usize) -> Self {
        let kept = if options <= MAX_OPTION_FIGURES {
            options
        } else {
            0
        };
        Sums {
            options,
            answers: 0,
            confidence: 0.0,
            top: 0.0,
            mass_answers: 0,
            mass: 0.0,
            threshold_answers: 0,
            below: 0,
            fine_answers: [0; FINE],
            fine_top: [0.0; FINE],
            posterior: vec![0.0; kept],
            prior: if kept > 0 {
                Prior::Open(Cells::default())
            } else {
                Prior::None
            },
            outcomes: 0,
            correct: 0,
            brier: 0.0,
            nll: 0.0,
            fine_outcomes: [0; FINE],
            fine_outcome_top: [0.0; FINE],
            fine_right: [0; FINE],
            option_p: vec![0.0; kept],
            option_hits: vec![0; kept],
        }
    }

    pub(super) fn add_answer(&mut self, p: &Point<'_>) {
        self.answers += 1;
        self.confidence += p.confidence;
        self.top += p.top;
        if let Some(m) = p.option_mass {
            self.mass_answers += 1;
            self.mass += m;
        }
        if let Some(below) = p.below {
            self.threshold_answers += 1;
            self.below += u64::from(below);
        }
        let f = fine_bin(p.top);
        self.fine_answers[f] = self.fine_answers[f].saturating_add(1);
        self.fine_top[f] += p.top;
        for (s, v) in self.posterior.iter_mut().zip(p.probabilities) {
            *s += v;
        }
        if let Prior::Open(cells) = &mut self.prior {
            cells.add(p);
        }
    }

    /// Empties the sums, keeping their room: the recent window refills its oldest block
    /// this way, so a block's turn allocates nothing once its cells' map has grown.
    pub(super) fn clear(&mut self) {
        self.answers = 0;
        self.confidence = 0.0;
        self.top = 0.0;
        self.mass_answers = 0;
        self.mass = 0.0;
        self.threshold_answers = 0;
        self.below = 0;
        self.fine_answers = [0; FINE];
        self.fine_top = [0.0; FINE];
        self.posterior.iter_mut().for_each(|x| *x = 0.0);
        match &mut self.prior {
            Prior::Open(cells) => cells.clear(),
            Prior::Closed(..) => self.prior = Prior::Open(Cells::default()),
            Prior::None => {}
        }
        self.outcomes = 0;
        self.correct = 0;
        self.brier = 0.0;
        self.nll = 0.0;
        self.fine_outcomes = [0; FINE];
        self.fine_outcome_top = [0.0; FINE];
        self.fine_right = [0; FINE];
        self.option_p.iter_mut().for_each(|x| *x = 0.0);
        self.option_hits.iter_mut().for_each(|x| *x = 0);
    }

    /// Adds (`sign` 1) or takes back (`sign` −1: the outcome was replaced) the outcome
    /// `truth` of the answer `p`.
    pub(super) fn outcome(&mut self, p: &Point<'_>, truth: usize, sign: i8) {
        let right = p.answer == truth;
        let brier: f64 = p
            .probabilities
            .iter()
            .enumerate()
            .map(|(i, v)| (v - f64::from(u8::from(i == truth))).powi(2))
            .sum();
        let nll = -p
            .probabilities
            .get(truth)
            .copied()
            .unwrap_or(0.0)
            .max(NLL_FLOOR)
            .ln();
        let f = fine_bin(p.top);
        let s = f64::from(sign);
        let step = |n: &mut u64| {
            *n = if sign > 0 {
                n.saturating_add(1)
            } else {
                n.saturating_sub(1)
            }
        };
        let step32 = |n: &mut u32| {
            *n = if sign > 0 {
                n.saturating_add(1)
            } else {
                n.saturating_sub(1)
            }
        };
        step(&mut self.outcomes);
        if right {
            step(&mut self.correct);
            step32(&mut self.fine_right[f]);
        }
        self.brier += s * brier;
        self.nll += s * nll;
        step32(&mut self.fine_outcomes[f]);
        self.fine_outcome_top[f] += s * p.top;
        for (o, v) in self.option_p.iter_mut().zip(p.probabilities) {
            *o += s * v;
        }
        if let Some(h) = self.option_hits.get_mut(truth) {
            step(h);
        }
    }

    /// Adds `other` (another key's sums of the same shape and window) into these. A closed
    /// EM estimate merges as the answer-weighted mean of the two.
    pub(super) fn merge(&mut self, other: &Sums) {
        self.answers += other.answers;
        self.confidence += other.confidence;
        self.top += other.top;
        self.mass_answers += other.mass_answers;
        self.mass += other.mass;
        self.threshold_answers += other.threshold_answers;
        self.below += other.below;
        add_counts(&mut self.fine_answers, &other.fine_answers);
        add_sums(&mut self.fine_top, &other.fine_top);
        add_sums(&mut self.posterior, &other.posterior);
        self.prior = merge_prior(&self.prior, self.answers - other.answers, &other.prior);
        self.outcomes += other.outcomes;
        self.correct += other.correct;
        self.brier += other.brier;
        self.nll += other.nll;
        add_counts(&mut self.fine_outcomes, &other.fine_outcomes);
        add_sums(&mut self.fine_outcome_top, &other.fine_outcome_top);
        add_counts(&mut self.fine_right, &other.fine_right);
        add_sums(&mut self.option_p, &other.option_p);
        for (a, b) in self.option_hits.iter_mut().zip(&other.option_hits) {
            *a += b;
        }
    }

    /// Fixes the EM estimate (`reference`: the reference window's mean posterior) and lets
    /// the cells go: a closed window takes no more answers in the usual course.
    pub(super) fn close(&mut self, reference: Option<&[f64]>) {
        if let Prior::Open(cells) = &self.prior {
            let estimate = reference.and_then(|r| super::em::prior(cells, r));
            self.prior = Prior::Closed(estimate, self.answers);
        }
    }
}

fn merge_prior(mine: &Prior, my_answers: u64, other: &Prior) -> Prior {
    match (mine, other) {
        (Prior::Open(a), Prior::Open(b)) => {
            let mut cells = a.clone();
            cells.merge(b);
            Prior::Open(cells)
        }
        (Prior::Closed(Some(a), n), Prior::Closed(Some(b), m)) => {
            let total = (n + m).max(1) as f64;
            let mixed = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x * *n as f64 + y * *m as f64) / total)
                .collect();
            Prior::Closed(Some(mixed), n + m)
        }
        (Prior::Closed(Some(a), n), Prior::Closed(None, 0)) => Prior::Closed(Some(a.clone()), *n),
        (Prior::Closed(None, 0), Prior::Closed(Some(b), m)) => Prior::Closed(Some(b.clone()), *m),
        (Prior::None, _) | (_, Prior::None) => Prior::None,
        _ => Prior::Closed(None, my_answers),
    }
}

fn add_counts<const N: usize>(a: &mut [u32; N], b: &[u32; N]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

fn add_sums(a: &mut [f64], b: &[f64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}
