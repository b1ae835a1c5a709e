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

impl PriorShape {
    /// The shape a label ([`fmt::Display`]'s) names, when it is one: a known type, an
    /// option count from 2 to 255 and a layout of letters (what a store's index holds).
    pub fn parse(label: &str) -> Option<PriorShape> {
        let mut parts = label.split('/');
        let first = parts.next()?;
        let kind = ["choice", "noul", "score"]
            .into_iter()
            .find(|k| *k == first)?;
        let options: usize = parts.next()?.parse().ok()?;
        let layout = parts.next()?;
        let fits = (2..=255).contains(&options)
            && !layout.is_empty()
            && layout.len() <= 16
            && layout.bytes().all(|b| b.is_ascii_lowercase());
        (fits && parts.next().is_none()).then(|| PriorShape {
            kind,
            options,
            layout: layout.to_string(),
        })
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
        assert_eq!(PriorShape::parse("choice/4/cost"), Some(s));
        let noul = PriorShape::parse("noul/2/accuracy").map(|s| s.to_string());
        assert_eq!(noul.as_deref(), Some("noul/2/accuracy"));
        for bad in [
            "poll/2/cost",
            "noul/1/cost",
            "noul/2/",
            "noul/2/Cost",
            "noul/2/cost/x",
            "noul",
        ] {
            assert_eq!(PriorShape::parse(bad), None, "{bad}");
        }
    }
}
