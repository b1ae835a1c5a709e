//! Escalation when unsure: a model may name a stronger model that answers again the
//! questions it answered with low confidence (`escalate_to`, with `escalate_below` or
//! `escalate_when = "not_automate"`). What counts as unsure is decided here, per answer;
//! asking again is a step of the front-door flow.

use crate::calibration::Decoded;
use crate::config::{EscalateWhen, ModelConfig};

/// A model's escalation settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Escalation {
    /// The public name of the model asked again.
    pub to: String,
    /// Which answers are asked again.
    pub rule: Rule,
    /// Whether the request fails when the escalation model does (else the first answers
    /// stand, and a header says the escalation failed).
    pub required: bool,
}

/// Which answers are unsure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// A confidence under this.
    Below(f64),
    /// A calibration profile covered the answer and did not flag it `automate` (its own
    /// fitted threshold); an answer no profile covered is not escalated by this rule.
    NotAutomate,
}

impl Escalation {
    /// The settings of a configured model, if it escalates (checked by
    /// [`ModelConfig::check`]: a target and exactly one rule).
    pub fn from_config(c: &ModelConfig) -> Option<Self> {
        let rule = match (c.escalate_below, c.escalate_when) {
            (Some(below), _) => Rule::Below(below),
            (None, Some(EscalateWhen::NotAutomate)) => Rule::NotAutomate,
            (None, None) => return None,
        };
        Some(Escalation {
            to: c.escalate_to.clone()?,
            rule,
            required: c.escalate_required,
        })
    }

    /// Whether `answer` is asked again. Answers given without asking (one option) are
    /// certain and never are.
    pub fn wants(&self, answer: &Decoded) -> bool {
        match self.rule {
            Rule::Below(below) => answer.confidence < below,
            Rule::NotAutomate => answer.profile.as_ref().is_some_and(|p| !p.automate),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::{certain, profile::ProfileAnswer};

    fn answer(confidence: f64, automate: Option<bool>) -> Decoded {
        Decoded {
            confidence,
            profile: automate.map(|automate| ProfileAnswer {
                name: "p".into(),
                prediction_set: vec![0],
                automate,
            }),
            ..certain()
        }
    }

    #[test]
    fn unsure_answers_are_those_under_the_threshold_or_not_automated() {
        let below = Escalation {
            to: "strong".into(),
            rule: Rule::Below(0.5),
            required: false,
        };
        assert!(below.wants(&answer(0.49, None)));
        assert!(!below.wants(&answer(0.5, None)));
        assert!(!below.wants(&certain()));
        let by_profile = Escalation {
            rule: Rule::NotAutomate,
            ..below
        };
        assert!(by_profile.wants(&answer(0.9, Some(false))));
        assert!(!by_profile.wants(&answer(0.1, Some(true))));
        assert!(
            !by_profile.wants(&answer(0.1, None)),
            "no profile: no verdict"
        );
    }
}
