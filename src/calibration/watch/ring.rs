//! Calendar windows (UTC hours, days, weeks from Monday) as a ring of the newest few, each
//! with its sums: an answer or outcome finds its window by its record's time, in work
//! bounded by the ring's length; a window older than the ring keeps is gone.

use std::collections::VecDeque;

use super::sums::Sums;

/// Milliseconds in an hour, a day and a week.
pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 24 * HOUR_MS;
pub const WEEK_MS: i64 = 7 * DAY_MS;
/// 1970-01-05, the first Monday after the epoch: weeks start on Mondays.
const WEEK_OFFSET_MS: i64 = 4 * DAY_MS;

/// Which windows: hours, days or weeks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Span {
    Hour,
    Day,
    Week,
}

impl Span {
    pub const ALL: [Span; 3] = [Span::Hour, Span::Day, Span::Week];

    pub fn as_str(self) -> &'static str {
        match self {
            Span::Hour => "hour",
            Span::Day => "day",
            Span::Week => "week",
        }
    }

    fn ms(self) -> i64 {
        match self {
            Span::Hour => HOUR_MS,
            Span::Day => DAY_MS,
            Span::Week => WEEK_MS,
        }
    }

    fn offset(self) -> i64 {
        match self {
            Span::Week => WEEK_OFFSET_MS,
            _ => 0,
        }
    }

    /// Windows kept: a day of hours, a week of days, four weeks.
    pub fn kept(self) -> i64 {
        match self {
            Span::Hour => 24,
            Span::Day => 7,
            Span::Week => 4,
        }
    }

    /// The window holding `at_ms`.
    pub fn index(self, at_ms: i64) -> i64 {
        (at_ms - self.offset()).div_euclid(self.ms())
    }

    /// The window's start and end, Unix ms.
    pub fn bounds(self, index: i64) -> (i64, i64) {
        let from = index * self.ms() + self.offset();
        (from, from + self.ms())
    }
}

/// One span's newest windows, oldest first.
#[derive(Debug, Clone)]
pub(super) struct Ring {
    pub(super) span: Span,
    pub(super) windows: VecDeque<(i64, Sums)>,
}

impl Ring {
    pub(super) fn new(span: Span) -> Self {
        Ring {
            span,
            windows: VecDeque::new(),
        }
    }

    /// The sums of the window holding `at_ms`, made if needed (`options`: the shape's);
    /// `None` when older than the ring keeps. A new newest window closes the others'
    /// EM cells (`reference`: the reference's mean posterior then, asked for only then).
    pub(super) fn at(
        &mut self,
        at_ms: i64,
        options: usize,
        reference: impl FnOnce() -> Option<Vec<f64>>,
    ) -> Option<&mut Sums> {
        let index = self.span.index(at_ms);
        let newest = self.windows.back().map(|(i, _)| *i);
        if newest.is_some_and(|n| index <= n - self.span.kept()) {
            return None;
        }
        if newest.is_none_or(|n| index > n) {
            let reference = if self.windows.is_empty() {
                None
            } else {
                reference()
            };
            for (_, sums) in self.windows.iter_mut() {
                sums.close(reference.as_deref());
            }
            self.windows.push_back((index, Sums::new(options)));
            while self
                .windows
                .front()
                .is_some_and(|(i, _)| *i <= index - self.span.kept())
            {
                self.windows.pop_front();
            }
        } else if !self.windows.iter().any(|(i, _)| *i == index) {
            let at = self.windows.partition_point(|(i, _)| *i < index);
            self.windows.insert(at, (index, Sums::new(options)));
        }
        self.windows
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, s)| s)
    }

    /// The sums of an existing window holding `at_ms` (for an outcome: never makes one).
    pub(super) fn existing(&mut self, at_ms: i64) -> Option<&mut Sums> {
        let index = self.span.index(at_ms);
        self.windows
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, s)| s)
    }
}
