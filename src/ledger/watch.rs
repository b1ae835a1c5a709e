//! The calibration watch's feed ([`crate::calibration::watch`]): every record the writer
//! commits, every outcome the outcome route records (a replacement takes the old one's part
//! back), and once, at start-up, the records and outcomes already in the store, oldest
//! first, so the figures survive a restart. Nothing here reads the store per request or
//! per scrape.

use super::record::{Decision, QuestionRecord};
use super::store::{decode, Store, StoreError, COLUMNS};
use crate::calibration::watch::{Answer, Class, Figures, Query, Watch, Window};

/// Records read per page of the start-up scan.
const PAGE: i64 = 500;
/// The layout of a record written before records named theirs.
const UNKNOWN_LAYOUT: &str = "unknown";

/// `q` of record `d` as the watch takes it.
pub fn answer<'a>(d: &'a Decision, q: &'a QuestionRecord) -> Answer<'a> {
    let class = if q.profile.is_some() {
        Class::Profile
    } else if q.prior_correction.is_some() {
        Class::Prior
    } else {
        Class::Raw
    };
    let layout = q
        .layout
        .as_deref()
        .or(q.reads.as_ref().map(|r| r.layout.as_str()))
        .unwrap_or(UNKNOWN_LAYOUT);
    Answer {
        key: &d.key,
        model: d.model.as_deref().unwrap_or(""),
        kind: &q.kind,
        layout,
        class,
        at_ms: d.at_ms,
        probabilities: &q.probabilities,
        answer: q.answer,
        confidence: q.confidence,
        option_mass: q.option_mass,
    }
}

/// A committed record's answers (public for `benches/calibration_watch.rs`, which feeds
/// the watch as the writer does).
pub fn record(watch: &Watch, d: &Decision) {
    if d.status >= 400 {
        return;
    }
    for q in &d.questions {
        watch.record(&answer(d, q));
    }
}

/// An outcome recorded for question `q` of `d`, replacing `replaced` if any.
pub fn outcome(
    watch: &Watch,
    d: &Decision,
    q: &QuestionRecord,
    truth: usize,
    replaced: Option<usize>,
) {
    watch.outcome(&answer(d, q), truth, replaced);
}

/// Feeds `watch` the records written before `opened_ms` (when this process opened the
/// ledger; the writer feeds every later one) and the outcomes current then, oldest first.
/// `systemone calibrate report` feeds a watch of its own the same way (`opened_ms`:
/// `i64::MAX`, every record).
pub async fn rebuild(store: &Store, watch: &Watch, opened_ms: i64) -> Result<u64, StoreError> {
    let (mut at, mut id, mut fed) = (i64::MIN, String::new(), 0u64);
    loop {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM decisions WHERE at_ms < $1 AND (at_ms > $2 OR \
             (at_ms = $3 AND request_id > $4)) ORDER BY at_ms, request_id LIMIT {PAGE}"
        ))
        .bind(opened_ms)
        .bind(at)
        .bind(at)
        .bind(id.clone())
        .fetch_all(&store.pool())
        .await?;
        let page: Vec<Decision> = rows.iter().map(decode).collect::<Result<_, _>>()?;
        for d in &page {
            record(watch, d);
        }
        feed_outcomes(store, watch, &page, opened_ms).await?;
        fed += page.len() as u64;
        match page.last() {
            Some(last) if page.len() as i64 == PAGE => {
                (at, id) = (last.at_ms, last.request_id.clone())
            }
            _ => return Ok(fed),
        }
    }
}

/// The outcomes of `page` that were current at `opened_ms` (later ones, and later
/// replacements, come through the outcome route).
async fn feed_outcomes(
    store: &Store,
    watch: &Watch,
    page: &[Decision],
    opened_ms: i64,
) -> Result<(), StoreError> {
    let ids: Vec<&str> = page.iter().map(|d| d.request_id.as_str()).collect();
    for o in store.outcomes(&ids).await? {
        let current_then = o.at_ms < opened_ms && o.replaced_at_ms.is_none_or(|r| r >= opened_ms);
        if !current_then {
            continue;
        }
        let Some(d) = page.iter().find(|d| d.request_id == o.request_id) else {
            continue;
        };
        if let Some(q) = d.questions.iter().find(|q| q.name == o.question) {
            outcome(watch, d, q, o.outcome, None);
        }
    }
    Ok(())
}

/// The gauges' rows: per shape (every key's answers merged) and window (`hour`, `day`,
/// `week`: the one holding `now_ms`; `recent`: the shape's last few hundred answers), the
/// figures in `metrics::CALIBRATION_FIGURES`' order.
/// Public for `benches/calibration_watch.rs`, which reads them as a scrape would.
pub fn gauges(watch: &Watch, now_ms: i64) -> Vec<([String; 6], Vec<Option<f64>>)> {
    let mut rows = Vec::new();
    for window in Window::ALL {
        for shape in watch.windowed(&Query::default(), window, now_ms) {
            let Some(now) = shape.windows.last() else {
                continue;
            };
            let s = &shape.shape;
            let labels = [
                s.model.clone(),
                s.kind.clone(),
                s.options.to_string(),
                s.layout.clone(),
                s.class.as_str().to_owned(),
                window.as_str().to_owned(),
            ];
            rows.push((labels, gauge_values(&now.figures)));
        }
    }
    rows
}

fn gauge_values(f: &Figures) -> Vec<Option<f64>> {
    let count = |n: u64| (n > 0).then_some(n as f64);
    vec![
        count(f.answers),
        f.mean_confidence,
        f.mean_option_mass,
        f.psi,
        f.expected_accuracy,
        f.em_prior_shift,
        f.below_threshold_share,
        count(f.outcomes),
        f.accuracy,
        f.ece_equal_width_15,
        f.brier,
    ]
}
