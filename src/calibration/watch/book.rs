//! The watch itself: every key's shapes and their windows behind one lock, fed answers and
//! outcomes, read as figures.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, PoisonError, RwLock};

use serde::Serialize;

use super::answer::{Answer, Class, Shape};
use super::figures::{self, Figures};
use super::point::Point;
use super::recent::{Held, Recent};
use super::ring::{Ring, Span, WEEK_MS};
use super::sums::Sums;

/// Shapes kept unless the settings say otherwise.
pub const MAX_SHAPES: usize = 256;

/// The watch's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The reference window `[from, until)` in Unix ms the operator named; `None`: the
    /// first full week (Monday to Monday, UTC) after the first answer seen.
    pub reference: Option<(i64, i64)>,
    pub max_shapes: usize,
    /// Escalation thresholds (`escalate_below`) per configured model.
    pub thresholds: HashMap<String, f64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            reference: None,
            max_shapes: MAX_SHAPES,
            thresholds: HashMap::new(),
        }
    }
}

/// One key's shape: its calendar windows, its recent window and its reference window.
#[derive(Debug, Clone)]
struct Watched {
    rings: [Ring; 3],
    recent: Recent,
    reference: Sums,
}

impl Watched {
    fn new(options: usize) -> Self {
        Watched {
            rings: Span::ALL.map(Ring::new),
            recent: Recent::new(),
            reference: Sums::new(options),
        }
    }

    fn ring(&self, span: Span) -> &Ring {
        &self.rings[Span::ALL.iter().position(|s| *s == span).unwrap_or(0)]
    }

    /// Adds an answer at `at_ms` to its windows and, when in it, to the reference window
    /// `[from, until)`; `complete`: the reference is over, so windows that close now
    /// estimate their EM prior against it (its mean posterior, computed only then).
    fn add(&mut self, point: &Point<'_>, at_ms: i64, (from, until): (i64, i64), complete: bool) {
        let options = point.probabilities.len();
        let reference = &self.reference;
        let closing = || complete.then(|| mean_posterior(reference)).flatten();
        for ring in self.rings.iter_mut() {
            if let Some(sums) = ring.at(at_ms, options, closing) {
                sums.add_answer(point);
            }
        }
        self.recent.add(point, at_ms);
        if (from..until).contains(&at_ms) {
            self.reference.add_answer(point);
        }
    }
}

/// The reference window and whether it is over.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reference {
    pub from_ms: i64,
    pub until_ms: i64,
    /// Named by the operator (else the first full week).
    pub named: bool,
    /// Over (the newest answer seen is at or after its end): figures compare against it.
    pub complete: bool,
}

/// A watched shape's name: its key and shape, owned; made once, when the shape is first
/// seen. The map of shapes is searched by an answer's borrowed [`Parts`], so an answer of a
/// shape already watched allocates nothing.
#[derive(Debug, Clone)]
struct Id {
    key: String,
    shape: Shape,
}

/// What a shape is found by: an answer's parts (borrowed) or a watched shape's (owned).
/// [`Id`] borrows as `dyn Parts`, and both hash and compare the same tuple, as `Borrow`
/// requires.
trait Parts {
    fn parts(&self) -> (&str, &str, &str, usize, &str, Class);
}

impl Parts for Id {
    fn parts(&self) -> (&str, &str, &str, usize, &str, Class) {
        let s = &self.shape;
        (&self.key, &s.model, &s.kind, s.options, &s.layout, s.class)
    }
}

impl Parts for Answer<'_> {
    fn parts(&self) -> (&str, &str, &str, usize, &str, Class) {
        let options = self.probabilities.len();
        (
            self.key,
            self.model,
            self.kind,
            options,
            self.layout,
            self.class,
        )
    }
}

impl Hash for dyn Parts + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl PartialEq for dyn Parts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn Parts + '_ {}

impl Hash for Id {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Id {}

impl<'a> Borrow<dyn Parts + 'a> for Id {
    fn borrow(&self) -> &(dyn Parts + 'a) {
        self
    }
}

#[derive(Debug, Default)]
struct Book {
    shapes: HashMap<Id, Watched>,
    reference: Option<(i64, i64)>,
    named: bool,
    newest_ms: i64,
    dropped: u64,
}

/// The watch (shared by the ledger's writer, its outcome route and its readers).
#[derive(Debug)]
pub struct Watch {
    book: Mutex<Book>,
    max_shapes: usize,
    /// Escalation thresholds per configured model (set once the models are known).
    thresholds: RwLock<HashMap<String, f64>>,
}

/// Which windows a reader asks for: a calendar span's, or the recent window (each shape's
/// last few hundred answers, [`super::recent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Calendar(Span),
    Recent,
}

impl Window {
    pub const ALL: [Window; 4] = [
        Window::Calendar(Span::Hour),
        Window::Calendar(Span::Day),
        Window::Calendar(Span::Week),
        Window::Recent,
    ];

    /// `hour`, `day`, `week` or `recent`: the route's `window` and the gauges' label.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Calendar(span) => span.as_str(),
            Window::Recent => "recent",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Window::ALL.into_iter().find(|w| w.as_str() == text)
    }
}

/// What a reader asks for: which shapes (each `None`: any) in which window.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Only this key's answers (`None`: every key's, merged).
    pub key: Option<String>,
    pub model: Option<String>,
    pub kind: Option<String>,
    pub options: Option<usize>,
    pub layout: Option<String>,
    pub class: Option<Class>,
}

/// One window's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Windowed {
    pub from_ms: i64,
    pub until_ms: i64,
    #[serde(flatten)]
    pub figures: Figures,
}

/// A shape's figures over one span's windows, oldest first, the newest (holding `now`)
/// last; empty windows are there, with no figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShapeFigures {
    #[serde(flatten)]
    pub shape: Shape,
    pub windows: Vec<Windowed>,
    /// The reference window's own figures.
    pub reference: Figures,
}

impl Watch {
    pub fn new(settings: Settings) -> Self {
        let book = Book {
            reference: settings.reference,
            named: settings.reference.is_some(),
            newest_ms: i64::MIN,
            ..Book::default()
        };
        Watch {
            book: Mutex::new(book),
            max_shapes: settings.max_shapes,
            thresholds: RwLock::new(settings.thresholds),
        }
    }

    /// The escalation thresholds (`escalate_below`) per configured model, for the share of
    /// answers under them.
    pub fn set_thresholds(&self, thresholds: HashMap<String, f64>) {
        *self
            .thresholds
            .write()
            .unwrap_or_else(PoisonError::into_inner) = thresholds;
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds an answer to its windows: under the lock, one lookup by the answer's borrowed
    /// parts (an allocation only for a shape seen for the first time) and the sums' additions.
    pub fn record(&self, a: &Answer<'_>) {
        let threshold = self
            .thresholds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(a.model)
            .copied();
        let Some(point) = a.checked(threshold) else {
            return;
        };
        let mut guard = self.book();
        let book = &mut *guard;
        book.newest_ms = book.newest_ms.max(a.at_ms);
        let reference = *book
            .reference
            .get_or_insert_with(|| first_full_week(a.at_ms));
        let complete = book.newest_ms >= reference.1;
        if let Some(watched) = book.shapes.get_mut(a as &dyn Parts) {
            watched.add(&point, a.at_ms, reference, complete);
            return;
        }
        if book.shapes.len() >= self.max_shapes {
            book.dropped += 1;
            return;
        }
        let id = Id {
            key: a.key.to_owned(),
            shape: a.shape(),
        };
        let mut watched = Watched::new(point.probabilities.len());
        watched.add(&point, a.at_ms, reference, complete);
        book.shapes.insert(id, watched);
    }

    /// Adds the outcome `truth` of answer `a`; `replaced`: the outcome it replaces, whose
    /// part is taken back (so a question's outcome counts once).
    pub fn outcome(&self, a: &Answer<'_>, truth: usize, replaced: Option<usize>) {
        let Some(point) = a.checked(None) else {
            return;
        };
        if truth >= point.probabilities.len() || replaced == Some(truth) {
            return;
        }
        let mut book = self.book();
        let in_reference = book
            .reference
            .is_some_and(|(from, until)| (from..until).contains(&a.at_ms));
        let Some(watched) = book.shapes.get_mut(a as &dyn Parts) else {
            return;
        };
        let apply = |sums: &mut Sums| {
            if let Some(old) = replaced.filter(|o| *o < point.probabilities.len()) {
                sums.outcome(&point, old, -1);
            }
            sums.outcome(&point, truth, 1);
        };
        for ring in watched.rings.iter_mut() {
            if let Some(sums) = ring.existing(a.at_ms) {
                apply(sums);
            }
        }
        if let Some(sums) = watched.recent.existing(a.at_ms) {
            apply(sums);
        }
        if in_reference {
            apply(&mut watched.reference);
        }
    }

    /// Answers not watched because [`Settings::max_shapes`] shapes were watched already.
    pub fn dropped(&self) -> u64 {
        self.book().dropped
    }

    /// The reference window, once an answer (or the operator) set it.
    pub fn reference(&self) -> Option<Reference> {
        let book = self.book();
        book.reference.map(|(from_ms, until_ms)| Reference {
            from_ms,
            until_ms,
            named: book.named,
            complete: book.newest_ms >= until_ms,
        })
    }

    /// The newest answer's instant (`None` before the first): where an offline report's
    /// windows end.
    pub fn newest_ms(&self) -> Option<i64> {
        Some(self.book().newest_ms).filter(|n| *n != i64::MIN)
    }

    /// The figures of the shapes `query` selects over `window`: a span's windows up to the
    /// one holding `now_ms` ([`Watch::figures`]), or the recent window ([`Watch::recent`]).
    pub fn windowed(&self, query: &Query, window: Window, now_ms: i64) -> Vec<ShapeFigures> {
        match window {
            Window::Calendar(span) => self.figures(query, span, now_ms),
            Window::Recent => self.recent(query),
        }
    }

    /// The figures of the shapes `query` selects over their recent window (one window per
    /// shape, from its earliest answer to just after its latest), sorted by shape. Every
    /// key's recent answers merged: each key's last few hundred.
    pub fn recent(&self, query: &Query) -> Vec<ShapeFigures> {
        let gather = |held: &mut Option<Held>, watched: &Watched| {
            let Some((sums, from, until)) = watched.recent.sums() else {
                return;
            };
            match held {
                Some((all, f, u)) => {
                    all.merge(&sums);
                    (*f, *u) = ((*f).min(from), (*u).max(until));
                }
                None => *held = Some((sums, from, until)),
            }
        };
        self.merged(query, gather, |_, held, against| {
            held.map(|(sums, from_ms, until_ms)| Windowed {
                from_ms,
                until_ms,
                figures: figures::figures(&sums, against),
            })
            .into_iter()
            .collect()
        })
    }

    /// The figures of the shapes `query` selects over `span`'s windows up to the one
    /// holding `now_ms`, sorted by shape.
    pub fn figures(&self, query: &Query, span: Span, now_ms: i64) -> Vec<ShapeFigures> {
        let gather = |windows: &mut BTreeMap<i64, Sums>, watched: &Watched| {
            for (index, sums) in &watched.ring(span).windows {
                match windows.get_mut(index) {
                    Some(s) => s.merge(sums),
                    None => {
                        windows.insert(*index, sums.clone());
                    }
                }
            }
        };
        let newest = span.index(now_ms);
        self.merged(query, gather, |shape, windows, against| {
            let empty = Sums::new(shape.options);
            (newest - span.kept() + 1..=newest)
                .map(|index| {
                    let (from_ms, until_ms) = span.bounds(index);
                    let sums = windows.get(&index).unwrap_or(&empty);
                    Windowed {
                        from_ms,
                        until_ms,
                        figures: figures::figures(sums, against),
                    }
                })
                .collect()
        })
    }

    /// One figure set per shape `query` selects, sorted by shape: every selected key's
    /// watched parts of that shape folded by `gather` into a `T` (its windows) and their
    /// reference sums merged, then `windows` turns the `T` into figures. Both compare
    /// against the merged reference only once the reference window is complete (before,
    /// a drift figure would compare against a part of a week).
    fn merged<T: Default>(
        &self,
        query: &Query,
        mut gather: impl FnMut(&mut T, &Watched),
        windows: impl Fn(&Shape, T, Option<&Sums>) -> Vec<Windowed>,
    ) -> Vec<ShapeFigures> {
        let book = self.book();
        let complete = book
            .reference
            .is_some_and(|(_, until)| book.newest_ms >= until);
        let mut merged: BTreeMap<&Shape, (T, Sums)> = BTreeMap::new();
        for (Id { key, shape }, watched) in &book.shapes {
            if !query.selects(key, shape) {
                continue;
            }
            let entry = merged
                .entry(shape)
                .or_insert_with(|| (T::default(), Sums::new(shape.options)));
            gather(&mut entry.0, watched);
            entry.1.merge(&watched.reference);
        }
        merged
            .into_iter()
            .map(|(shape, (parts, reference))| {
                let against = complete.then_some(&reference);
                ShapeFigures {
                    shape: shape.clone(),
                    windows: windows(shape, parts, against),
                    reference: figures::figures(&reference, against),
                }
            })
            .collect()
    }
}

impl Query {
    fn selects(&self, key: &str, shape: &Shape) -> bool {
        self.key.as_deref().is_none_or(|k| k == key)
            && self.model.as_deref().is_none_or(|m| m == shape.model)
            && self.kind.as_deref().is_none_or(|k| k == shape.kind)
            && self.options.is_none_or(|n| n == shape.options)
            && self.layout.as_deref().is_none_or(|l| l == shape.layout)
            && self.class.is_none_or(|c| c == shape.class)
    }
}

/// The first full week (Monday 00:00 UTC to the next) after `at_ms`.
fn first_full_week(at_ms: i64) -> (i64, i64) {
    let (_, next) = Span::Week.bounds(Span::Week.index(at_ms));
    (next, next + WEEK_MS)
}

fn mean_posterior(s: &Sums) -> Option<Vec<f64>> {
    (s.answers > 0 && !s.posterior.is_empty())
        .then(|| s.posterior.iter().map(|x| x / s.answers as f64).collect())
}
