//! The reliability diagram (`--diagram`): a hand-written SVG of every answer's confidence
//! bins and one line per question family.

use std::collections::BTreeMap;

use crate::calibration::fit::{self, Row};

/// The diagram's plot area: a square of this side, inside a margin of [`SVG_PAD`].
const SVG_SIZE: f64 = 400.0;
const SVG_PAD: f64 = 50.0;
/// One colour per family, in turn.
const SVG_COLOURS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// The diagram's x of a confidence.
fn svg_x(v: f64) -> f64 {
    SVG_PAD + v * SVG_SIZE
}

/// The diagram's y of an accuracy.
fn svg_y(v: f64) -> f64 {
    SVG_PAD + (1.0 - v) * SVG_SIZE
}

/// Each row's top probability, and whether its top option was the label.
fn conf_correct(rows: &[Row]) -> (Vec<f64>, Vec<bool>) {
    (
        rows.iter().map(Row::top).collect(),
        rows.iter().map(|r| r.argmax() == r.label).collect(),
    )
}

/// A hand-written SVG reliability diagram: equal-width bins of all answers as bars, one
/// line per family, and the diagonal.
pub fn reliability_svg(families: &BTreeMap<String, Vec<Row>>, bins: usize) -> String {
    let all: Vec<Row> = families.values().flatten().cloned().collect();
    let mut svg = svg_frame(bins);
    svg.push_str(&svg_bars(&all, bins));
    for (i, (name, rows)) in families.iter().enumerate() {
        svg.push_str(&svg_family(i, name, rows, bins));
    }
    svg.push_str("</svg>\n");
    svg
}

/// The head of the diagram: title, plot frame, diagonal, axis labels and ticks.
fn svg_frame(bins: usize) -> String {
    let (size, pad) = (SVG_SIZE, SVG_PAD);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{cx}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">Reliability ({bins} equal-width bins)</text>\n\
         <rect x=\"{pad}\" y=\"{pad}\" width=\"{size}\" height=\"{size}\" fill=\"none\" stroke=\"black\"/>\n\
         <line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y1}\" stroke=\"grey\" stroke-dasharray=\"4 4\"/>\n\
         <text x=\"{cx}\" y=\"{xl}\" text-anchor=\"middle\">confidence (top probability)</text>\n\
         <text x=\"15\" y=\"{cy}\" text-anchor=\"middle\" transform=\"rotate(-90 15 {cy})\">accuracy</text>\n",
        w = size + pad + 160.0,
        h = size + 2.0 * pad,
        cx = pad + size / 2.0,
        cy = pad + size / 2.0,
        x0 = svg_x(0.0),
        y0 = svg_y(0.0),
        x1 = svg_x(1.0),
        y1 = svg_y(1.0),
        xl = size + pad + 35.0,
    );
    for t in 0..=4 {
        let v = t as f64 / 4.0;
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{v}</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{v}</text>\n",
            svg_x(v),
            svg_y(0.0) + 15.0,
            svg_x(0.0) - 5.0,
            svg_y(v) + 4.0
        ));
    }
    svg
}

/// The bars: every answer's bins, each with its count above the axis, and their legend.
fn svg_bars(all: &[Row], bins: usize) -> String {
    let mut svg = String::new();
    let width = SVG_SIZE / bins as f64;
    let (c, k) = conf_correct(all);
    for b in fit::reliability_bins(&c, &k, bins)
        .iter()
        .filter(|b| b.count > 0)
    {
        svg.push_str(&format!(
            "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"#c6dbef\" stroke=\"#6baed6\"><title>{} answers, confidence {:.3}, accuracy {:.3}</title></rect>\n",
            svg_x(b.lo),
            svg_y(b.accuracy),
            width,
            b.accuracy * SVG_SIZE,
            b.count,
            b.confidence,
            b.accuracy
        ));
        // The bin's answer count above the axis, so a bar of one answer is not read as a
        // trend.
        svg.push_str(&format!(
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\" font-size=\"10\" fill=\"#08519c\">{}</text>\n",
            svg_x(b.lo) + width / 2.0,
            svg_y(0.0) - 4.0,
            b.count
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#08519c\">bars: all answers</text>\n<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#08519c\">(number: answers in the bin)</text>\n",
        svg_x(1.0) + 10.0,
        svg_y(0.0) - 16.0,
        svg_x(1.0) + 10.0,
        svg_y(0.0) - 4.0
    ));
    svg
}

/// Family `i`'s line through its bins, its points and its legend entry.
fn svg_family(i: usize, name: &str, rows: &[Row], bins: usize) -> String {
    let colour = SVG_COLOURS[i % SVG_COLOURS.len()];
    let (c, k) = conf_correct(rows);
    let points: Vec<String> = fit::reliability_bins(&c, &k, bins)
        .iter()
        .filter(|b| b.count > 0)
        .map(|b| format!("{:.2},{:.2}", svg_x(b.confidence), svg_y(b.accuracy)))
        .collect();
    let mut svg = format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>\n",
        points.join(" ")
    );
    for p in &points {
        let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
        svg.push_str(&format!(
            "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{colour}\"/>\n"
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{} (n={})</text>\n",
        svg_x(1.0) + 10.0,
        SVG_PAD + 15.0 + 18.0 * i as f64,
        xml_escape(name),
        rows.len()
    ));
    svg
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
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
