//! The label prior of a window re-estimated by EM under prior shift (Saerens, Latinne and
//! Decaestecker 2002): with `π` the reference window's mean posterior, repeat
//! `p'ᵢ(y) ∝ (q(y)/π(y))·pᵢ(y)`, `q(y) = mean pᵢ'(y)` from `q = π` until `q` moves less
//! than [`TOLERANCE`]. The answers enter as the EM cells' mean vectors (`sums::Cells`:
//! vectors rounded to a 1/40 grid), so the work is per cell, not per answer; quapy's
//! `EMQ.EM` on the same answers agrees within 0.01
//! (`tests/fixtures/calibration_watch_reference.json`).

use super::cells::Cells;
use super::point::MAX_OPTION_FIGURES;

/// Largest change of any option's estimate at which EM stops.
const TOLERANCE: f64 = 1e-9;
/// Most EM iterations (quapy's bound).
const MAX_ITERATIONS: usize = 1000;
/// A reference prior share below this is taken as it (no division by zero).
const PRIOR_FLOOR: f64 = 1e-9;

/// The re-estimated prior, or `None` without answers or with a reference of more options
/// than cells keep (the cells are the reference's shape's: its options come first in each
/// cell's sum).
pub(super) fn prior(cells: &Cells, reference: &[f64]) -> Option<Vec<f64>> {
    let n = reference.len();
    if n > MAX_OPTION_FIGURES {
        return None;
    }
    let means: Vec<(f64, &[f64])> = cells
        .cells
        .values()
        .filter(|(c, _)| *c > 0)
        .map(|(c, sum)| (f64::from(*c), &sum[..n]))
        .collect();
    let total: f64 = means.iter().map(|(c, _)| c).sum();
    if n == 0 || total == 0.0 {
        return None;
    }
    let pi: Vec<f64> = reference.iter().map(|p| p.max(PRIOR_FLOOR)).collect();
    let mut q = pi.clone();
    let mut weighted = vec![0.0; n];
    for _ in 0..MAX_ITERATIONS {
        let mut next = vec![0.0; n];
        for (count, sum) in &means {
            for (j, w) in weighted.iter_mut().enumerate() {
                *w = q[j] / pi[j] * (sum[j] / count);
            }
            let s: f64 = weighted.iter().sum();
            if !(s > 0.0 && s.is_finite()) {
                continue;
            }
            for (x, w) in next.iter_mut().zip(&weighted) {
                *x += count * w / s;
            }
        }
        next.iter_mut().for_each(|x| *x /= total);
        let moved = next
            .iter()
            .zip(&q)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        q = next;
        if moved < TOLERANCE {
            break;
        }
    }
    q.iter().all(|x| x.is_finite()).then_some(q)
}
