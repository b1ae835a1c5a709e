//! The watch's figures as pictures, drawn by [`crate::draw`]: the reliability diagram and
//! the confidence histogram over several windows together. `GET /v1/calibration/charts`
//! (the `/calibration` page) and `systemone calibrate report --svg` both draw through here.

use super::figures::Figures;
use crate::draw;

/// The reliability bars of every window's outcomes together: bins add up (count-weighted
/// means).
pub fn bars(windows: &[&Figures]) -> Vec<draw::Bar> {
    let bins = windows.first().map_or(0, |f| f.reliability.len());
    (0..bins)
        .map(|i| {
            let mut bar = draw::Bar {
                lo: i as f64 / bins as f64,
                count: 0,
                confidence: 0.0,
                accuracy: 0.0,
            };
            for b in windows.iter().filter_map(|f| f.reliability.get(i)) {
                bar.lo = b.lo;
                let n = b.count as f64;
                bar.confidence += b.confidence.unwrap_or(0.0) * n;
                bar.accuracy += b.accuracy.unwrap_or(0.0) * n;
                bar.count += b.count;
            }
            if bar.count > 0 {
                bar.confidence /= bar.count as f64;
                bar.accuracy /= bar.count as f64;
            }
            bar
        })
        .collect()
}

/// The line `name` through the non-empty bars.
pub fn line(name: &str, bars: &[draw::Bar]) -> draw::Line {
    draw::Line {
        name: name.to_owned(),
        points: bars
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| (b.confidence, b.accuracy))
            .collect(),
        n: bars.iter().map(|b| b.count as usize).sum(),
    }
}

/// The reliability diagram of every window's outcomes together.
pub fn reliability(windows: &[&Figures]) -> String {
    let bars = bars(windows);
    draw::reliability(bars.len(), &bars, &[line("answers with an outcome", &bars)])
}

/// Every window's answers' top probabilities together.
pub fn histogram(windows: &[&Figures]) -> String {
    let bins = windows.first().map_or(0, |f| f.confidence_histogram.len());
    let counts: Vec<u64> = (0..bins)
        .map(|i| {
            windows
                .iter()
                .filter_map(|f| f.confidence_histogram.get(i))
                .sum()
        })
        .collect();
    draw::histogram("Confidence histogram", &counts)
}
