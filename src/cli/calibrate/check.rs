//! `calibrate check`: formulas judged on labelled rows, writing nothing.

use super::rows::Groups;
use crate::calibration::fit::{self, Row};
use crate::calibration::Calibration;

/// `--check`: each group's rows judged raw (T = 1) and under each formula at the group's
/// option count (NLL, ECE over 15 equal-size bins, ECE over 15 equal-width bins), then every
/// group together.
///
/// The equal-width ECE is the calibration watch's `ece_equal_width_15` (the same bins, the
/// same top probability), printed to 10 decimals so the two can be compared to 1e-9: a
/// group of one question shape from `--from-ledger`, under the formula the service
/// answered with, is the figure `GET /v1/calibration` shows for those answers.
pub(super) fn check_formulas(groups: &Groups, names: &[String]) -> Result<String, String> {
    let formulas: Vec<(&str, Calibration)> = names
        .iter()
        .map(|n| Calibration::load(n).map(|c| (n.as_str(), c)))
        .collect::<Result<_, _>>()?;
    let mut table = String::from("group\tn\trows\tformula\tT\tNLL\tECE\tECE_w15\taccuracy\n");
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
                "{name}\t{n}\t{}\t{formula}\t{t:.3}\t{nll:.4}\t{:.4}\t{:.10}\t{:.3}\n",
                group.rows.len(),
                m.ece_equal_size_15,
                ece_equal_width_15(&tempered),
                m.accuracy
            ));
        }
    }
    let labels = std::iter::once("raw").chain(formulas.iter().map(|(f, _)| *f));
    for ((sum, rows), formula) in totals.iter().zip(labels) {
        table.push_str(&format!(
            "all\t\t{rows}\t{formula}\t\t{:.4}\t\t\t\n",
            sum / *rows as f64
        ));
    }
    Ok(table)
}

/// ECE over 15 equal-width bins of the rows' top probability (normalised), as the watch
/// bins it.
fn ece_equal_width_15(rows: &[Row]) -> f64 {
    let confidence: Vec<f64> = rows.iter().map(Row::top).collect();
    let correct: Vec<bool> = rows.iter().map(|r| r.argmax() == r.label).collect();
    fit::ece_equal_width(&confidence, &correct, 15)
}
