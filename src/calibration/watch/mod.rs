//! The calibration watch: how well the served probabilities hold up over time, per API key,
//! model and question shape (type, option count, layout) and per class of answer (`raw`,
//! `prior`: corrected by the position prior, `profile`: covered by a calibration profile;
//! kept apart, as `calibrate --from-ledger` keeps them), over UTC hours, days and weeks, the
//! last few hundred answers ([`recent`]: a shift judged after as many answers whatever the
//! rate) and a reference window (one the operator names, or the first full week seen).
//!
//! Every answer adds to running sums ([`sums`]) in constant work; an outcome adds its
//! answer's part of the outcome figures, and a replaced outcome takes the old part back
//! first, so an outcome counts once however often it is replaced. Memory is bounded: a
//! fixed size per window and shape ([`sums::MAX_OPTION_FIGURES`] bounds the per-option
//! parts), a fixed number of windows per shape ([`ring`], [`recent`]), and at most
//! [`Settings::max_shapes`] shapes (answers of further shapes are counted as dropped).
//! Figures are computed from the sums when asked ([`figures`]): without outcomes, the mean
//! confidence and `option_mass`, the confidence histogram and its PSI against the
//! reference, CBPE's expected accuracy, the label prior by EM ([`em`]) and the share under
//! the escalation threshold; with outcomes, accuracy, ECE (15 equal-width and 15
//! equal-mass bins), Brier, NLL, the reliability bins and per-option figures.
//!
//! Pure and in memory: the ledger feeds it (`ledger/watch.rs`) from its commits, its
//! outcomes and, at start-up, one scan of its records.

mod answer;
mod book;
mod cells;
pub mod charts;
mod em;
pub mod figures;
mod point;
pub mod recent;
pub mod ring;
pub mod sums;

pub use answer::{Answer, Class, Shape};
pub use book::{Query, Reference, Settings, ShapeFigures, Watch, Window, Windowed, MAX_SHAPES};
pub use figures::Figures;
pub use ring::Span;

#[cfg(test)]
mod tests;
