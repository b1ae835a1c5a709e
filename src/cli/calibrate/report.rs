//! `systemone calibrate report`: the calibration watch's figures offline, from a ledger.
//! The ledger's records and current outcomes feed a watch of the report's own, oldest
//! first, through the very code that rebuilds the service's watch at start-up
//! ([`crate::ledger::watch::rebuild`]), so the table holds the figures `GET
//! /v1/calibration` shows for the same records (raw, prior-corrected and profile-covered
//! answers apart, an outcome replaced counted once). `--svg` draws the reliability diagram
//! through [`crate::draw`], as the `/calibration` page and `eval --diagram` do.

use std::fmt::Write as _;

use super::args::ReportArgs;
use crate::calibration::watch::ring::{DAY_MS, HOUR_MS};
use crate::calibration::watch::{charts, Figures, Query, Settings, ShapeFigures, Watch};
use crate::draw;

/// A column: its name, and how to read it from a window's figures.
type Column = (&'static str, fn(&Figures) -> Option<f64>);

/// The table's columns after the shape's and the window's.
const FIGURES: [Column; 11] = [
    ("accuracy", |f| f.accuracy),
    ("ece_equal_width_15", |f| f.ece_equal_width_15),
    ("ece_equal_mass_15", |f| f.ece_equal_mass_15),
    ("brier", |f| f.brier),
    ("nll", |f| f.nll),
    ("mean_top_probability", |f| f.mean_top_probability),
    ("mean_confidence", |f| f.mean_confidence),
    ("mean_option_mass", |f| f.mean_option_mass),
    ("psi", |f| f.psi),
    ("expected_accuracy", |f| f.expected_accuracy),
    ("em_prior_shift", |f| f.em_prior_shift),
];

/// Reads the ledger into a watch, and returns the table (writing the diagram to `--svg`).
pub(super) fn run(args: &ReportArgs) -> Result<String, String> {
    let watch = Watch::new(Settings {
        reference: args.reference,
        ..Settings::default()
    });
    let target = &args.from_ledger;
    crate::cli::runtime()?.block_on(async {
        let store = crate::cli::ledger::open(target).await?;
        crate::ledger::watch::rebuild(&store, &watch, i64::MAX)
            .await
            .map_err(|e| format!("--from-ledger {target:?}: {e}"))
    })?;
    let until = match &args.until {
        Some(text) => crate::days::instant_ms(text).ok_or_else(|| {
            format!("--until must be Unix milliseconds or a UTC date YYYY-MM-DD, got {text:?}")
        })?,
        None => watch.newest_ms().unwrap_or_else(crate::ledger::now_ms),
    };
    let shapes = watch.figures(&query(args), args.window, until);
    let mut out = head(args, &watch, until);
    out.push_str(&table(&shapes));
    if let Some(path) = &args.svg {
        std::fs::write(path, diagram(&shapes)).map_err(|e| format!("{}: {e}", path.display()))?;
        let _ = writeln!(out, "wrote {}", path.display());
    }
    Ok(out)
}

/// The shapes the filters select (every key's answers unless `--key`).
fn query(args: &ReportArgs) -> Query {
    Query {
        key: args.key.clone(),
        model: args.model.clone(),
        kind: args.kind.clone(),
        options: args.options,
        layout: args.layout.clone(),
        class: args.class,
    }
}

/// `YYYY-MM-DDTHH:00Z` of a window's start.
fn instant(ms: i64) -> String {
    let day = ms.div_euclid(DAY_MS);
    let hour = ms.rem_euclid(DAY_MS) / HOUR_MS;
    format!("{}T{hour:02}:00Z", crate::days::date_of(day.max(0) as u64))
}

/// What the table covers: the windows and the reference the drift figures compare to.
fn head(args: &ReportArgs, watch: &Watch, until: i64) -> String {
    let span = args.window;
    let (from, _) = span.bounds(span.index(until) - span.kept() + 1);
    let (_, to) = span.bounds(span.index(until));
    let mut head = format!(
        "calibration report: {} {} windows, {} to {}\n",
        span.kept(),
        span.as_str(),
        instant(from),
        instant(to)
    );
    match watch.reference() {
        Some(r) => {
            let _ = writeln!(
                head,
                "reference {} to {} ({}{})",
                instant(r.from_ms),
                instant(r.until_ms),
                if r.named {
                    "named"
                } else {
                    "the first full week"
                },
                if r.complete {
                    ""
                } else {
                    ": not over, so no drift figures"
                }
            );
        }
        None => head.push_str("no answers in the ledger\n"),
    }
    head
}

/// One line per shape and window with answers (empty windows are left out, not shown as
/// 0); `-`: a figure with nothing under it.
fn table(shapes: &[ShapeFigures]) -> String {
    let mut out = String::from("model\ttype\toptions\tlayout\tclass\twindow\tanswers\toutcomes");
    for (name, _) in FIGURES {
        let _ = write!(out, "\t{name}");
    }
    out.push('\n');
    for s in shapes {
        let shape = &s.shape;
        for w in s.windows.iter().filter(|w| w.figures.answers > 0) {
            let f = &w.figures;
            let _ = write!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                shape.model,
                shape.kind,
                shape.options,
                shape.layout,
                shape.class.as_str(),
                instant(w.from_ms),
                f.answers,
                f.outcomes
            );
            for (_, read) in FIGURES {
                match read(f) {
                    Some(v) => write!(out, "\t{v:.6}"),
                    None => write!(out, "\t-"),
                }
                .ok();
            }
            out.push('\n');
        }
    }
    out
}

/// The reliability diagram: every shape's outcomes over the windows as bars, one line per
/// shape.
fn diagram(shapes: &[ShapeFigures]) -> String {
    let every: Vec<&Figures> = shapes
        .iter()
        .flat_map(|s| s.windows.iter().map(|w| &w.figures))
        .collect();
    let bars = charts::bars(&every);
    let lines: Vec<draw::Line> = shapes
        .iter()
        .map(|s| {
            let windows: Vec<&Figures> = s.windows.iter().map(|w| &w.figures).collect();
            let name = format!(
                "{} {}/{} {} {}",
                s.shape.model,
                s.shape.kind,
                s.shape.options,
                s.shape.layout,
                s.shape.class.as_str()
            );
            charts::line(&name, &charts::bars(&windows))
        })
        .collect();
    draw::reliability(bars.len(), &bars, &lines)
}
