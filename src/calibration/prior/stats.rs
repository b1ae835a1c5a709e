//! The estimator's sufficient statistics: least squares on the differences between the
//! reads of one question in two option orders, which cancel the question's own signal.
//!
//! Read in order `a` (shift `s_a`) and `b`, caller option `i` sits at position
//! `(i − s) mod n` in each. With centred log-probabilities `c = signal_i + b_pos + noise`
//! (centring removes each read's constant), `c_b[pos_b(i)] − c_a[pos_a(i)] = b_{pos_b} −
//! b_{pos_a} + noise`: one equation per option and pair of orders. One order rotated by one
//! against the caller's already links every position, so one extra read identifies the
//! whole prior for any option count; more orders add equations. The normal equations
//! (`n×n` plus `n`) and the counts are sums, so two replicas' statistics merge by adding.

/// Running sums for one shape with `n` options.
#[derive(Debug, Clone, PartialEq)]
pub struct PositionStats {
    /// Questions observed (each with two or more orders).
    pub count: u64,
    /// `AᵀA`, row-major `n×n`: a graph Laplacian over positions.
    normal: Vec<f64>,
    /// `Aᵀd`.
    rhs: Vec<f64>,
    /// `dᵀd` and the number of equations, for the residual variance.
    sum_sq: f64,
    equations: u64,
}

/// The largest difference one equation adds, in nats: a label read more than this apart
/// in two orders (a probability ratio of e³⁰) tells no more about a position than this
/// does, and the cap bounds what any number of samples can sum to
/// ([`PositionStats::from_values`] refuses sums beyond it).
pub const MAX_DIFFERENCE: f64 = 30.0;

/// A small ridge on the normal equations: positions no pair linked (a shift that shares a
/// factor with `n`) get no prior rather than an arbitrary one.
const RIDGE: f64 = 1e-9;

impl PositionStats {
    /// Empty statistics for `n` options.
    pub fn new(n: usize) -> Self {
        PositionStats {
            count: 0,
            normal: vec![0.0; n * n],
            rhs: vec![0.0; n],
            sum_sq: 0.0,
            equations: 0,
        }
    }

    /// The option count.
    pub fn options(&self) -> usize {
        self.rhs.len()
    }

    /// Adds one question's reads: `(shift, log-probabilities by position)` per order, two
    /// or more, each of `n` finite values (anything else is ignored).
    pub fn observe(&mut self, orders: &[(usize, Vec<f64>)]) {
        let n = self.options();
        if orders.len() < 2 || orders.iter().any(|(_, lp)| !usable(lp, n)) {
            return;
        }
        let centred: Vec<(usize, Vec<f64>)> =
            orders.iter().map(|(s, lp)| (*s % n, centre(lp))).collect();
        for (x, (sa, ca)) in centred.iter().enumerate() {
            for (sb, cb) in &centred[x + 1..] {
                self.add_pair((*sa, ca), (*sb, cb));
            }
        }
        self.count += 1;
    }

    /// One equation per option for the orders `a` and `b`.
    fn add_pair(&mut self, (sa, ca): (usize, &[f64]), (sb, cb): (usize, &[f64])) {
        let n = self.options();
        for i in 0..n {
            let (pa, pb) = ((i + n - sa) % n, (i + n - sb) % n);
            if pa == pb {
                continue;
            }
            let d = (cb[pb] - ca[pa]).clamp(-MAX_DIFFERENCE, MAX_DIFFERENCE);
            self.normal[pa * n + pa] += 1.0;
            self.normal[pb * n + pb] += 1.0;
            self.normal[pa * n + pb] -= 1.0;
            self.normal[pb * n + pa] -= 1.0;
            self.rhs[pb] += d;
            self.rhs[pa] -= d;
            self.sum_sq += d * d;
            self.equations += 1;
        }
    }

    /// Adds another replica's statistics of the same option count.
    pub fn merge(&mut self, other: &PositionStats) {
        if other.options() != self.options() {
            return;
        }
        self.count += other.count;
        self.sum_sq += other.sum_sq;
        self.equations += other.equations;
        add(&mut self.normal, &other.normal);
        add(&mut self.rhs, &other.rhs);
    }

    /// The prior by position, in log space, summing to 0 (all zeros before any sample).
    pub fn prior(&self) -> Vec<f64> {
        let n = self.options();
        // `AᵀA + J` (J all ones) pins the constant the differences cannot see: the
        // solution then sums to Σ rhs / n = 0.
        let mut m: Vec<f64> = self.normal.iter().map(|x| x + 1.0).collect();
        for p in 0..n {
            m[p * n + p] += RIDGE;
        }
        solve(m, self.rhs.clone()).unwrap_or_else(|| vec![0.0; n])
    }
}

impl PositionStats {
    /// Every sum, flattened for a store: `count`, `equations`, `sum_sq`, then `AᵀA`
    /// row-major, then `Aᵀd` (see [`super::sums::ShapeSums`] for the names).
    pub fn to_values(&self) -> Vec<f64> {
        let mut v = vec![self.count as f64, self.equations as f64, self.sum_sq];
        v.extend_from_slice(&self.normal);
        v.extend_from_slice(&self.rhs);
        v
    }

    /// The statistics of `n` options from [`PositionStats::to_values`]'s layout; `None`
    /// for the wrong length, a value that is not finite, or sums no samples could make
    /// ([`PositionStats::plausible`]).
    pub fn from_values(n: usize, v: &[f64]) -> Option<Self> {
        if v.len() != 3 + n * n + n || v.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let stats = PositionStats {
            count: v[0].max(0.0).round() as u64,
            equations: v[1].max(0.0).round() as u64,
            sum_sq: v[2],
            normal: v[3..3 + n * n].to_vec(),
            rhs: v[3 + n * n..].to_vec(),
        };
        (v[0] > -0.5 && v[1] > -0.5 && stats.plausible()).then_some(stats)
    }

    /// Whether samples could have made these sums: at most `n³` equations a question
    /// (every pair of at most `n` orders, `n` options each), each adding one to two
    /// diagonal links, minus one to two off-diagonal ones, at most
    /// [`MAX_DIFFERENCE`] to the right-hand side and its square to `sum_sq`.
    fn plausible(&self) -> bool {
        let n = self.options();
        let e = self.equations as f64;
        let slack = 1e-6 * (1.0 + e);
        let within = |x: f64, lo: f64, hi: f64| x >= lo - slack && x <= hi + slack;
        let links = (0..n * n).all(|k| match k / n == k % n {
            true => within(self.normal[k], 0.0, e),
            false => within(self.normal[k], -e, 0.0),
        });
        e <= self.count as f64 * (n * n * n) as f64
            && within(self.sum_sq, 0.0, e * MAX_DIFFERENCE * MAX_DIFFERENCE)
            && self
                .rhs
                .iter()
                .all(|r| within(*r, -e * MAX_DIFFERENCE, e * MAX_DIFFERENCE))
            && links
    }

    /// How much of `prior` (this estimate) to trust: `B / (B + V)` with `B = Σ b²` and `V`
    /// the summed sampling variance of its positions (residual variance over the
    /// equations touching each), a positive-part James–Stein shrink. Consistent reads
    /// make it 1 after one sample; reads whose differences are noise keep it near 0.
    pub fn shrink(&self, prior: &[f64]) -> f64 {
        let n = self.options();
        let free = (self.equations as f64 - (n as f64 - 1.0)).max(1.0);
        let fitted: f64 = prior.iter().zip(&self.rhs).map(|(b, r)| b * r).sum();
        let variance = ((self.sum_sq - fitted) / free).max(0.0);
        let spread: f64 = (0..n)
            .map(|p| self.normal[p * n + p])
            .filter(|links| *links > 0.0)
            .map(|links| 2.0 * variance / links)
            .sum();
        let signal: f64 = prior.iter().map(|b| b * b).sum();
        if signal + spread > 0.0 {
            signal / (signal + spread)
        } else {
            0.0
        }
    }
}

/// `n` finite log-probabilities.
fn usable(lp: &[f64], n: usize) -> bool {
    lp.len() == n && n >= 2 && lp.iter().all(|x| x.is_finite())
}

/// The values minus their mean.
pub(super) fn centre(lp: &[f64]) -> Vec<f64> {
    let mean = lp.iter().sum::<f64>() / lp.len() as f64;
    lp.iter().map(|x| x - mean).collect()
}

fn add(into: &mut [f64], from: &[f64]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

/// Solves `m x = r` (row-major `n×n`) by Gaussian elimination with partial pivoting;
/// `None` when `m` is singular or the result not finite.
fn solve(mut m: Vec<f64>, mut r: Vec<f64>) -> Option<Vec<f64>> {
    let n = r.len();
    for col in 0..n {
        let pivot =
            (col..n).max_by(|a, b| m[a * n + col].abs().total_cmp(&m[b * n + col].abs()))?;
        if m[pivot * n + col].abs() < 1e-12 {
            return None;
        }
        for k in 0..n {
            m.swap(col * n + k, pivot * n + k);
        }
        r.swap(col, pivot);
        for row in col + 1..n {
            let f = m[row * n + col] / m[col * n + col];
            for k in col..n {
                m[row * n + k] -= f * m[col * n + k];
            }
            r[row] -= f * r[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let tail: f64 = (row + 1..n).map(|k| m[row * n + k] * x[k]).sum();
        x[row] = (r[row] - tail) / m[row * n + row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A question's read in the order rotated by `shift`: `signal` by caller option plus
    /// `bias` by position.
    fn read(signal: &[f64], bias: &[f64], shift: usize) -> (usize, Vec<f64>) {
        let n = signal.len();
        let lp = (0..n)
            .map(|p| signal[(p + shift) % n] + bias[p] - 3.0)
            .collect();
        (shift, lp)
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn one_rotated_read_identifies_the_prior_for_any_option_count() {
        for n in [2usize, 3, 4, 7] {
            let bias: Vec<f64> = centre(&(0..n).map(|p| (p * p) as f64 * 0.3).collect::<Vec<_>>());
            let mut stats = PositionStats::new(n);
            for q in 0..5 {
                let signal: Vec<f64> = (0..n).map(|i| ((i + q) % 3) as f64).collect();
                stats.observe(&[read(&signal, &bias, 0), read(&signal, &bias, 1)]);
            }
            assert!(
                close(&stats.prior(), &bias),
                "n={n}: {:?} vs {bias:?}",
                stats.prior()
            );
        }
    }

    #[test]
    fn full_rotations_and_merged_replicas_give_the_same_prior() {
        let bias = centre(&[1.0, 0.0, -0.5, 0.2]);
        let signal = [0.5, 2.0, 0.0, 1.0];
        let mut one = PositionStats::new(4);
        one.observe(&(0..4).map(|s| read(&signal, &bias, s)).collect::<Vec<_>>());
        let mut other = PositionStats::new(4);
        other.observe(&[read(&signal, &bias, 0), read(&signal, &bias, 1)]);
        one.merge(&other);
        assert_eq!(one.count, 2);
        assert!(close(&one.prior(), &bias));
        assert!(
            one.shrink(&one.prior()) > 0.999,
            "consistent reads are trusted"
        );
    }

    #[test]
    fn a_shift_sharing_a_factor_with_n_leaves_the_unlinked_part_at_zero() {
        // Four options read at shifts 0 and 2 link positions 0-2 and 1-3 only.
        let bias = [1.0, 0.0, -1.0, 0.0];
        let mut stats = PositionStats::new(4);
        stats.observe(&[read(&[0.0; 4], &bias, 0), read(&[0.0; 4], &bias, 2)]);
        let prior = stats.prior();
        assert!(prior.iter().all(|x| x.is_finite()));
        assert!((prior.iter().sum::<f64>()).abs() < 1e-6);
    }

    #[test]
    fn the_flattened_sums_give_the_same_statistics_back() {
        let mut stats = PositionStats::new(3);
        stats.observe(&[
            read(&[1.0, 0.0, 2.0], &[0.5, 0.0, -0.5], 0),
            read(&[1.0, 0.0, 2.0], &[0.5, 0.0, -0.5], 1),
        ]);
        let back = PositionStats::from_values(3, &stats.to_values()).expect("same layout");
        assert_eq!(back, stats);
        assert_eq!(PositionStats::from_values(2, &stats.to_values()), None);
        let mut bad = stats.to_values();
        bad[4] = f64::NAN;
        assert_eq!(PositionStats::from_values(3, &bad), None);
    }

    #[test]
    fn nothing_usable_adds_nothing() {
        let mut stats = PositionStats::new(2);
        stats.observe(&[(0, vec![-1.0, -2.0])]);
        stats.observe(&[(0, vec![-1.0, f64::NEG_INFINITY]), (1, vec![-1.0, -2.0])]);
        stats.observe(&[(0, vec![-1.0]), (1, vec![-1.0, -2.0])]);
        assert_eq!((stats.count, stats.prior()), (0, vec![0.0, 0.0]));
    }
}
