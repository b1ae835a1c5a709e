//! Validation: a caller's JSON body becomes a [`ValidRequest`], the only thing the engine
//! runs. Every schema and size rule of the contract is checked here, before any upstream
//! call, and each failure names the field, the limit and the value received.
//!
//! Token limits are counted with [`crate::models::tokens::estimate_tokens`] (see its doc for how
//! it errs) until a model's real tokenizer is configured.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{History, ValidRequest};

use super::prompt;
use crate::calibration::profile::Profile;
use crate::config::{Layout, Limits};
use crate::error::{ApiError, Code};
use crate::json::to_python;
use crate::models::{Model, Models};
use crate::question::{lower_choice, lower_noul, lower_score, LoweredQuestion};
use crate::request::images::{data_url, decode_image_string, part_label, sniff, ImageError, Parts};

/// Most characters in a choice label.
pub const MAX_LABEL_CHARS: usize = 128;
/// Most rotated option orders a request may ask for.
pub const MAX_PERMUTATIONS: usize = 8;

fn loc(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks a JSON body against the contract and the model's capacity.
pub fn validate(body: Value, models: &Models, limits: &Limits) -> Result<ValidRequest, ApiError> {
    validate_with_parts(body, &Parts::new(), models, limits)
}

/// Checks a body against the contract and the model's capacity; `parts` are the image parts
/// of a multipart body (empty for a JSON body), which `assets` entries claim by name.
pub fn validate_with_parts(
    body: Value,
    parts: &Parts,
    models: &Models,
    limits: &Limits,
) -> Result<ValidRequest, ApiError> {
    let Value::Object(mut body) = body else {
        return Err(ApiError::at(
            Code::InvalidBody,
            vec![],
            format!("the body must be a JSON object, got {}", type_name(&body)),
        ));
    };

    let requested = match body.get("model") {
        None | Some(Value::Null) => models.default_model(),
        Some(Value::String(name)) => models.resolve(name).ok_or_else(|| {
            ApiError::at(
                Code::UnsupportedModel,
                loc(&["model"]),
                format!(
                    "model {name:?} is not served here; served models: {}",
                    models.public_names().join(", ")
                ),
            )
        })?,
        Some(other) => {
            return Err(ApiError::at(
                Code::UnsupportedModel,
                loc(&["model"]),
                format!("model must be a string, got {}", type_name(other)),
            ))
        }
    };
    let model = models.serving(requested).clone();

    let state = body
        .remove("state")
        .ok_or_else(|| ApiError::at(Code::MissingState, loc(&["state"]), "state is required"))?;
    match &state {
        Value::String(s) if s.trim().is_empty() => {
            return Err(ApiError::at(
                Code::InvalidState,
                loc(&["state"]),
                "state must not be a blank string",
            ))
        }
        Value::String(_) | Value::Object(_) | Value::Array(_) => {}
        other => {
            return Err(ApiError::at(
                Code::InvalidState,
                loc(&["state"]),
                format!(
                    "state must be a string, object or array, got {}",
                    type_name(other)
                ),
            ))
        }
    }
    let state_json = to_python(&state)
        .map_err(|e| ApiError::at(Code::InvalidNumber, loc(&["state"]), e.to_string()))?;

    let mut questions = Vec::new();
    let mut question_tokens = Vec::new();
    let mut first_orders = Vec::new();
    for (q, tokens, json) in validate_questions(body.remove("questions"), &model, limits)? {
        questions.push(q);
        question_tokens.push(tokens);
        first_orders.push(json);
    }

    let temperature = match body.get("temperature") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => {
            let t: f64 = n.as_str().parse().unwrap_or(f64::NAN);
            if !(t.is_finite() && t > 0.0) {
                return Err(ApiError::at(
                    Code::BadTemperature,
                    loc(&["temperature"]),
                    format!(
                        "temperature must be a finite number > 0, got {}",
                        n.as_str()
                    ),
                ));
            }
            Some(t)
        }
        Some(other) => {
            return Err(ApiError::at(
                Code::BadTemperature,
                loc(&["temperature"]),
                format!("temperature must be a number > 0, got {}", type_name(other)),
            ))
        }
    };

    let calibration = validate_calibration(body.get("calibration"), models, temperature)?;

    let layout = match body.get("layout") {
        None | Some(Value::Null) => model.layout,
        Some(Value::String(s)) if s == "accuracy" => Layout::Accuracy,
        Some(Value::String(s)) if s == "cost" => Layout::Cost,
        Some(_) => {
            return Err(ApiError::at(
                Code::BadLayout,
                loc(&["layout"]),
                "layout must be \"accuracy\" or \"cost\"",
            ))
        }
    };

    let permutations = match body.get("permutations") {
        None | Some(Value::Null) => 1,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(k) if (1..=MAX_PERMUTATIONS as u64).contains(&k) => k as usize,
            _ => {
                return Err(ApiError::at(
                    Code::BadPermutations,
                    loc(&["permutations"]),
                    format!(
                        "permutations must be an integer from 1 to {MAX_PERMUTATIONS}, got {}",
                        n.as_str()
                    ),
                ))
            }
        },
        Some(other) => {
            return Err(ApiError::at(
                Code::BadPermutations,
                loc(&["permutations"]),
                format!(
                    "permutations must be an integer from 1 to {MAX_PERMUTATIONS}, got {}",
                    type_name(other)
                ),
            ))
        }
    };

    let history = validate_history(body.get("history"), &questions)?;
    let images = validate_images(&body, parts, &model, limits)?;

    let rendered = questions
        .iter()
        .zip(first_orders)
        .map(|(q, first)| prompt::render_orders(q, first, permutations, &model.table))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::at(Code::InvalidNumber, loc(&["questions"]), e.to_string()))?;
    let request = ValidRequest {
        model,
        state_json,
        questions,
        rendered,
        temperature,
        calibration,
        layout,
        permutations,
        history,
        images,
    };
    check_token_limits(&request, &question_tokens, limits)?;
    Ok(request)
}

/// `calibration`: absent or null, or the name of a loaded profile; not together with a
/// `temperature` override (the profile brings its own).
fn validate_calibration(
    value: Option<&Value>,
    models: &Models,
    temperature: Option<f64>,
) -> Result<Option<Arc<Profile>>, ApiError> {
    let name = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(name)) => name,
        Some(other) => {
            return Err(ApiError::at(
                Code::BadCalibration,
                loc(&["calibration"]),
                format!(
                    "calibration must be the name of a calibration profile (a string), got {}",
                    type_name(other)
                ),
            ))
        }
    };
    if let Some(t) = temperature {
        return Err(ApiError::at(
            Code::BadCalibration,
            loc(&["calibration"]),
            format!("calibration and temperature cannot both be set: the profile brings its own temperature (temperature {t})"),
        ));
    }
    match models.profiles().get(name) {
        Some(profile) => Ok(Some(profile.clone())),
        None => {
            let names = models.profiles().names();
            Err(ApiError::at(
                Code::UnknownCalibration,
                loc(&["calibration"]),
                format!(
                    "calibration {name:?} is not a profile this service has; it has {}",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            ))
        }
    }
}

/// The questions, each with its token count.
fn validate_questions(
    questions: Option<Value>,
    model: &Model,
    limits: &Limits,
) -> Result<Vec<(LoweredQuestion, usize, String)>, ApiError> {
    let questions = match questions {
        Some(Value::Object(map)) => map,
        None => {
            return Err(ApiError::at(
                Code::InvalidQuestions,
                loc(&["questions"]),
                "questions is required: an object of question id -> question",
            ))
        }
        Some(other) => {
            return Err(ApiError::at(
                Code::InvalidQuestions,
                loc(&["questions"]),
                format!(
                    "questions must be an object of question id -> question, got {}",
                    type_name(&other)
                ),
            ))
        }
    };
    if questions.is_empty() {
        return Err(ApiError::at(
            Code::NoQuestions,
            loc(&["questions"]),
            "questions must hold at least 1 question, got 0",
        ));
    }
    if questions.len() > limits.max_questions {
        return Err(ApiError::at(
            Code::TooManyQuestions,
            loc(&["questions"]),
            format!(
                "{} questions is more than the limit of {}",
                questions.len(),
                limits.max_questions
            ),
        ));
    }
    questions
        .into_iter()
        .map(|(id, q)| validate_question(id, q, model, limits))
        .collect()
}

fn validate_question(
    id: String,
    question: Value,
    model: &Model,
    limits: &Limits,
) -> Result<(LoweredQuestion, usize, String), ApiError> {
    if id.is_empty() {
        return Err(ApiError::at(
            Code::InvalidQuestionId,
            loc(&["questions", ""]),
            "question ids must be non-empty strings",
        ));
    }
    let at = |field: Option<&str>| {
        let mut l = vec!["questions".to_string(), id.clone()];
        l.extend(field.map(str::to_string));
        l
    };
    let Value::Object(mut q) = question else {
        return Err(ApiError::at(
            Code::InvalidQuestion,
            at(None),
            format!("a question must be an object, got {}", type_name(&question)),
        ));
    };
    if let Some(field) = q
        .keys()
        .find(|k| !matches!(k.as_str(), "type" | "instructions" | "criteria"))
    {
        return Err(ApiError::at(
            Code::UnknownField,
            at(Some(field)),
            "unknown field; a question has only type, instructions and criteria",
        ));
    }
    let kind = match q.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(other) => {
            return Err(ApiError::at(
                Code::InvalidQuestion,
                at(Some("type")),
                format!("type must be a string, got {}", type_name(other)),
            ))
        }
        None => {
            return Err(ApiError::at(
                Code::InvalidQuestion,
                at(Some("type")),
                "type is required: \"choice\", \"noul\" or \"score\"",
            ))
        }
    };
    let instructions = q.remove("instructions").unwrap_or(Value::Null);
    if matches!(instructions, Value::Bool(_) | Value::Number(_)) {
        return Err(ApiError::at(
            Code::InvalidInstructions,
            at(Some("instructions")),
            format!(
                "instructions must be a string, object, array or null, got {}",
                type_name(&instructions)
            ),
        ));
    }
    let criteria = q.remove("criteria");
    let lowered = match kind.as_str() {
        "choice" => {
            let map = match criteria {
                Some(Value::Object(map)) => map,
                Some(other) => {
                    return Err(ApiError::at(
                        Code::InvalidCriteria,
                        at(Some("criteria")),
                        format!(
                            "a choice's criteria must be an object label -> description, got {}",
                            type_name(&other)
                        ),
                    ))
                }
                None => {
                    return Err(ApiError::at(
                        Code::InvalidCriteria,
                        at(Some("criteria")),
                        "a choice needs criteria: an object label -> description",
                    ))
                }
            };
            check_option_count(
                map.len(),
                limits.max_options,
                model,
                &at(Some("criteria")),
                Code::TooManyOptions,
            )?;
            let mut options = Vec::with_capacity(map.len());
            for (index, (label, description)) in map.into_iter().enumerate() {
                check_label(&label, index, &at(Some("criteria")))?;
                check_description(&description, &at(Some("criteria")), index)?;
                options.push((label, description));
            }
            lower_choice(id.clone(), instructions, options)
        }
        "noul" => {
            let (if_false, if_true) = match criteria {
                None | Some(Value::Null) => (Value::Null, Value::Null),
                Some(Value::Object(mut map)) => {
                    if let Some(key) = map.keys().find(|k| *k != "true" && *k != "false") {
                        return Err(ApiError::at(
                            Code::InvalidCriteria,
                            at(Some("criteria")),
                            format!("a noul's criteria may only have the keys \"true\" and \"false\", got {key:?}"),
                        ));
                    }
                    let f = map.remove("false").unwrap_or(Value::Null);
                    let t = map.remove("true").unwrap_or(Value::Null);
                    check_description(&f, &at(Some("criteria")), 0)?;
                    check_description(&t, &at(Some("criteria")), 1)?;
                    (f, t)
                }
                Some(other) => {
                    return Err(ApiError::at(
                        Code::InvalidCriteria,
                        at(Some("criteria")),
                        format!("a noul's criteria must be an object with \"true\" and/or \"false\", got {}", type_name(&other)),
                    ))
                }
            };
            if is_nothing(&instructions) && is_nothing(&if_false) && is_nothing(&if_true) {
                return Err(ApiError::at(
                    Code::NothingToAsk,
                    at(None),
                    "a noul needs instructions or a description in criteria; both are empty",
                ));
            }
            lower_noul(id.clone(), instructions, if_false, if_true)
        }
        "score" => {
            let levels = match criteria {
                Some(Value::Array(levels)) => levels,
                Some(other) => {
                    return Err(ApiError::at(
                        Code::InvalidCriteria,
                        at(Some("criteria")),
                        format!(
                            "a score's criteria must be an array of levels, lowest first, got {}",
                            type_name(&other)
                        ),
                    ))
                }
                None => {
                    return Err(ApiError::at(
                        Code::InvalidCriteria,
                        at(Some("criteria")),
                        "a score needs criteria: an array of levels, lowest first",
                    ))
                }
            };
            check_option_count(
                levels.len(),
                limits.max_levels,
                model,
                &at(Some("criteria")),
                Code::TooManyLevels,
            )?;
            for (index, level) in levels.iter().enumerate() {
                if matches!(level, Value::Null | Value::Bool(_) | Value::Number(_)) {
                    return Err(ApiError::at(
                        Code::InvalidCriteria,
                        at(Some("criteria")),
                        format!(
                            "level {index} must be a string, object or array, got {}",
                            type_name(level)
                        ),
                    ));
                }
            }
            lower_score(id.clone(), instructions, levels)
        }
        _ => {
            return Err(ApiError::at(
                Code::UnsupportedQuestionType,
                at(Some("type")),
                "type must be \"choice\", \"noul\" or \"score\"",
            ))
        }
    };
    let rendered = prompt::question_json(&lowered, 0, &model.table)
        .map_err(|e| ApiError::at(Code::InvalidNumber, at(None), e.to_string()))?;
    let tokens = model.counter.count(&rendered);
    if tokens > limits.max_question_tokens {
        return Err(ApiError::at(
            Code::QuestionTooLarge,
            at(None),
            format!(
                "the question is about {tokens} tokens, more than the limit of {}",
                limits.max_question_tokens
            ),
        ));
    }
    Ok((lowered, tokens, rendered))
}

/// Null, or a blank string: says nothing.
fn is_nothing(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        _ => false,
    }
}

fn check_option_count(
    n: usize,
    limit: usize,
    model: &Model,
    at: &[String],
    over_limit: Code,
) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::at(
            Code::InvalidCriteria,
            at.to_vec(),
            "criteria must hold at least 1 option, got 0",
        ));
    }
    if n > limit {
        return Err(ApiError::at(
            over_limit,
            at.to_vec(),
            format!("{n} options is more than the limit of {limit}"),
        ));
    }
    let capacity = model.table.capacity();
    if n > capacity {
        return Err(ApiError::at(
            Code::TooManyOptions,
            at.to_vec(),
            format!(
                "{n} options is more than the {capacity} single-token option labels model {} has",
                model.name
            ),
        ));
    }
    Ok(())
}

fn check_label(label: &str, index: usize, at: &[String]) -> Result<(), ApiError> {
    let problem = if label.trim().is_empty() {
        Some("is blank".to_string())
    } else if label.chars().count() > MAX_LABEL_CHARS {
        Some(format!(
            "has {} characters, more than the limit of {MAX_LABEL_CHARS}",
            label.chars().count()
        ))
    } else if label
        .chars()
        .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
    {
        Some("contains a line break or control character".to_string())
    } else {
        None
    };
    match problem {
        Some(p) => Err(ApiError::at(
            Code::InvalidLabel,
            at.to_vec(),
            format!("label #{index} {p}"),
        )),
        None => Ok(()),
    }
}

fn check_description(description: &Value, at: &[String], index: usize) -> Result<(), ApiError> {
    if matches!(description, Value::Bool(_) | Value::Number(_)) {
        return Err(ApiError::at(
            Code::InvalidDescription,
            at.to_vec(),
            format!(
                "the description of option #{index} must be a string, object, array or null, got {}",
                type_name(description)
            ),
        ));
    }
    Ok(())
}

fn validate_history(
    history: Option<&Value>,
    questions: &[LoweredQuestion],
) -> Result<History, ApiError> {
    match history {
        None | Some(Value::Null) => Ok(History::None),
        Some(Value::String(s)) => Ok(History::Shared(s.clone())),
        Some(Value::Object(map)) => {
            if let Some(key) = map.keys().find(|k| !questions.iter().any(|q| &q.id == *k)) {
                return Err(ApiError::at(
                    Code::BadHistory,
                    vec!["history".into(), key.clone()],
                    "history names a question id that is not in questions",
                ));
            }
            let per = questions
                .iter()
                .map(|q| match map.get(&q.id) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(other) => Err(ApiError::at(
                        Code::BadHistory,
                        vec!["history".into(), q.id.clone()],
                        format!(
                            "a question's history must be a string, got {}",
                            type_name(other)
                        ),
                    )),
                })
                .collect::<Result<_, _>>()?;
            Ok(History::PerQuestion(per))
        }
        Some(other) => Err(ApiError::at(
            Code::BadHistory,
            loc(&["history"]),
            format!(
                "history must be a string or an object question id -> string, got {}",
                type_name(other)
            ),
        )),
    }
}

/// Images and assets (contract `images`, `assets`, "Multipart images"): refused up front
/// for a model not configured as vision-capable; otherwise each is decoded, sniffed (PNG,
/// JPEG or WebP) and checked against the count and size limits. Returns the data URLs in
/// sending order (`images` in array order, then `assets` in map order), an image sent twice
/// (same bytes) only once. The `<image:HEX>` references stay where the caller put them.
fn validate_images(
    body: &Map<String, Value>,
    parts: &Parts,
    model: &Model,
    limits: &Limits,
) -> Result<Vec<Arc<str>>, ApiError> {
    let images: &[Value] = match body.get("images") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::at(
                Code::InvalidBody,
                loc(&["images"]),
                format!(
                    "images must be an array of strings, got {}",
                    type_name(other)
                ),
            ))
        }
    };
    let empty = Map::new();
    let assets = match body.get("assets") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(ApiError::at(
                Code::InvalidBody,
                loc(&["assets"]),
                format!("assets must be an object, got {}", type_name(other)),
            ))
        }
    };
    if images.is_empty() && assets.is_empty() && parts.is_empty() {
        return Ok(Vec::new());
    }
    if !model.vision {
        let (at, what) = if !images.is_empty() {
            (loc(&["images"]), "images")
        } else if !assets.is_empty() {
            (loc(&["assets"]), "image assets")
        } else {
            (vec![], "multipart image parts")
        };
        return Err(ApiError::at(
            Code::ImagesUnsupported,
            at,
            format!(
                "model {} is not configured as vision-capable, so it takes no {what}",
                model.name
            ),
        ));
    }
    let count = images.len() + assets.len();
    if count > limits.max_images {
        return Err(ApiError::new(
            Code::TooManyImages,
            format!(
                "{count} images ({} in images, {} in assets) is more than the limit of {} per request",
                images.len(),
                assets.len(),
                limits.max_images
            ),
        ));
    }

    let mut checked = CheckedImages::new(limits);
    for (i, item) in images.iter().enumerate() {
        let at = vec!["images".to_string(), i.to_string()];
        let Value::String(text) = item else {
            return Err(ApiError::at(
                Code::InvalidImage,
                at,
                format!(
                    "image #{i} must be a string (a data:image/...;base64, URL or raw base64), got {}",
                    type_name(item)
                ),
            ));
        };
        let bytes = decode_image_string(text).map_err(|e| image_error(e, i, &at))?;
        checked.add(&bytes, i, &at)?;
    }

    let mut claimed: Vec<&str> = Vec::new();
    for (j, (key, entry)) in assets.iter().enumerate() {
        let i = images.len() + j;
        let at = |field: Option<&str>| {
            let mut l = vec!["assets".to_string(), key.clone()];
            l.extend(field.map(str::to_string));
            l
        };
        let Value::Object(entry) = entry else {
            return Err(ApiError::at(
                Code::InvalidAsset,
                at(None),
                format!(
                    "asset (image #{i}) must be an object {{\"type\": \"image\", \"part\" or \"data_base64\": …}}, got {}",
                    type_name(entry)
                ),
            ));
        };
        match entry.get("type") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t == "image" => {}
            Some(_) => {
                return Err(ApiError::at(
                    Code::InvalidAsset,
                    at(Some("type")),
                    format!(
                        "asset (image #{i}): type must be \"image\", the only asset type served"
                    ),
                ))
            }
        }
        if let Some(format) = entry.get("format") {
            if !matches!(format, Value::Null | Value::String(_)) {
                return Err(ApiError::at(
                    Code::InvalidAsset,
                    at(Some("format")),
                    format!(
                        "asset (image #{i}): format must be a string, got {}",
                        type_name(format)
                    ),
                ));
            }
        }
        let decoded;
        let bytes: &[u8] = match (entry.get("part"), entry.get("data_base64")) {
            (Some(Value::String(part)), _) => {
                let Some(bytes) = parts.get(part) else {
                    let why = if parts.is_empty() {
                        "but the body is not multipart/form-data (send the bytes there, or inline as data_base64)"
                    } else {
                        "but the multipart body has no part of that name"
                    };
                    return Err(ApiError::at(
                        Code::InvalidAsset,
                        at(Some("part")),
                        format!("asset (image #{i}) names a multipart part {why}"),
                    ));
                };
                if claimed.contains(&part.as_str()) {
                    return Err(ApiError::at(
                        Code::InvalidAsset,
                        at(Some("part")),
                        format!("asset (image #{i}) names a multipart part another asset already names; each part belongs to one asset"),
                    ));
                }
                claimed.push(part);
                bytes
            }
            (Some(other), _) if !other.is_null() => {
                return Err(ApiError::at(
                    Code::InvalidAsset,
                    at(Some("part")),
                    format!(
                        "asset (image #{i}): part must be the name of a multipart part, got {}",
                        type_name(other)
                    ),
                ))
            }
            (_, Some(Value::String(text))) => {
                decoded = decode_image_string(text)
                    .map_err(|e| image_error(e, i, &at(Some("data_base64"))))?;
                &decoded
            }
            (_, Some(other)) if !other.is_null() => {
                return Err(ApiError::at(
                    Code::InvalidAsset,
                    at(Some("data_base64")),
                    format!(
                        "asset (image #{i}): data_base64 must be a base64 string, got {}",
                        type_name(other)
                    ),
                ))
            }
            _ => {
                let msg = format!("asset (image #{i}) needs \"part\" or \"data_base64\"");
                return Err(ApiError::at(Code::InvalidAsset, at(None), msg));
            }
        };
        checked.add(bytes, i, &at(None))?;
    }
    if let Some(name) = parts.names().find(|name| !claimed.contains(name)) {
        return Err(ApiError::at(
            Code::InvalidAsset,
            loc(&["assets"]),
            format!(
                "multipart part {} is not named by any asset; each image part must be claimed by an entry of assets",
                part_label(name)
            ),
        ));
    }
    Ok(checked.urls)
}

/// The images accepted so far and their decoded bytes together.
struct CheckedImages<'a> {
    limits: &'a Limits,
    total: usize,
    urls: Vec<Arc<str>>,
}

impl<'a> CheckedImages<'a> {
    fn new(limits: &'a Limits) -> Self {
        CheckedImages {
            limits,
            total: 0,
            urls: Vec::new(),
        }
    }

    /// Checks image #`i` (size, total, format) and keeps its data URL.
    fn add(&mut self, bytes: &[u8], i: usize, at: &[String]) -> Result<(), ApiError> {
        let limits = self.limits;
        if bytes.len() > limits.max_image_bytes {
            return Err(ApiError::at(
                Code::ImageTooLarge,
                at.to_vec(),
                format!(
                    "image #{i} is {} bytes decoded, more than the limit of {} bytes per image",
                    bytes.len(),
                    limits.max_image_bytes
                ),
            ));
        }
        self.total += bytes.len();
        if self.total > limits.max_image_total_bytes {
            return Err(ApiError::at(
                Code::ImagesTooLarge,
                at.to_vec(),
                format!(
                    "images #0 to #{i} are {} bytes decoded together, more than the limit of {} bytes per request",
                    self.total, limits.max_image_total_bytes
                ),
            ));
        }
        let format = sniff(bytes).map_err(|e| image_error(e, i, at))?;
        let url: Arc<str> = Arc::from(data_url(format, bytes));
        if !self.urls.contains(&url) {
            self.urls.push(url);
        }
        Ok(())
    }
}

/// The caller's error for image #`i` at `at`.
fn image_error(e: ImageError, i: usize, at: &[String]) -> ApiError {
    let code = match e {
        ImageError::Url { .. } => Code::ImageUrlRefused,
        ImageError::Unsupported(_) => Code::UnsupportedImageFormat,
        ImageError::NotBase64DataUrl | ImageError::Base64(_) | ImageError::Empty => {
            Code::InvalidImage
        }
    };
    ApiError::at(code, at.to_vec(), format!("image #{i} {e}"))
}

/// Tokens each upstream request adds around its parts (`{"state": `, newlines, the chat
/// template's turn markers and the `answer=` prefill): a generous allowance.
const FRAMING_TOKENS: usize = 32;

/// The state and whole-request token limits (the per-question one is checked with each
/// question). Counts each piece once and multiplies: no prompt is rendered here.
fn check_token_limits(
    req: &ValidRequest,
    question_tokens: &[usize],
    limits: &Limits,
) -> Result<(), ApiError> {
    let counter = &req.model.counter;
    let state_tokens = counter.count(&req.state_json);
    if state_tokens > limits.max_state_tokens {
        return Err(ApiError::at(
            Code::StateTooLarge,
            loc(&["state"]),
            format!(
                "the state is {}{state_tokens} tokens, more than the limit of {}",
                if counter.is_exact() { "" } else { "about " },
                limits.max_state_tokens
            ),
        ));
    }
    let per_read_ids = req.model.backend.max_ids_per_read().max(1);
    let block: usize = question_tokens.iter().sum();
    let whole_block = req.layout == Layout::Cost || matches!(req.history, History::Shared(_));
    let shared_history = match &req.history {
        History::Shared(h) => counter.count(h),
        _ => 0,
    };
    let base = req.model.preamble_tokens() + state_tokens + FRAMING_TOKENS;
    let mut total = 0usize;
    for (qi, q) in req.questions.iter().enumerate() {
        let n = q.options.len();
        if n < 2 {
            continue;
        }
        let history = match &req.history {
            History::PerQuestion(per) => per[qi].as_deref().map_or(0, |h| counter.count(h)),
            _ => shared_history,
        };
        let lead = if whole_block {
            block
        } else {
            question_tokens[qi]
        };
        let reads = req.rendered[qi].shifts.len() * n.div_ceil(per_read_ids);
        let one = base + lead + question_tokens[qi] + history;
        total = total.saturating_add(reads.saturating_mul(one));
    }
    if total > limits.max_request_tokens {
        return Err(ApiError::at(
            Code::RequestTooLarge,
            vec![],
            format!(
                "the request needs {}{total} upstream prompt tokens, more than the limit of {}",
                if counter.is_exact() { "" } else { "about " },
                limits.max_request_tokens
            ),
        ));
    }
    Ok(())
}
