//! `calibrate check`: formulas judged on labelled rows, writing nothing.

use super::rows::Groups;
use crate::calibration::fit::{self, Row};
use crate::calibration::Calibration;

/// `--check`: each group's rows judged raw (T = 1) and under each formula at the group's
/// option count (NLL, ECE over 15 equal-size bins), then every group together.
pub(super) fn check_formulas(groups: &Groups, names: &[String]) -> Result<String, String> {
    let formulas: Vec<(&str, Calibration)> = names
        .iter()
        .map(|n| Calibration::load(n).map(|c| (n.as_str(), c)))
        .collect::<Result<_, _>>()?;
    let mut table = String::from("group\tn\trows\tformula\tT\tNLL\tECE\taccuracy\n");
    let mut totals = vec![(0.0, 0usize); formulas.len() + 1];
    for (name, group) in groups {
        let n = group.rows[0].probs.len();
        let temperatures = std::iter::once(("raw", 1.0))
            .chain(formulas.iter().map(|(f, c)| (*f, c.temperature(n))));
        for (k, (formula, t)) in temperatures.enumerate() {
            let tempered: Vec<Row> = group
                .rows
                .iter()
                .map(|r| Row {
                    probs: fit::apply(&r.probs, t, &[]),
                    label: r.label,
                })
                .collect();
            let (nll, m) = (fit::mean_nll(&group.rows, t), fit::metrics(&tempered, 0));
            totals[k].0 += nll * group.rows.len() as f64;
            totals[k].1 += group.rows.len();
            table.push_str(&format!(
                "{name}\t{n}\t{}\t{formula}\t{t:.3}\t{nll:.4}\t{:.4}\t{:.3}\n",
                group.rows.len(),
                m.ece_equal_size_15,
                m.accuracy
            ));
        }
    }
    let labels = std::iter::once("raw").chain(formulas.iter().map(|(f, _)| *f));
    for ((sum, rows), formula) in totals.iter().zip(labels) {
        table.push_str(&format!(
            "all\t\t{rows}\t{formula}\t\t{:.4}\t\t\n",
            sum / *rows as f64
        ));
    }
    Ok(table)
}
