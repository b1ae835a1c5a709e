//! Server-side calibration profiles: a request names one (`"calibration": "<name>"`) and
//! every answer it covers gets the profile's temperature and per-option bias instead of
//! the model's default temperature, plus a conformal `prediction_set` and an `automate`
//! flag.
//!
//! A profile is fitted by `systemone calibrate profile` for one task: one model and one
//! question shape (type plus lowered option labels, e.g. a `noul` is `["no", "yes"]`). It
//! covers a question when the model answering is the profile's model and the question's
//! type and options are the profile's, in the same order. Anything else in the request
//! (another question, or every question while a fallback model serves) is answered exactly
//! as without a profile; the caller sees which answers were covered by their
//! `calibration` field.
//!
//! File (`calibration/profiles/<name>.json`; only these keys are read, the fit report and
//! provenance beside them are for people):
//! `{"name", "model", "question": {"type", "labels"}, "temperature", "bias": [...],
//!   "conformal": {"coverage", "cutoffs": [...]}, "automation": {"threshold": p | null}}`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use crate::config::Layout;
use crate::shipped;

use super::temperature::apply;
use super::{argmax, confidence, Decoded};
use crate::question::{LoweredQuestion, QuestionKind};

/// The question shape a profile covers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuestionShape {
    /// `choice`, `noul` or `score`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The lowered option labels in order (`no`/`yes`, the choice labels, `level_i`).
    pub labels: Vec<String>,
}

impl QuestionShape {
    /// The shape of a lowered question.
    pub fn of(q: &LoweredQuestion) -> Self {
        QuestionShape {
            kind: q.kind.as_str().to_string(),
            labels: q.options.iter().map(|o| o.label.clone()).collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct ConformalFile {
    coverage: f64,
    cutoffs: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize)]
struct AutomationFile {
    threshold: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
struct ProfileFile {
    name: String,
    model: String,
    question: QuestionShape,
    temperature: f64,
    bias: Vec<f64>,
    conformal: ConformalFile,
    automation: AutomationFile,
    /// The layout its rows were asked in (`calibrate formula|profile --layout`); absent: the reference's
    /// bytes (`accuracy`, `cost`), as every profile before the `compact` layout.
    #[serde(default)]
    layout: Option<Layout>,
}

/// One loaded profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Its public name.
    pub name: Arc<str>,
    /// The model (public name) it was fitted for.
    pub model: String,
    /// The question shape it covers.
    pub question: QuestionShape,
    /// Temperature applied to the raw log-probabilities.
    pub temperature: f64,
    /// Added to the tempered log-probabilities, one per option (sums to 0).
    pub bias: Vec<f64>,
    /// The coverage the conformal cutoffs were set for.
    pub coverage: f64,
    /// One cutoff for every option, or one per option (by gold label).
    pub cutoffs: Vec<f64>,
    /// Automate answers whose top probability is at least this; `None`: never.
    pub threshold: Option<f64>,
    /// Whether it was fitted on the `compact` layout's prompts: it then covers only those,
    /// and a profile fitted on the reference's bytes (`accuracy`, `cost`) never covers them.
    pub compact: bool,
}

/// What a profile adds to an answer it covers.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileAnswer {
    /// The profile's name.
    pub name: Arc<str>,
    /// Option indexes in the conformal prediction set, in option order.
    pub prediction_set: Vec<usize>,
    /// Whether the top probability reaches the automation threshold.
    pub automate: bool,
}

impl Profile {
    /// Parses and checks a profile file's text; errors say what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let f: ProfileFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let k = f.question.labels.len();
        if !matches!(f.question.kind.as_str(), "choice" | "noul" | "score") {
            return Err(format!(
                "question.type must be choice, noul or score, got {:?}",
                f.question.kind
            ));
        }
        if k < 2 {
            return Err(format!("question.labels needs at least 2 labels, got {k}"));
        }
        if !(f.temperature.is_finite() && f.temperature > 0.0) {
            return Err(format!(
                "temperature must be finite and > 0, got {}",
                f.temperature
            ));
        }
        if f.bias.len() != k || f.bias.iter().any(|b| !b.is_finite()) {
            return Err(format!(
                "bias must be {k} finite numbers (one per label), got {}",
                f.bias.len()
            ));
        }
        let cutoffs_ok = (f.conformal.cutoffs.len() == 1 || f.conformal.cutoffs.len() == k)
            && f.conformal.cutoffs.iter().all(|c| (0.0..=1.0).contains(c));
        if !cutoffs_ok {
            return Err(format!(
                "conformal.cutoffs must be 1 or {k} numbers in [0, 1], got {:?}",
                f.conformal.cutoffs
            ));
        }
        if let Some(t) = f.automation.threshold {
            if !(0.0..=1.0).contains(&t) {
                return Err(format!("automation.threshold must be in [0, 1], got {t}"));
            }
        }
        Ok(Profile {
            name: Arc::from(f.name),
            model: f.model,
            question: f.question,
            temperature: f.temperature,
            bias: f.bias,
            coverage: f.conformal.coverage,
            cutoffs: f.conformal.cutoffs,
            threshold: f.automation.threshold,
            compact: f.layout == Some(Layout::Compact),
        })
    }

    /// The profile bound to the served model its `model` names (by name, alias or backend
    /// id), under that model's public name; `None` when no served model is named.
    fn bound_to(mut self, served: &[Served<'_>]) -> Option<Self> {
        let public = Served::resolve(served, &self.model)?;
        if public != self.model {
            tracing::info!(profile = %self.name, fitted_for = %self.model, model = %public, "calibration profile covers a model by another of its names");
            self.model = public.to_string();
        }
        Some(self)
    }

    /// Whether the profile covers `question` when `model` (public name) answers it in
    /// `layout`: a profile is fitted on one prompt's probabilities, so one fitted on the
    /// `compact` layout covers only it, and one fitted on the reference's bytes never it.
    pub fn covers(&self, model: &str, question: &LoweredQuestion, layout: Layout) -> bool {
        self.model == model
            && self.compact == (layout == Layout::Compact)
            && self.question.kind == question.kind.as_str()
            && self.question.labels.len() == question.options.len()
            && self
                .question
                .labels
                .iter()
                .zip(&question.options)
                .all(|(l, o)| *l == o.label)
    }

    /// Recalibrates an answer decoded at T = 1: temperature and bias, then the prediction
    /// set and the automation flag.
    pub fn apply(&self, raw: Decoded) -> Decoded {
        let probabilities = apply(&raw.probabilities, self.temperature, &self.bias);
        let top = probabilities[argmax(&probabilities)];
        Decoded {
            confidence: confidence(&probabilities),
            temperature: self.temperature,
            profile: Some(ProfileAnswer {
                name: self.name.clone(),
                prediction_set: prediction_set(&probabilities, &self.cutoffs),
                automate: self.threshold.is_some_and(|t| top >= t),
            }),
            probabilities,
            ..raw
        }
    }
}

/// A served model as a profile may name it: its public name, and the other names it
/// answers to (its aliases and the backend's model id), so a profile fitted on
/// `gemma-3-270m` still covers that model when a config renames it.
#[derive(Debug, Clone)]
pub struct Served<'a> {
    pub name: &'a str,
    pub also: Vec<&'a str>,
}

impl Served<'_> {
    /// The public name of the served model `model` names: its own name first, then an
    /// alias or backend id.
    fn resolve<'s>(served: &'s [Served<'_>], model: &str) -> Option<&'s str> {
        served
            .iter()
            .find(|s| s.name == model)
            .or_else(|| served.iter().find(|s| s.also.contains(&model)))
            .map(|s| s.name)
    }
}

/// The profiles a service knows, by name.
#[derive(Debug, Clone, Default)]
pub struct Profiles(BTreeMap<String, Arc<Profile>>);

impl Profiles {
    /// The shipped profiles whose model is served, then every `*.json` in `dir` (a profile
    /// there replaces a shipped one of the same name). A profile's `model` may be the
    /// served model's name, an alias or its backend id; it then covers that model under
    /// its public name. A profile in `dir` for a model not served is an error: it could
    /// never cover anything.
    pub fn load(dir: Option<&Path>, served: &[Served<'_>]) -> Result<Self, String> {
        let mut profiles = Profiles::default();
        for (name, text) in shipped::PROFILES {
            let p = Profile::parse(text).map_err(|e| format!("shipped profile {name}: {e}"))?;
            if let Some(p) = p.bound_to(served) {
                profiles.insert(p);
            }
        }
        let Some(dir) = dir else {
            return Ok(profiles);
        };
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut paths: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let p = Profile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            let (name, model) = (p.name.clone(), p.model.clone());
            let p = p.bound_to(served).ok_or_else(|| {
                format!(
                    "{}: profile {name} is for model {model}, which this service does not serve (by name, alias or backend model id)",
                    path.display()
                )
            })?;
            profiles.insert(p);
        }
        Ok(profiles)
    }

    /// Adds (or replaces) a profile.
    pub fn insert(&mut self, profile: Profile) {
        self.0.insert(profile.name.to_string(), Arc::new(profile));
    }

    /// The profile of that name.
    pub fn get(&self, name: &str) -> Option<&Arc<Profile>> {
        self.0.get(name)
    }

    /// Every name, sorted (for error messages and the book's examples).
    pub fn names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// How a prediction-set member is written in an answer: the choice label, `true`/`false`
/// for a noul, the level key (`"0"`, `"1"`, …) for a score.
pub fn set_member(question: &LoweredQuestion, index: usize) -> serde_json::Value {
    match question.kind {
        QuestionKind::Choice => serde_json::Value::String(
            question
                .options
                .get(index)
                .map_or_else(String::new, |o| o.label.clone()),
        ),
        QuestionKind::Noul => serde_json::Value::Bool(index == 1),
        QuestionKind::Score => serde_json::Value::String(index.to_string()),
    }
}

/// The prediction set: options whose score `1 − p_j` is at most the cutoff for `j`
/// (`cutoffs` of length 1 applies to every option).
pub fn prediction_set(probs: &[f64], cutoffs: &[f64]) -> Vec<usize> {
    let sum: f64 = probs.iter().sum();
    probs
        .iter()
        .enumerate()
        .filter(|(j, p)| {
            let cut = if cutoffs.len() == 1 {
                cutoffs[0]
            } else {
                cutoffs.get(*j).copied().unwrap_or(1.0)
            };
            1.0 - *p / sum <= cut
        })
        .map(|(j, _)| j)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::question::{lower_choice, lower_noul};
    use serde_json::{json, Value};

    fn spam_profile(threshold: Option<f64>) -> String {
        json!({
            "name": "spam", "model": "m",
            "question": {"type": "noul", "labels": ["no", "yes"]},
            "temperature": 2.0, "bias": [0.5, -0.5],
            "conformal": {"coverage": 0.9, "cutoffs": [0.5]},
            "automation": {"threshold": threshold},
            "fit": {"anything": "ignored"}
        })
        .to_string()
    }

    fn noul() -> LoweredQuestion {
        lower_noul("q".into(), json!("spam?"), Value::Null, Value::Null)
    }

    #[test]
    fn covers_only_its_model_and_shape() {
        let p = Profile::parse(&spam_profile(Some(0.8))).expect("parses");
        assert!(p.covers("m", &noul(), Layout::Accuracy));
        assert!(!p.covers("other", &noul(), Layout::Accuracy));
        let choice = lower_choice(
            "q".into(),
            Value::Null,
            vec![("no".into(), Value::Null), ("yes".into(), Value::Null)],
        );
        assert!(
            !p.covers("m", &choice, Layout::Accuracy),
            "same labels, other type"
        );
    }

    #[test]
    fn a_profile_covers_only_the_layout_family_it_was_fitted_on() {
        let reference = Profile::parse(&spam_profile(None)).expect("parses");
        assert!(reference.covers("m", &noul(), Layout::Accuracy));
        assert!(reference.covers("m", &noul(), Layout::Cost));
        assert!(
            !reference.covers("m", &noul(), Layout::Compact),
            "a profile fitted on the reference's bytes must not silently cover compact"
        );
        let mut file: Value = serde_json::from_str(&spam_profile(None)).expect("json");
        file["layout"] = json!("compact");
        let compact = Profile::parse(&file.to_string()).expect("parses");
        assert!(compact.covers("m", &noul(), Layout::Compact));
        assert!(!compact.covers("m", &noul(), Layout::Accuracy));
        assert!(!compact.covers("m", &noul(), Layout::Cost));
        file["layout"] = json!("fast");
        assert!(
            Profile::parse(&file.to_string()).is_err(),
            "an unknown layout is refused"
        );
    }

    #[test]
    fn apply_tempers_biases_and_flags() {
        let p = Profile::parse(&spam_profile(Some(0.8))).expect("parses");
        // What decoding one pre-mask read of [ln 0.1, ln 0.9] at T = 1 gives.
        let raw = Decoded {
            probabilities: vec![0.1, 0.9],
            option_mass: Some(1.0),
            option_mass_unknown: false,
            temperature: 1.0,
            confidence: confidence(&[0.1, 0.9]),
            profile: None,
            prior: None,
            orders: Vec::new(),
            passed: None,
            model: None,
        };
        let d_clone = raw.clone();
        let d = p.apply(raw);
        // softmax(ln p / 2 + b): exp(ln 0.1/2 + 0.5) vs exp(ln 0.9/2 − 0.5).
        let a = (0.1f64.ln() / 2.0 + 0.5).exp();
        let b = (0.9f64.ln() / 2.0 - 0.5).exp();
        assert!((d.probabilities[1] - b / (a + b)).abs() < 1e-12);
        assert_eq!(d.temperature, 2.0);
        assert_eq!(d.option_mass, Some(1.0));
        let extra = d.profile.expect("profile answer");
        // p = [0.475, 0.525]: scores 0.525 and 0.475; only "yes" is within 0.5.
        assert_eq!(extra.prediction_set, vec![1]);
        assert!(!extra.automate, "0.525 < 0.8");
        let never = Profile::parse(&spam_profile(None)).expect("parses");
        assert!(
            !never
                .apply(d_clone)
                .profile
                .expect("profile answer")
                .automate
        );
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let mut v: serde_json::Value = serde_json::from_str(&spam_profile(None)).expect("json");
        v["bias"] = json!([0.1]);
        let err = Profile::parse(&v.to_string()).expect_err("bias length");
        assert!(err.contains("bias must be 2"), "{err}");
        v["bias"] = json!([0, 0]);
        v["temperature"] = json!(0);
        assert!(Profile::parse(&v.to_string())
            .expect_err("temperature")
            .contains("temperature"));
        v["temperature"] = json!(1);
        v["conformal"]["cutoffs"] = json!([0.1, 0.2, 0.3]);
        assert!(Profile::parse(&v.to_string())
            .expect_err("cutoffs")
            .contains("cutoffs"));
    }

    fn by_name(name: &str) -> Served<'_> {
        Served {
            name,
            also: Vec::new(),
        }
    }

    #[test]
    fn the_shipped_profile_loads_for_its_model_only() {
        let served = Profiles::load(None, &[by_name("gemma-3-270m")]).expect("loads");
        let spam = served.get("spam").expect("shipped spam profile");
        assert_eq!(spam.question.labels, ["no", "yes"]);
        assert!(Profiles::load(None, &[by_name("glm-5.3-flash")])
            .expect("loads")
            .names()
            .is_empty());
        // Renamed in a config: the profile follows the model by its backend id or alias.
        for also in [vec!["gemma-3-270m"], vec!["cheap", "gemma-3-270m"]] {
            let renamed = Served {
                name: "local",
                also,
            };
            let loaded = Profiles::load(None, &[by_name("glm-5.3-flash"), renamed]).expect("loads");
            assert_eq!(loaded.get("spam").expect("follows").model, "local");
        }
    }

    #[test]
    fn a_directory_profile_for_an_unserved_model_is_refused() {
        let dir = std::env::temp_dir().join(format!("systemone-profiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("spam.json"), spam_profile(Some(0.9))).expect("write");
        let loaded = Profiles::load(Some(&dir), &[by_name("m")]).expect("loads");
        assert_eq!(loaded.names(), ["spam"]);
        let err = Profiles::load(Some(&dir), &[by_name("x")]).expect_err("unserved model");
        assert!(err.contains("for model m"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
