//! One shape's sums as a store keeps them: every value of the estimator
//! ([`PositionStats`]) and of the strength fit ([`StrengthFit`]) is a sum over questions,
//! so replicas (and one process before and after a restart) merge by adding, field by
//! field (Redis `HINCRBYFLOAT`).

use super::stats::PositionStats;
use super::strength::{StrengthFit, GRID, VALUES};

/// A shape's statistics and strength fit: what a store adds and gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeSums {
    /// The estimator's sums.
    pub stats: PositionStats,
    /// The strength fit's sums.
    pub fit: StrengthFit,
}

impl ShapeSums {
    /// Nothing yet, for `n` options.
    pub fn new(n: usize) -> Self {
        ShapeSums {
            stats: PositionStats::new(n),
            fit: StrengthFit::default(),
        }
    }

    /// The option count.
    pub fn options(&self) -> usize {
        self.stats.options()
    }

    /// Whether nothing was added (no sample observed, none scored).
    pub fn is_empty(&self) -> bool {
        self.stats.count == 0 && self.fit.scored == 0
    }

    /// Adds `other` (same option count; another count is ignored).
    pub fn merge(&mut self, other: &ShapeSums) {
        if other.options() == self.options() {
            self.stats.merge(&other.stats);
            self.fit.merge(&other.fit);
        }
    }

    /// `(field, value)` for every sum, named by [`field_names`].
    pub fn fields(&self) -> Vec<(String, f64)> {
        let mut values = self.stats.to_values();
        values.extend(self.fit.to_values());
        field_names(self.options())
            .into_iter()
            .zip(values)
            .collect()
    }

    /// The sums of `n` options from a value per [`field_names`] name, in that order (a
    /// missing field is 0: a store that never had it added); `None` when a value is not
    /// finite or the sums are beyond what samples can make (a store's garbage is never
    /// served).
    pub fn from_values(n: usize, values: &[f64]) -> Option<Self> {
        let split = 3 + n * n + n;
        if values.len() != split + VALUES {
            return None;
        }
        Some(ShapeSums {
            stats: PositionStats::from_values(n, &values[..split])?,
            fit: StrengthFit::from_values(n, &values[split..])?,
        })
    }
}

/// The field names of a shape of `n` options, in [`ShapeSums::from_values`]' order:
/// `count`, `equations`, `sum_sq`, `normal:<row>:<col>`, `rhs:<position>`, `scored`,
/// `gain:<grid>`, `gain_sq:<grid>`, `reads`, `agree:<grid>`. The last `1 + GRID` came
/// later ([`LATER_FIELDS`]): a row written before them reads them as 0.
pub fn field_names(n: usize) -> Vec<String> {
    let mut names: Vec<String> = ["count", "equations", "sum_sq"].map(String::from).to_vec();
    names.extend((0..n * n).map(|k| format!("normal:{}:{}", k / n, k % n)));
    names.extend((0..n).map(|p| format!("rhs:{p}")));
    names.push("scored".into());
    names.extend((0..GRID).map(|g| format!("gain:{g}")));
    names.extend((0..GRID).map(|g| format!("gain_sq:{g}")));
    names.push("reads".into());
    names.extend((0..GRID).map(|g| format!("agree:{g}")));
    names
}

/// Fields at the end of [`field_names`] a store's older rows lack (`reads`, `agree:<grid>`):
/// 0 when missing, so those rows need no migration.
pub const LATER_FIELDS: usize = 1 + GRID;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_travel_by_name_and_merge_by_adding() {
        let reads = [(0, vec![-0.2, -1.8]), (1, vec![-0.3, -1.4])];
        let mut one = ShapeSums::new(2);
        one.fit.score(&reads, &[0.0, 0.0]);
        one.stats.observe(&reads);
        let fields = one.fields();
        assert_eq!(fields.len(), field_names(2).len());
        assert_eq!(fields[0], ("count".to_string(), 1.0));
        let values: Vec<f64> = fields.iter().map(|(_, v)| *v).collect();
        let back = ShapeSums::from_values(2, &values).expect("same layout");
        assert_eq!(back, one);
        let mut twice = back.clone();
        twice.merge(&one);
        assert_eq!((twice.stats.count, twice.fit.scored), (2, 2));
        let (a, b) = (twice.stats.prior(), one.stats.prior());
        assert!(
            (a[0] - b[0]).abs() < 1e-6,
            "the same reads twice: {a:?} {b:?}"
        );
        assert!(ShapeSums::new(3).is_empty() && !one.is_empty());
        assert_eq!(ShapeSums::from_values(3, &values), None);
    }

    #[test]
    fn sums_no_samples_make_are_refused() {
        let reads = [(0, vec![-0.2, -1.8]), (1, vec![-0.3, -1.4])];
        let mut one = ShapeSums::new(2);
        one.fit.score(&reads, &[0.0, 0.0]);
        one.stats.observe(&reads);
        let values: Vec<f64> = one.fields().iter().map(|(_, v)| *v).collect();
        let names = field_names(2);
        let at = |name: &str| names.iter().position(|n| n == name).expect(name);
        for (name, value) in [
            ("rhs:0", 13_158.0),
            ("sum_sq", -1.0),
            ("sum_sq", 1e9),
            ("equations", 1e6),
            ("normal:0:1", 5.0),
            ("count", -3.0),
            ("gain:10", 1e9),
            ("gain_sq:10", -1.0),
            ("scored", f64::NAN),
            ("reads", 3.0),
            ("agree:0", 3.0),
            ("agree:10", -1.0),
        ] {
            let mut v = values.clone();
            v[at(name)] = value;
            assert_eq!(ShapeSums::from_values(2, &v), None, "{name} = {value}");
        }
        // Reads far apart add at most the cap to a sum: what they make is read back.
        let mut far = ShapeSums::new(2);
        far.stats
            .observe(&[(0, vec![0.0, -500.0]), (1, vec![0.0, -500.0])]);
        let v: Vec<f64> = far.fields().iter().map(|(_, v)| *v).collect();
        assert_eq!(ShapeSums::from_values(2, &v), Some(far));
    }
}
