//! The EM cells of a window: its answers' probability vectors, grouped so the label prior
//! can be re-estimated (`em.rs`) in work per cell, not per answer.

use std::collections::HashMap;

use super::point::{fine_bin, Point};

/// The EM cells: the answers' probability vectors grouped by the vector rounded to
/// 1/[`EM_GRID`] per option, each cell's count and sum, from which the label prior is
/// re-estimated (`em.rs`). At most [`MAX_CELLS`] such cells; past them an answer joins a
/// coarse cell by (answered option, confidence bin), so memory stays bounded.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Cells {
    pub(super) cells: HashMap<Vec<u8>, (u32, Vec<f64>)>,
}

/// Steps per unit of the EM cells' grid.
const EM_GRID: f64 = 40.0;
/// Most fine cells of one window (then coarse ones).
const MAX_CELLS: usize = 512;
/// The first byte of a coarse cell's key (a grid step is at most 40).
const COARSE: u8 = u8::MAX;

impl Cells {
    pub(super) fn add(&mut self, p: &Point<'_>) {
        let fine: Vec<u8> = p
            .probabilities
            .iter()
            .map(|v| (v * EM_GRID).round() as u8)
            .collect();
        let key = if self.cells.len() < MAX_CELLS || self.cells.contains_key(&fine) {
            fine
        } else {
            vec![COARSE, p.answer as u8, (fine_bin(p.top) / 2) as u8]
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
                .entry(key.clone())
                .or_insert_with(|| (0, vec![0.0; sum.len()]));
            *c = c.saturating_add(*count);
            for (a, b) in s.iter_mut().zip(sum) {
                *a += b;
            }
        }
    }
}
