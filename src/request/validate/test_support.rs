//! What the unit tables share: a registry of models on backends that are never called
//! (validation sends nothing), bodies built like tests/hermetic/validation_rules.rs builds them, tiny
//! images with valid magic numbers, and the runner that checks each row's outcome.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::validate_with_parts;
use crate::backend::vllm::VllmBackend;
use crate::calibration::profile::{Profiles, Served};
use crate::config::{Layout, Limits};
use crate::error::Code;
use crate::models::tokens::TokenTable;
use crate::models::{Model, Models};
use crate::request::images::Parts;
use crate::request::ValidRequest;

/// The default model: text only, on the 191-label `golden-fake` table.
pub(super) const TEXT: &str = "glm-5.3-flash";
/// A vision-capable model on `gemma-3`: 10 single-token labels, then 00–99 and 000–254.
pub(super) const VISION: &str = "eye";
/// A text model that reads one option id per upstream request (`golden-fake` table) and
/// whose configured layout is `cost`.
pub(super) const NARROW: &str = "narrow";

pub(super) const STATE: &str =
    "A customer writes: my card was charged twice, please refund one charge.";

pub(super) const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
pub(super) const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, b'J', b'F', b'I', b'F'];
pub(super) const WEBP: &[u8] = b"RIFF\x24\0\0\0WEBPVP8 ";
pub(super) const GIF: &[u8] = b"GIF89a\x01\0\x01\0";

fn model(name: &str, table: &str, max_ids_per_read: usize, vision: bool) -> Model {
    let backend = VllmBackend::new(
        crate::backend::pool::pool(std::time::Duration::from_secs(1), 1).expect("a pool for tests"),
        "http://127.0.0.1:9/v1",
        name.to_string(),
        None,
        max_ids_per_read,
    );
    let table = TokenTable::load(table).expect("shipped table");
    Model {
        vision,
        ..Model::new(name, Arc::new(backend), table)
    }
}

/// [`TEXT`] (the default), [`VISION`] and [`NARROW`], with the shipped `spam` profile.
pub(super) fn models() -> Models {
    let profiles = Profiles::load(
        None,
        &[Served {
            name: "gemma-3-270m",
            also: vec![],
        }],
    )
    .expect("shipped profiles");
    bare_models().with_profiles(profiles)
}

/// The same models with no calibration profile loaded.
pub(super) fn bare_models() -> Models {
    let narrow = Model {
        layout: Layout::Cost,
        ..model(NARROW, "golden-fake", 1, false)
    };
    let list = vec![
        Arc::new(model(TEXT, "golden-fake", 128, false)),
        Arc::new(model(VISION, "gemma-3", 128, true)),
        Arc::new(narrow),
    ];
    Models::new(list, 0).expect("distinct names")
}

/// [`TEXT`] alone, configured to ask every question in two orders unless a request says.
pub(super) fn two_order_models() -> Models {
    let text = Model {
        permutations: 2,
        ..model(TEXT, "golden-fake", 128, false)
    };
    Models::new(vec![Arc::new(text)], 0).expect("one name")
}

/// [`TEXT`] alone, learning the position prior (`--prior-correction true`).
pub(super) fn learning_models() -> Models {
    use crate::calibration::prior::{PriorBook, PriorSettings};
    let text = Model {
        prior: Arc::new(PriorBook::new(PriorSettings {
            enabled: true,
            ..PriorSettings::default()
        })),
        ..model(TEXT, "golden-fake", 128, false)
    };
    Models::new(vec![Arc::new(text)], 0).expect("one name")
}

/// A valid choice question.
pub(super) fn choice() -> Value {
    json!({"type": "choice", "instructions": "Which team handles this?",
           "criteria": {"billing": "money questions", "bug": "defects", "other": null}})
}

/// A valid noul question.
pub(super) fn noul() -> Value {
    json!({"type": "noul", "instructions": "Does the customer want a refund?"})
}

/// A valid score question.
pub(super) fn score() -> Value {
    json!({"type": "score", "instructions": "How urgent is it?",
           "criteria": ["Routine", "Soon", "Immediate"]})
}

/// A valid request with one choice question `q1`.
pub(super) fn base() -> Value {
    json!({"state": STATE, "questions": {"q1": choice()}})
}

/// `base()` with one top-level field set.
pub(super) fn top(field: &str, value: Value) -> Value {
    let mut b = base();
    b[field] = value;
    b
}

/// `base()` without one top-level field.
pub(super) fn without(field: &str) -> Value {
    let mut b = base();
    b.as_object_mut().expect("object").remove(field);
    b
}

/// A request whose only question `q1` is `q`.
pub(super) fn q1(q: Value) -> Value {
    json!({"state": STATE, "questions": {"q1": q}})
}

/// A request whose only question `q1` is `q` with `field` set (or removed, for `None`).
pub(super) fn q1_with(mut q: Value, field: &str, value: Option<Value>) -> Value {
    let obj = q.as_object_mut().expect("question object");
    match value {
        Some(v) => obj.insert(field.to_string(), v),
        None => obj.remove(field),
    };
    q1(q)
}

/// `n` valid noul questions `q0`, `q1`, …
pub(super) fn n_questions(n: usize) -> Value {
    let questions: Map<String, Value> = (0..n).map(|i| (format!("q{i}"), noul())).collect();
    json!({"state": STATE, "questions": questions})
}

/// A body parsed from JSON text: for what `json!` cannot write (`1e400`, exact number text).
pub(super) fn raw(text: &str) -> Value {
    serde_json::from_str(text).expect("row body is JSON")
}

/// What a row expects back.
enum Expect {
    /// A valid request for which the check holds.
    Accept(fn(&ValidRequest) -> bool),
    /// This code, at this `loc`, with exactly this message.
    Reject {
        code: Code,
        loc: Vec<String>,
        msg: String,
    },
}

/// One row of a table: a body, the limits, parts and models it is validated under, and
/// what must come back.
pub(super) struct Row {
    name: String,
    body: Value,
    limits: Limits,
    parts: Vec<(&'static str, &'static [u8])>,
    models: fn() -> Models,
    expect: Expect,
}

/// A row that must validate.
pub(super) fn accept(name: &str, body: Value) -> Row {
    Row {
        name: name.to_string(),
        body,
        limits: Limits::default(),
        parts: Vec::new(),
        models,
        expect: Expect::Accept(|_| true),
    }
}

/// A row refused with `code` at `loc` and exactly the message `msg`.
pub(super) fn reject(
    name: &str,
    body: Value,
    code: Code,
    loc: &[&str],
    msg: impl Into<String>,
) -> Row {
    let loc = loc.iter().map(|s| s.to_string()).collect();
    Row {
        expect: Expect::Reject {
            code,
            loc,
            msg: msg.into(),
        },
        ..accept(name, body)
    }
}

impl Row {
    /// An accepted row whose request must also satisfy `check`.
    pub(super) fn holds(mut self, check: fn(&ValidRequest) -> bool) -> Self {
        assert!(
            matches!(self.expect, Expect::Accept(_)),
            "{}: only an accepted row has a request to check",
            self.name
        );
        self.expect = Expect::Accept(check);
        self
    }

    /// Validates under limits changed by `change`.
    pub(super) fn limits(mut self, change: fn(&mut Limits)) -> Self {
        change(&mut self.limits);
        self
    }

    /// Validates as a multipart body with these image parts.
    pub(super) fn parts(mut self, parts: &[(&'static str, &'static [u8])]) -> Self {
        self.parts = parts.to_vec();
        self
    }

    /// Validates against another registry.
    pub(super) fn models(mut self, models: fn() -> Models) -> Self {
        self.models = models;
        self
    }

    /// Every way the row's outcome differs from its expectation.
    fn problems(&self) -> Vec<String> {
        let mut parts = Parts::new();
        for (name, bytes) in &self.parts {
            assert!(parts.insert(name.to_string(), Bytes::from_static(bytes)));
        }
        let models = (self.models)();
        let got = validate_with_parts(self.body.clone(), &parts, &models.routes(), &self.limits)
            .and_then(settle_on_estimate);
        let mut problems = Vec::new();
        match (&self.expect, got) {
            (Expect::Accept(check), Ok(req)) if !check(&req) => {
                problems.push("accepted, but its check does not hold".to_string())
            }
            (Expect::Accept(_), Ok(_)) => {}
            (Expect::Accept(_), Err(e)) => problems.push(format!("refused: {e:?}")),
            (Expect::Reject { .. }, Ok(_)) => problems.push("accepted".to_string()),
            (Expect::Reject { code, loc, msg }, Err(e)) => {
                if e.code != *code {
                    problems.push(format!("code {:?}, expected {code:?}", e.code));
                }
                if e.loc != *loc {
                    problems.push(format!("loc {:?}, expected {loc:?}", e.loc));
                }
                if e.msg != *msg {
                    problems.push(format!("message {:?}, expected {msg:?}", e.msg));
                }
            }
        }
        problems
            .into_iter()
            .map(|p| format!("{}: {p}", self.name))
            .collect()
    }
}

/// A request the estimate put over a token limit, settled as the engine settles it when the
/// backend cannot count exactly (these models' backends are never reachable): refused on
/// the estimate.
fn settle_on_estimate(req: ValidRequest) -> Result<ValidRequest, crate::error::ApiError> {
    match req.recount() {
        Some(recount) => super::check_on_estimate(&req, recount.limits).map(|()| req),
        None => Ok(req),
    }
}

/// Runs a table: every row must get exactly its expected outcome (all rows are run, and
/// every difference reported at once). Row names are unique so a failure names one row.
pub(super) fn run(rows: Vec<Row>) {
    let mut names = std::collections::HashSet::new();
    for row in &rows {
        assert!(
            names.insert(row.name.as_str()),
            "row name {:?} twice",
            row.name
        );
    }
    let problems: Vec<String> = rows.iter().flat_map(Row::problems).collect();
    assert!(
        problems.is_empty(),
        "{} problems in {} rows:\n{}",
        problems.len(),
        rows.len(),
        problems.join("\n")
    );
}

/// Standard base64 of `bytes`, as a caller sends an image.
pub(super) fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
