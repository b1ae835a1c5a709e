//! An answered question as the watch takes it, its shape and its class.

use serde::Serialize;

use super::point::Point;

/// How an answer was calibrated: each class is watched apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// The model's formula alone.
    Raw,
    /// Corrected by the position prior.
    Prior,
    /// Covered by a calibration profile.
    Profile,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Raw => "raw",
            Class::Prior => "prior",
            Class::Profile => "profile",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Class::Raw, Class::Prior, Class::Profile]
            .into_iter()
            .find(|c| c.as_str() == text)
    }
}

/// A shape of question, as the figures are kept (besides the key).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Shape {
    pub model: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub options: usize,
    pub layout: String,
    pub class: Class,
}

/// One answered question, as the watch takes it.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// The API key's configured name.
    pub key: &'a str,
    pub model: &'a str,
    /// `choice`, `noul` or `score`.
    pub kind: &'a str,
    pub layout: &'a str,
    pub class: Class,
    /// When the request arrived (Unix ms): which windows it falls in.
    pub at_ms: i64,
    pub probabilities: &'a [f64],
    /// The option answered.
    pub answer: usize,
    pub confidence: f64,
    pub option_mass: Option<f64>,
}

impl<'a> Answer<'a> {
    /// The answer's point, or `None` when it says nothing of calibration (one option) or
    /// holds a number that is not a probability (never let into a figure).
    pub(super) fn checked(&self, threshold: Option<f64>) -> Option<Point<'a>> {
        let p = self.probabilities;
        let probability = |x: &f64| x.is_finite() && (0.0..=1.0).contains(x);
        if p.len() < 2 || !p.iter().all(probability) || !self.confidence.is_finite() {
            return None;
        }
        let top = *p.get(self.answer)?;
        Some(Point {
            probabilities: p,
            answer: self.answer,
            top,
            confidence: self.confidence,
            option_mass: self.option_mass.filter(|m| m.is_finite()),
            below: threshold.map(|t| self.confidence < t),
        })
    }

    pub(super) fn shape(&self) -> Shape {
        Shape {
            model: self.model.to_owned(),
            kind: self.kind.to_owned(),
            options: self.probabilities.len(),
            layout: self.layout.to_owned(),
            class: self.class,
        }
    }
}
