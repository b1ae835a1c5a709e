//! The reliability diagram (`--diagram`): every answer's confidence bins and one line per
//! question family, drawn by [`crate::draw`] (the same code as the `/calibration` page's
//! and `calibrate report`'s diagrams).

use std::collections::BTreeMap;

use crate::calibration::fit::{self, Row};
use crate::draw;

/// The equal-width bins of `rows`: each row's top probability, and whether its top option
/// was the label.
fn bins_of(rows: &[Row], bins: usize) -> Vec<fit::Bin> {
    let confidence: Vec<f64> = rows.iter().map(Row::top).collect();
    let correct: Vec<bool> = rows.iter().map(|r| r.argmax() == r.label).collect();
    fit::reliability_bins(&confidence, &correct, bins)
}

/// The reliability diagram: equal-width bins of all answers as bars, one line per family
/// through its non-empty bins, and the diagonal.
pub fn reliability_svg(families: &BTreeMap<String, Vec<Row>>, bins: usize) -> String {
    let all: Vec<Row> = families.values().flatten().cloned().collect();
    let bars: Vec<draw::Bar> = bins_of(&all, bins)
        .iter()
        .map(|b| draw::Bar {
            lo: b.lo,
            count: b.count as u64,
            confidence: b.confidence,
            accuracy: b.accuracy,
        })
        .collect();
    let lines: Vec<draw::Line> = families
        .iter()
        .map(|(name, rows)| draw::Line {
            name: name.clone(),
            points: bins_of(rows, bins)
                .iter()
                .filter(|b| b.count > 0)
                .map(|b| (b.confidence, b.accuracy))
                .collect(),
            n: rows.len(),
        })
        .collect();
    draw::reliability(bins, &bars, &lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_bars_lines_and_legend() {
        let mut f = BTreeMap::new();
        f.insert(
            "a<b".to_string(),
            vec![
                Row::new(vec![0.9, 0.1], 0).expect("row"),
                Row::new(vec![0.3, 0.7], 0).expect("row"),
            ],
        );
        let svg = reliability_svg(&f, 10);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<polyline") && svg.contains("a&lt;b (n=2)"));
        assert_eq!(svg.matches("fill=\"#c6dbef\"").count(), 2);
        // Each bar carries its answer count.
        assert_eq!(
            svg.matches("font-size=\"10\" fill=\"#08519c\">1</text>")
                .count(),
            2
        );
    }
}
