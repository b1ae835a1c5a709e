//! The EM cells of a window: its answers' probability vectors, grouped so the label prior
//! can be re-estimated (`em.rs`) in work per cell, not per answer.

use std::collections::HashMap;

use super::point::{fine_bin, Point, MAX_OPTION_FIGURES};

/// A cell's key: the vector on the grid (one byte per option, the rest 0), or a coarse
/// cell's ([`COARSE`], answered option, bin). A fixed array, so adding an answer to a cell
/// it falls in allocates nothing (cells are kept only up to [`MAX_OPTION_FIGURES`] options).
type Key = [u8; MAX_OPTION_FIGURES];

/// The EM cells: the answers' probability vectors grouped by the vector rounded to
/// 1/[`EM_GRID`] per option, each cell's count and sum, from which the label prior is
/// re-estimated (`em.rs`). At most [`MAX_CELLS`] such cells; past them an answer joins a
/// coarse cell by (answered option, confidence bin), so memory stays bounded.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Cells {
    pub(super) cells: HashMap<Key, (u32, Vec<f64>)>,
}

/// Steps per unit of the EM cells' grid.
const EM_GRID: f64 = 40.0;
/// Most fine cells of one window (then coarse ones).
const MAX_CELLS: usize = 512;
/// The first byte of a coarse cell's key (a grid step is at most 40).
const COARSE: u8 = u8::MAX;

impl Cells {
    pub(super) fn add(&mut self, p: &Point<'_>) {
        let mut fine: Key = [0; MAX_OPTION_FIGURES];
        for (k, v) in fine.iter_mut().zip(p.probabilities) {
            *k = (v * EM_GRID).round() as u8;
        }
        let key = if self.cells.len() < MAX_CELLS || self.cells.contains_key(&fine) {
            fine
        } else {
            let mut coarse: Key = [0; MAX_OPTION_FIGURES];
            coarse[..3].copy_from_slice(&[COARSE, p.answer as u8, (fine_bin(p.top) / 2) as u8]);
            coarse
        };
        let n = p.probabilities.len();
        let (count, sum) = self.cells.entry(key).or_insert_with(|| (0, vec![0.0; n]));
        *count = count.saturating_add(1);
        for (s, v) in sum.iter_mut().zip(p.probabilities) {
            *s += v;
        }
    }

    pub(super) fn merge(&mut self, other: &Cells) {
        for (key, (count, sum)) in &other.cells {
            let (c, s) = self
                .cells
                .entry(*key)
                .or_insert_with(|| (0, vec![0.0; sum.len()]));
            *c = c.saturating_add(*count);
            for (a, b) in s.iter_mut().zip(sum) {
                *a += b;
            }
        }
    }
}
