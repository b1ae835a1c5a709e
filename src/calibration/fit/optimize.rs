//! The two optimisers the fits use: golden-section search in one dimension, and a small
//! limited-memory BFGS on analytic gradients.

/// Minimises `f` on `[lo, hi]` by golden-section search; returns the final midpoint.
pub fn golden_section(f: impl Fn(f64) -> f64, lo: f64, hi: f64, iterations: usize) -> f64 {
    let inv_phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (lo, hi);
    let mut c = b - inv_phi * (b - a);
    let mut d = a + inv_phi * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..iterations {
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - inv_phi * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + inv_phi * (b - a);
            fd = f(d);
        }
    }
    (a + b) / 2.0
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Minimises a smooth function given as `x → (f(x), ∇f(x))` by limited-memory BFGS
/// (memory 10, two-loop recursion, Armijo backtracking). Stops after `max_iter` steps, when
/// the gradient norm falls below `tol`, or when no step decreases `f`.
pub fn lbfgs(
    f: impl Fn(&[f64]) -> (f64, Vec<f64>),
    x0: Vec<f64>,
    max_iter: usize,
    tol: f64,
) -> Vec<f64> {
    const MEMORY: usize = 10;
    let mut x = x0;
    let (mut fx, mut g) = f(&x);
    let mut hist: std::collections::VecDeque<(Vec<f64>, Vec<f64>, f64)> =
        std::collections::VecDeque::new();
    for _ in 0..max_iter {
        if dot(&g, &g).sqrt() < tol {
            break;
        }
        // Two-loop recursion: d = −H·g.
        let mut q = g.clone();
        let mut alphas = Vec::with_capacity(hist.len());
        for (s, y, rho) in hist.iter().rev() {
            let a = rho * dot(s, &q);
            for (qi, yi) in q.iter_mut().zip(y) {
                *qi -= a * yi;
            }
            alphas.push(a);
        }
        let gamma = match hist.back() {
            Some((s, y, _)) => dot(s, y) / dot(y, y),
            None => 1.0 / dot(&g, &g).sqrt().max(1.0),
        };
        for qi in q.iter_mut() {
            *qi *= gamma;
        }
        for ((s, y, rho), a) in hist.iter().zip(alphas.iter().rev()) {
            let beta = rho * dot(y, &q);
            for (qi, si) in q.iter_mut().zip(s) {
                *qi += si * (a - beta);
            }
        }
        let mut d: Vec<f64> = q.iter().map(|v| -v).collect();
        let mut slope = dot(&d, &g);
        if slope >= 0.0 {
            hist.clear();
            d = g.iter().map(|v| -v).collect();
            slope = -dot(&g, &g);
        }
        let mut step = 1.0;
        let mut accepted = None;
        for _ in 0..60 {
            let xn: Vec<f64> = x.iter().zip(&d).map(|(xi, di)| xi + step * di).collect();
            let (fnew, gnew) = f(&xn);
            if fnew.is_finite() && fnew <= fx + 1e-4 * step * slope {
                accepted = Some((xn, fnew, gnew));
                break;
            }
            step *= 0.5;
        }
        let Some((xn, fnew, gnew)) = accepted else {
            break;
        };
        let s: Vec<f64> = xn.iter().zip(&x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = gnew.iter().zip(&g).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        if sy > 1e-12 {
            if hist.len() == MEMORY {
                hist.pop_front();
            }
            hist.push_back((s, y, 1.0 / sy));
        }
        let done = (fx - fnew).abs() <= 1e-15 * fx.abs().max(1.0);
        x = xn;
        fx = fnew;
        g = gnew;
        if done {
            break;
        }
    }
    x
}
