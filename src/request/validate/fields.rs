//! The top-level fields that are one value each: the body's own shape, `model`, `state`,
//! `temperature`, `calibration`, `layout`, `permutations` and `prior_correction`. Absent and
//! `null` mean the same everywhere: the default.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{loc, refuse, refuse_field_type, refuse_type, type_name, MAX_PERMUTATIONS};
use crate::calibration::profile::Profile;
use crate::config::Layout;
use crate::error::{ApiError, Code};
use crate::json::to_python;
use crate::models::{Model, Models};

/// Every other rule reads named fields, so a body that is not an object (an array, a
/// string, `null`) is refused before any of them, at the body itself (empty `loc`).
pub(super) fn body_object(body: Value) -> Result<Map<String, Value>, ApiError> {
    match body {
        Value::Object(map) => Ok(map),
        other => refuse_type(
            Code::InvalidBody,
            vec![],
            "the body must be a JSON object",
            &other,
        ),
    }
}

/// The top-level fields this service reads; any other is ignored (clients send their own).
pub(super) const TOP_LEVEL_FIELDS: &[&str] = &[
    "model",
    "state",
    "questions",
    "temperature",
    "calibration",
    "layout",
    "permutations",
    "prior_correction",
    "history",
    "images",
    "assets",
];

/// Longest field name [`ignored_fields`] repeats back.
const MAX_ECHOED_NAME: usize = 64;

/// The top-level fields of `body` this service does not read, so the answer can say which
/// were ignored (a misspelled `"temprature"` would otherwise pass unnoticed). Only names a
/// header can carry as they are (printable ASCII without commas, at most 64 characters)
/// are listed; the second value counts every ignored field. `known` is what the front door
/// reads (`TOP_LEVEL_FIELDS` for `/v1/systemone`).
pub fn ignored_fields(body: &Map<String, Value>, known: &[&str]) -> (Vec<String>, usize) {
    let ignored: Vec<&String> = body
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .collect();
    let echoable = ignored
        .iter()
        .filter(|k| {
            k.len() <= MAX_ECHOED_NAME && k.bytes().all(|b| b.is_ascii_graphic() && b != b',')
        })
        .map(|k| k.to_string())
        .collect();
    (echoable, ignored.len())
}

/// `model`: absent or null is the registry's default; a name must be a public name or an
/// alias served here, and the refusal lists the served public names so the caller can pick.
/// Every front door resolves `model` with it.
pub fn requested_model<'m>(
    value: Option<&Value>,
    models: &'m Models,
) -> Result<&'m Arc<Model>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(models.default_model()),
        Some(Value::String(name)) => models.resolve(name).ok_or_else(|| {
            ApiError::at(
                Code::UnsupportedModel,
                loc(&["model"]),
                format!(
                    "model {name:?} is not served here; served models: {}",
                    models.public_names().join(", ")
                ),
            )
        }),
        Some(other) => refuse_field_type(Code::UnsupportedModel, "model", "a string", other),
    }
}

/// `state`: required, and something to judge: a non-blank string, an object or an array
/// (never a bare number, boolean or null). It is then written once as the Python JSON the
/// prompt embeds, which refuses a number no `f64` holds (`1e400`).
pub(super) fn state_json(state: Option<Value>) -> Result<String, ApiError> {
    let state = state
        .ok_or_else(|| ApiError::at(Code::MissingState, loc(&["state"]), "state is required"))?;
    match &state {
        Value::String(s) if s.trim().is_empty() => {
            return refuse(
                Code::InvalidState,
                loc(&["state"]),
                "state must not be a blank string",
            )
        }
        Value::String(_) | Value::Object(_) | Value::Array(_) => {}
        other => {
            return refuse_field_type(
                Code::InvalidState,
                "state",
                "a string, object or array",
                other,
            )
        }
    }
    to_python(&state).map_err(|e| ApiError::at(Code::InvalidNumber, loc(&["state"]), e.to_string()))
}

/// `temperature`: absent or null keeps the model's own default; an override must be a
/// finite number above 0. The message repeats the number's JSON text (kept by the parser,
/// so `1e400` is named as `1e+400` rather than as infinity).
pub(super) fn temperature(value: Option<&Value>) -> Result<Option<f64>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            let t: f64 = n.as_str().parse().unwrap_or(f64::NAN);
            if !(t.is_finite() && t > 0.0) {
                return refuse(
                    Code::BadTemperature,
                    loc(&["temperature"]),
                    format!(
                        "temperature must be a finite number > 0, got {}",
                        n.as_str()
                    ),
                );
            }
            Ok(Some(t))
        }
        Some(other) => {
            refuse_field_type(Code::BadTemperature, "temperature", "a number > 0", other)
        }
    }
}

/// `calibration`: absent or null, or the name of a loaded profile; not together with a
/// `temperature` override (the profile brings its own). The type is checked first, then the
/// clash with `temperature`, then whether the profile exists.
pub(super) fn calibration(
    value: Option<&Value>,
    models: &Models,
    temperature: Option<f64>,
) -> Result<Option<Arc<Profile>>, ApiError> {
    let name = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(name)) => name,
        Some(other) => {
            return refuse_field_type(
                Code::BadCalibration,
                "calibration",
                "the name of a calibration profile (a string)",
                other,
            )
        }
    };
    if let Some(t) = temperature {
        return refuse(
            Code::BadCalibration,
            loc(&["calibration"]),
            format!("calibration and temperature cannot both be set: the profile brings its own temperature (temperature {t})"),
        );
    }
    match models.profiles().get(name) {
        Some(profile) => Ok(Some(profile.clone())),
        None => refuse(
            Code::UnknownCalibration,
            loc(&["calibration"]),
            format!(
                "calibration {name:?} is not a profile this service has; it has {}",
                profile_names(models)
            ),
        ),
    }
}

/// The loaded profiles for an unknown-calibration message: their names, or `none`.
fn profile_names(models: &Models) -> String {
    let names = models.profiles().names();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// `layout`: absent or null is the model's configured layout; otherwise exactly one of the
/// three lower-case names (no other spelling, no other type).
pub(super) fn layout(value: Option<&Value>, model_default: Layout) -> Result<Layout, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(model_default),
        Some(Value::String(s)) if s == "accuracy" => Ok(Layout::Accuracy),
        Some(Value::String(s)) if s == "cost" => Ok(Layout::Cost),
        Some(Value::String(s)) if s == "compact" => Ok(Layout::Compact),
        Some(_) => refuse(
            Code::BadLayout,
            loc(&["layout"]),
            "layout must be \"accuracy\", \"cost\" or \"compact\"",
        ),
    }
}

/// `permutations`: absent or null is the model's default (1, the caller's order only,
/// unless configured); otherwise an integer from 1 to [`MAX_PERMUTATIONS`]. The refusal
/// names the number as sent, or the type sent.
pub(super) fn permutations(value: Option<&Value>, model_default: usize) -> Result<usize, ApiError> {
    let got = match value {
        None | Some(Value::Null) => return Ok(model_default),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(k) if (1..=MAX_PERMUTATIONS as u64).contains(&k) => return Ok(k as usize),
            _ => n.as_str().to_string(),
        },
        Some(other) => type_name(other).to_string(),
    };
    refuse(
        Code::BadPermutations,
        loc(&["permutations"]),
        format!("permutations must be an integer from 1 to {MAX_PERMUTATIONS}, got {got}"),
    )
}

/// `prior_correction`: absent or null is the model's setting (`--prior-correction`);
/// `false` keeps the request out of the position prior (not corrected, not sampled, not
/// learned from); `true` asks for it, which only a model that learns one can give: on any
/// other it is refused rather than quietly ignored, so a caller who relies on it hears so.
pub(super) fn prior_correction(
    value: Option<&Value>,
    model: &Model,
) -> Result<Option<bool>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(false)) => Ok(Some(false)),
        Some(Value::Bool(true)) if model.prior.settings().enabled => Ok(Some(true)),
        Some(Value::Bool(true)) => refuse(
            Code::PriorCorrectionOff,
            loc(&["prior_correction"]),
            format!(
                "prior_correction true asks for the position prior, which model {} does not \
                 learn (its prior_correction setting is false); send false or leave it out",
                model.name
            ),
        ),
        Some(other) => refuse_field_type(
            Code::BadPriorCorrection,
            "prior_correction",
            "a boolean",
            other,
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::test_support::*;
    use crate::config::Layout;
    use crate::error::Code;

    const SERVED: &str = "served models: glm-5.3-flash, eye, narrow";

    #[test]
    #[rustfmt::skip]
    fn body_shape_and_model() {
        let not_served = |name: &str| format!("model {name:?} is not served here; {SERVED}");
        run(vec![
            reject("body is an array", json!([base()]), Code::InvalidBody, &[], "the body must be a JSON object, got an array"),
            reject("body is a string", json!("state"), Code::InvalidBody, &[], "the body must be a JSON object, got a string"),
            reject("body is null", Value::Null, Code::InvalidBody, &[], "the body must be a JSON object, got null"),
            reject("body is a number", json!(42), Code::InvalidBody, &[], "the body must be a JSON object, got a number"),
            reject("unknown model", top("model", json!("gpt-4o")), Code::UnsupportedModel, &["model"], not_served("gpt-4o")),
            reject("empty model name", top("model", json!("")), Code::UnsupportedModel, &["model"], not_served("")),
            reject("model is a number", top("model", json!(7)), Code::UnsupportedModel, &["model"], "model must be a string, got a number"),
            reject("model is a boolean", top("model", json!(true)), Code::UnsupportedModel, &["model"], "model must be a string, got a boolean"),
            reject("model is an array", top("model", json!([TEXT])), Code::UnsupportedModel, &["model"], "model must be a string, got an array"),
            reject("model is an object", top("model", json!({"name": TEXT})), Code::UnsupportedModel, &["model"], "model must be a string, got an object"),
            reject("the model is checked before the state", json!({"model": "gpt-4o"}), Code::UnsupportedModel, &["model"], not_served("gpt-4o")),
            accept("default model by name", top("model", json!(TEXT))).holds(|r| r.model().name == TEXT),
            accept("default model by alias jev-latest", top("model", json!("jev-latest"))).holds(|r| r.model().name == TEXT),
            accept("model null means the default", top("model", Value::Null)).holds(|r| r.model().name == TEXT),
            accept("model absent means the default", base()).holds(|r| r.model().name == TEXT),
            accept("another served model", top("model", json!(VISION))).holds(|r| r.model().name == VISION),
            accept("unknown top-level fields ignored", top("extra", json!({"anything": [1, {"x": null}]}))),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn state() {
        let kind = |got: &str| format!("state must be a string, object or array, got {got}");
        let overflow = r#"{"state": {"amount": 1e400}, "questions": {"q1": {"type": "noul", "instructions": "x"}}}"#;
        let negative = r#"{"state": [1, -2.5e999], "questions": {"q1": {"type": "noul", "instructions": "x"}}}"#;
        run(vec![
            reject("missing state", without("state"), Code::MissingState, &["state"], "state is required"),
            reject("missing state before missing questions", json!({}), Code::MissingState, &["state"], "state is required"),
            reject("empty state", top("state", json!("")), Code::InvalidState, &["state"], "state must not be a blank string"),
            reject("whitespace state", top("state", json!(" \n\t ")), Code::InvalidState, &["state"], "state must not be a blank string"),
            reject("null state", top("state", Value::Null), Code::InvalidState, &["state"], kind("null")),
            reject("integer state", top("state", json!(42)), Code::InvalidState, &["state"], kind("a number")),
            reject("float state", top("state", json!(0.5)), Code::InvalidState, &["state"], kind("a number")),
            reject("true state", top("state", json!(true)), Code::InvalidState, &["state"], kind("a boolean")),
            reject("false state", top("state", json!(false)), Code::InvalidState, &["state"], kind("a boolean")),
            reject("state float overflowing f64", raw(overflow), Code::InvalidNumber, &["state"], "it holds a number outside the range of a 64-bit float (about ±1.8e308)"),
            reject("state negative float overflowing f64", raw(negative), Code::InvalidNumber, &["state"], "it holds a number outside the range of a 64-bit float (about ±1.8e308)"),
            reject("the state is checked before the questions", json!({"state": 1, "questions": []}), Code::InvalidState, &["state"], kind("a number")),
            accept("state string", base()).holds(|r| r.state_json() == format!("\"{STATE}\"")),
            accept("state object", top("state", json!({"ticket": {"text": "refund", "amount": 1e300}}))).holds(|r| r.state_json() == r#"{"ticket": {"text": "refund", "amount": 1e+300}}"#),
            accept("state array", top("state", json!(["refund", 2, null, true]))).holds(|r| r.state_json() == r#"["refund", 2, null, true]"#),
            accept("state empty object", top("state", json!({}))).holds(|r| r.state_json() == "{}"),
            accept("state empty array", top("state", json!([]))).holds(|r| r.state_json() == "[]"),
            accept("state non-blank string", top("state", json!(" x "))).holds(|r| r.state_json() == "\" x \""),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn temperature_and_calibration() {
        let finite = |got: &str| format!("temperature must be a finite number > 0, got {got}");
        let huge = format!(r#"{{"state": "s", "temperature": 1e400, "questions": {{"q1": {}}}}}"#, noul());
        let both = json!({"state": STATE, "questions": {"q1": noul()}, "calibration": "spam", "temperature": 0.5});
        let clash = "calibration and temperature cannot both be set: the profile brings its own temperature (temperature 0.5)";
        let not_string = "calibration must be the name of a calibration profile (a string), got a number";
        let typed_first = json!({"state": STATE, "questions": {"q1": noul()}, "calibration": 7, "temperature": 0.5});
        let bad_t_and_c = json!({"state": STATE, "questions": {"q1": choice()}, "temperature": 0, "calibration": 7});
        run(vec![
            reject("temperature 0", top("temperature", json!(0)), Code::BadTemperature, &["temperature"], finite("0")),
            reject("temperature 0.0", top("temperature", json!(0.0)), Code::BadTemperature, &["temperature"], finite("0.0")),
            reject("temperature negative", top("temperature", json!(-1.5)), Code::BadTemperature, &["temperature"], finite("-1.5")),
            reject("temperature 1e400", raw(&huge), Code::BadTemperature, &["temperature"], finite("1e+400")),
            reject("temperature string", top("temperature", json!("1")), Code::BadTemperature, &["temperature"], "temperature must be a number > 0, got a string"),
            reject("temperature boolean", top("temperature", json!(true)), Code::BadTemperature, &["temperature"], "temperature must be a number > 0, got a boolean"),
            reject("questions before temperature", json!({"state": STATE, "questions": {}, "temperature": 0}), Code::NoQuestions, &["questions"], "questions must hold at least 1 question, got 0"),
            accept("temperature 1", top("temperature", json!(1))).holds(|r| r.temperature() == Some(1.0)),
            accept("temperature 0.25", top("temperature", json!(0.25))).holds(|r| r.temperature() == Some(0.25)),
            accept("temperature tiny", top("temperature", json!(1e-300))).holds(|r| r.temperature() == Some(1e-300)),
            accept("temperature null", top("temperature", Value::Null)).holds(|r| r.temperature().is_none()),
            reject("calibration is a number", top("calibration", json!(7)), Code::BadCalibration, &["calibration"], not_string),
            reject("calibration with temperature", both, Code::BadCalibration, &["calibration"], clash),
            reject("calibration type before the clash", typed_first, Code::BadCalibration, &["calibration"], not_string),
            reject("temperature before calibration", bad_t_and_c, Code::BadTemperature, &["temperature"], finite("0")),
            reject("unknown calibration", top("calibration", json!("nope")), Code::UnknownCalibration, &["calibration"], "calibration \"nope\" is not a profile this service has; it has spam"),
            reject("unknown calibration, no profiles", top("calibration", json!("spam")), Code::UnknownCalibration, &["calibration"], "calibration \"spam\" is not a profile this service has; it has none").models(bare_models),
            accept("no calibration", q1(noul())).holds(|r| r.calibration().is_none()),
            accept("calibration names a profile", json!({"state": STATE, "questions": {"q1": noul()}, "calibration": "spam"})).holds(|r| r.calibration().is_some_and(|p| &*p.name == "spam")),
            accept("calibration null", top("calibration", Value::Null)).holds(|r| r.calibration().is_none()),
        ]);
    }

    /// `body` asked of [`NARROW`], whose configured layout is `cost`.
    fn on_narrow(mut body: Value) -> Value {
        body["model"] = json!(NARROW);
        body
    }

    #[test]
    #[rustfmt::skip]
    fn layout_and_permutations() {
        let perms = |got: &str| format!("permutations must be an integer from 1 to 8, got {got}");
        let bad_both = json!({"state": STATE, "questions": {"q1": choice()}, "layout": "fast", "permutations": 0});
        let layout = "layout must be \"accuracy\", \"cost\" or \"compact\"";
        run(vec![
            reject("layout fast", top("layout", json!("fast")), Code::BadLayout, &["layout"], layout),
            reject("layout upper-case", top("layout", json!("COST")), Code::BadLayout, &["layout"], layout),
            reject("layout number", top("layout", json!(1)), Code::BadLayout, &["layout"], layout),
            reject("layout before permutations", bad_both, Code::BadLayout, &["layout"], layout),
            reject("temperature before layout", json!({"state": STATE, "questions": {"q1": choice()}, "temperature": 0, "layout": 1}), Code::BadTemperature, &["temperature"], "temperature must be a finite number > 0, got 0"),
            reject("calibration before layout", json!({"state": STATE, "questions": {"q1": choice()}, "calibration": 7, "layout": 1}), Code::BadCalibration, &["calibration"], "calibration must be the name of a calibration profile (a string), got a number"),
            accept("layout cost", top("layout", json!("cost"))).holds(|r| r.layout() == Layout::Cost),
            accept("layout compact", top("layout", json!("compact"))).holds(|r| r.layout() == Layout::Compact && r.rendered()[0].text[0].starts_with("Question: ")),
            accept("layout compact overrides the model's", on_narrow(top("layout", json!("compact")))).holds(|r| r.layout() == Layout::Compact && !r.rendered()[0].text[0].starts_with('{')),
            accept("layout cost renders question objects", on_narrow(top("layout", json!("cost")))).holds(|r| r.rendered()[0].text[0].starts_with('{')),
            accept("layout accuracy", top("layout", json!("accuracy"))).holds(|r| r.layout() == Layout::Accuracy),
            accept("layout null is the model's", on_narrow(top("layout", Value::Null))).holds(|r| r.layout() == Layout::Cost),
            accept("layout absent is the model's", on_narrow(base())).holds(|r| r.layout() == Layout::Cost),
            accept("layout accuracy overrides the model's", on_narrow(top("layout", json!("accuracy")))).holds(|r| r.layout() == Layout::Accuracy),
            reject("permutations 0", top("permutations", json!(0)), Code::BadPermutations, &["permutations"], perms("0")),
            reject("permutations 9", top("permutations", json!(9)), Code::BadPermutations, &["permutations"], perms("9")),
            reject("permutations -1", top("permutations", json!(-1)), Code::BadPermutations, &["permutations"], perms("-1")),
            reject("permutations 2.5", top("permutations", json!(2.5)), Code::BadPermutations, &["permutations"], perms("2.5")),
            reject("permutations string", top("permutations", json!("2")), Code::BadPermutations, &["permutations"], perms("a string")),
            reject("permutations array", top("permutations", json!([2])), Code::BadPermutations, &["permutations"], perms("an array")),
            accept("permutations null is 1", top("permutations", Value::Null)).holds(|r| r.permutations() == 1),
            accept("permutations 1", top("permutations", json!(1))).holds(|r| r.permutations() == 1 && r.rendered()[0].shifts == [0]),
            accept("permutations 8, capped at 3 options", top("permutations", json!(8))).holds(|r| r.permutations() == 8 && r.rendered()[0].shifts == [0, 1, 2]),
            accept("permutations absent is the model's", base()).models(two_order_models).holds(|r| r.permutations() == 2 && r.rendered()[0].shifts.len() == 2),
            accept("permutations null is the model's", top("permutations", Value::Null)).models(two_order_models).holds(|r| r.permutations() == 2),
            accept("permutations 1 overrides the model's", top("permutations", json!(1))).models(two_order_models).holds(|r| r.permutations() == 1 && r.rendered()[0].shifts == [0]),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn prior_correction_switch() {
        let off = "prior_correction true asks for the position prior, which model glm-5.3-flash does not learn (its prior_correction setting is false); send false or leave it out";
        let boolean = |got: &str| format!("prior_correction must be a boolean, got {got}");
        let late = json!({"state": STATE, "questions": {"q1": choice()}, "permutations": 0, "prior_correction": 1});
        run(vec![
            reject("true where the model does not learn", top("prior_correction", json!(true)), Code::PriorCorrectionOff, &["prior_correction"], off),
            reject("a string", top("prior_correction", json!("false")), Code::BadPriorCorrection, &["prior_correction"], boolean("a string")).models(learning_models),
            reject("a number", top("prior_correction", json!(0)), Code::BadPriorCorrection, &["prior_correction"], boolean("a number")),
            reject("an object", top("prior_correction", json!({})), Code::BadPriorCorrection, &["prior_correction"], boolean("an object")),
            reject("permutations before prior_correction", late, Code::BadPermutations, &["permutations"], "permutations must be an integer from 1 to 8, got 0"),
            accept("absent is the model's (off)", base()).holds(|r| r.prior_switch().is_none()),
            accept("absent is the model's (on)", base()).models(learning_models).holds(|r| r.prior_switch().is_none()),
            accept("null is the model's", top("prior_correction", Value::Null)).models(learning_models).holds(|r| r.prior_switch().is_none()),
            accept("false opts out where the model learns", top("prior_correction", json!(false))).models(learning_models).holds(|r| r.prior_switch() == Some(false)),
            accept("false where the model does not learn", top("prior_correction", json!(false))).holds(|r| r.prior_switch() == Some(false)),
            accept("true where the model learns", top("prior_correction", json!(true))).models(learning_models).holds(|r| r.prior_switch() == Some(true)),
        ]);
    }
}
