//! The most probable option: what every answer, fit and metric calls "chosen".

/// Index of the most probable option; ties go to the first in option order.
pub fn argmax(p: &[f64]) -> usize {
    let mut best = 0;
    for (i, x) in p.iter().enumerate() {
        if *x > p[best] {
            best = i;
        }
    }
    best
}
