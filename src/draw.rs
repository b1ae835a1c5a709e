//! Hand-written SVG charts, one drawing code for every picture the service makes: the
//! reliability diagram `systemone eval` and `systemone calibrate report` write, and the
//! charts of the `/calibration` page (reliability, the confidence histogram, a figure over
//! time). Plain SVG text: no script, no external font or stylesheet, so a page can inline
//! it and a file opens anywhere. A leaf: callers pass numbers and names, already bounded.

use std::fmt::Write as _;

/// The plot's side and margin, in px.
const SIZE: f64 = 400.0;
const PAD: f64 = 50.0;
/// One colour per series, in turn.
const COLOURS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// One equal-width reliability bin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub lo: f64,
    pub count: u64,
    pub confidence: f64,
    pub accuracy: f64,
}

/// A named line through points `(confidence, accuracy)` over `n` answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub n: usize,
}

fn x(v: f64) -> f64 {
    PAD + v * SIZE
}

fn y(v: f64) -> f64 {
    PAD + (1.0 - v) * SIZE
}

/// Text made safe inside SVG (and HTML).
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A reliability diagram: `bars` (every answer's non-empty bins, of `bins` equal-width
/// bins) with their counts, one line per entry of `lines`, and the diagonal.
pub fn reliability(bins: usize, bars: &[Bar], lines: &[Line]) -> String {
    let mut svg = frame(
        &format!("Reliability ({bins} equal-width bins)"),
        "confidence (top probability)",
        "accuracy",
    );
    svg.push_str(&format!(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"grey\" stroke-dasharray=\"4 4\"/>\n",
        x(0.0),
        y(0.0),
        x(1.0),
        y(1.0)
    ));
    ticks(&mut svg, |t| format!("{t}"));
    let width = SIZE / bins.max(1) as f64;
    for b in bars.iter().filter(|b| b.count > 0) {
        let _ = writeln!(
            svg,
            "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"#c6dbef\" stroke=\"#6baed6\"><title>{} answers, confidence {:.3}, accuracy {:.3}</title></rect>",
            x(b.lo),
            y(b.accuracy),
            width,
            b.accuracy * SIZE,
            b.count,
            b.confidence,
            b.accuracy
        );
        // The bin's answer count above the axis, so a bar of one answer is not read as a
        // trend.
        let _ = writeln!(
            svg,
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\" font-size=\"10\" fill=\"#08519c\">{}</text>",
            x(b.lo) + width / 2.0,
            y(0.0) - 4.0,
            b.count
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#08519c\">bars: all answers</text>\n<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#08519c\">(number: answers in the bin)</text>\n",
        x(1.0) + 10.0,
        y(0.0) - 16.0,
        x(1.0) + 10.0,
        y(0.0) - 4.0
    );
    for (i, line) in lines.iter().enumerate() {
        svg.push_str(&polyline(i, line));
    }
    svg.push_str("</svg>\n");
    svg
}

/// The head: the white ground, the title, the plot's frame and the axis names.
fn frame(title: &str, x_name: &str, y_name: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{cx}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n\
         <rect x=\"{PAD}\" y=\"{PAD}\" width=\"{SIZE}\" height=\"{SIZE}\" fill=\"none\" stroke=\"black\"/>\n\
         <text x=\"{cx}\" y=\"{xl}\" text-anchor=\"middle\">{x_name}</text>\n\
         <text x=\"15\" y=\"{cy}\" text-anchor=\"middle\" transform=\"rotate(-90 15 {cy})\">{y_name}</text>\n",
        w = SIZE + PAD + 160.0,
        h = SIZE + 2.0 * PAD,
        cx = PAD + SIZE / 2.0,
        cy = PAD + SIZE / 2.0,
        xl = SIZE + PAD + 35.0,
        title = escape(title),
        x_name = escape(x_name),
        y_name = escape(y_name),
    )
}

/// Ticks at 0, ¼, ½, ¾, 1 of both axes; `x_label` names an x tick.
fn ticks(svg: &mut String, x_label: impl Fn(f64) -> String) {
    for t in 0..=4 {
        let v = t as f64 / 4.0;
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{v}</text>\n",
            x(v),
            y(0.0) + 15.0,
            escape(&x_label(v)),
            x(0.0) - 5.0,
            y(v) + 4.0
        );
    }
}

/// Line `i` through its points, the points, and its legend entry.
fn polyline(i: usize, line: &Line) -> String {
    let colour = COLOURS[i % COLOURS.len()];
    let points: Vec<String> = line
        .points
        .iter()
        .map(|(c, a)| format!("{:.2},{:.2}", x(*c), y(*a)))
        .collect();
    let mut svg = format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>\n",
        points.join(" ")
    );
    for p in &points {
        let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
        let _ = writeln!(
            svg,
            "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{colour}\"/>"
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{} (n={})</text>",
        x(1.0) + 10.0,
        PAD + 15.0 + 18.0 * i as f64,
        escape(&line.name),
        line.n
    );
    svg
}

/// A histogram of `counts` over equal-width bins of [0, 1], bars scaled to the largest.
pub fn histogram(title: &str, counts: &[u64]) -> String {
    let mut svg = frame(title, "confidence (top probability)", "share of answers");
    ticks(&mut svg, |t| format!("{t}"));
    let total: u64 = counts.iter().sum();
    let most = counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    let width = SIZE / counts.len().max(1) as f64;
    for (i, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        let share = *n as f64 / total.max(1) as f64;
        let height = *n as f64 / most;
        let _ = writeln!(
            svg,
            "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{width:.2}\" height=\"{:.2}\" fill=\"#c6dbef\" stroke=\"#6baed6\"><title>{n} answers ({:.1} %)</title></rect>",
            x(i as f64 / counts.len() as f64),
            y(height),
            height * SIZE,
            share * 100.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" font-size=\"10\">tallest bar: {:.1} %</text>",
        x(1.0) + 10.0,
        PAD + 15.0,
        most / total.max(1) as f64 * 100.0
    );
    svg.push_str("</svg>\n");
    svg
}

/// A figure over time: `points` (window start in Unix ms, value; `None`: an empty window,
/// drawn as a gap) on a y axis from 0 to `top`.
pub fn over_time(title: &str, points: &[(i64, Option<f64>)], top: f64) -> String {
    let mut svg = frame(title, "window (oldest left)", "value");
    let top = if top > 0.0 { top } else { 1.0 };
    for t in 0..=4 {
        let v = t as f64 / 4.0;
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.3}</text>",
            x(0.0) - 5.0,
            y(v) + 4.0,
            v * top
        );
    }
    let step = 1.0 / points.len().max(2).saturating_sub(1) as f64;
    let mut run: Vec<String> = Vec::new();
    let flush = |svg: &mut String, run: &mut Vec<String>| {
        if run.len() > 1 {
            let _ = writeln!(
                svg,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
                run.join(" "),
                COLOURS[1]
            );
        }
        run.clear();
    };
    for (i, (_, value)) in points.iter().enumerate() {
        match value {
            Some(v) if v.is_finite() => {
                let (px, py) = (x(i as f64 * step), y((v / top).clamp(0.0, 1.0)));
                run.push(format!("{px:.2},{py:.2}"));
                let _ = writeln!(
                    svg,
                    "<circle cx=\"{px:.2}\" cy=\"{py:.2}\" r=\"3\" fill=\"{}\"><title>{v:.4}</title></circle>",
                    COLOURS[1]
                );
            }
            _ => flush(&mut svg, &mut run),
        }
    }
    flush(&mut svg, &mut run);
    svg.push_str("</svg>\n");
    svg
}
