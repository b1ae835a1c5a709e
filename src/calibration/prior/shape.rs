//! The key a position prior is kept under: what decides where a model's preference for a
//! label position comes from, and nothing the caller wrote.

use std::fmt;

/// A question shape within one model's book: its type, its option count and the request's
/// layout. The label scheme is the model's (one per model) and follows from the option
/// count, so it needs no place here. The question's own text is left out on purpose: the
/// prior is a property of the prompt's frame, and keying it by text would leave every
/// shape with one sample (measured on the fake: see `docs/calibration/prior.md`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PriorShape {
    /// `choice`, `noul` or `score`.
    pub kind: &'static str,
    /// The number of options.
    pub options: usize,
    /// The layout's name (`accuracy`, `cost`, …).
    pub layout: String,
}

impl fmt::Display for PriorShape {
    /// `noul/2/accuracy`: the metric label, made of bounded values only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.options, self.layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_label_holds_type_count_and_layout_only() {
        let s = PriorShape {
            kind: "choice",
            options: 4,
            layout: "cost".into(),
        };
        assert_eq!(s.to_string(), "choice/4/cost");
    }
}
