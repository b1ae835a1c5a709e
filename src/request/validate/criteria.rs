//! `criteria`, by question type: a choice's labels and descriptions, a noul's two
//! descriptions, a score's levels; the option count each type allows; and the lowering of
//! the question into numbered options once its criteria pass. Every error here points at
//! `questions.<id>.criteria`, except a noul that asks nothing (at the question).

use serde_json::{Map, Value};

use super::{refuse, refuse_type, Entry, MAX_LABEL_CHARS};
use crate::config::Limits;
use crate::error::{ApiError, Code};
use crate::models::Resolved;
use crate::question::{lower_choice, lower_noul, lower_score, LoweredQuestion};

/// Checks `criteria` by the question's `kind` and lowers the question. An unknown type is
/// refused here, after `instructions` was checked.
pub(super) fn lower(
    kind: &str,
    id: String,
    instructions: Value,
    criteria: Option<Value>,
    model: &Resolved,
    limits: &Limits,
    at: Entry,
) -> Result<LoweredQuestion, ApiError> {
    match kind {
        "choice" => {
            let options = choice_options(criteria, model, limits, at)?;
            Ok(lower_choice(id, instructions, options))
        }
        "noul" => {
            let (if_false, if_true) = noul_descriptions(criteria, at)?;
            if is_nothing(&instructions) && is_nothing(&if_false) && is_nothing(&if_true) {
                return refuse(
                    Code::NothingToAsk,
                    at.whole(),
                    "a noul needs instructions or a description in criteria; both are empty",
                );
            }
            Ok(lower_noul(id, instructions, if_false, if_true))
        }
        "score" => {
            let levels = score_levels(criteria, model, limits, at)?;
            Ok(lower_score(id, instructions, levels))
        }
        _ => refuse(
            Code::UnsupportedQuestionType,
            at.field("type"),
            "type must be \"choice\", \"noul\" or \"score\"",
        ),
    }
}

/// The criteria that hold a counted list of options: a choice's object label → description
/// (the key order is the option order) and a score's array of levels, lowest first.
trait Counted: Sized {
    /// The question type these are the criteria of.
    const KIND: &'static str;
    /// How the messages say what the criteria must be.
    const SHAPE: &'static str;
    /// The criteria, or the value back when it is of another JSON type.
    fn take(criteria: Value) -> Result<Self, Value>;
    /// How many options they hold.
    fn count(&self) -> usize;
    /// The type's own limit on that count, and the code for going over it.
    fn limit(limits: &Limits) -> (usize, Code);
    /// What the messages call one of them, plural (`options`, `levels`).
    const NOUN: &'static str;
    /// The flag that sets the limit, named in the message so an operator knows what to raise.
    const FLAG: &'static str;
}

/// Implements [`Counted`] for the criteria held in `Value::$variant`, bounded by
/// `Limits::$limit` (over it: `Code::$over`).
macro_rules! counted {
    ($ty:ty, $variant:ident, $kind:literal, $shape:literal, $noun:literal, $limit:ident, $flag:literal, $over:ident) => {
        impl Counted for $ty {
            const KIND: &'static str = $kind;
            const SHAPE: &'static str = $shape;
            const NOUN: &'static str = $noun;
            const FLAG: &'static str = $flag;
            fn take(criteria: Value) -> Result<Self, Value> {
                match criteria {
                    Value::$variant(criteria) => Ok(criteria),
                    other => Err(other),
                }
            }
            fn count(&self) -> usize {
                self.len()
            }
            fn limit(limits: &Limits) -> (usize, Code) {
                (limits.$limit, Code::$over)
            }
        }
    };
}

counted!(
    Map<String, Value>,
    Object,
    "choice",
    "an object label -> description",
    "options",
    max_options,
    "--max-options",
    TooManyOptions
);
counted!(
    Vec<Value>,
    Array,
    "score",
    "an array of levels, lowest first",
    "levels",
    max_levels,
    "--max-levels",
    TooManyLevels
);

/// What a choice's and a score's criteria share, in this order: they are required, of the
/// type's JSON shape, and hold an allowed number of options (before any option is looked
/// at). Returns them with their location, for the checks of each option.
fn counted<C: Counted>(
    criteria: Option<Value>,
    model: &Resolved,
    limits: &Limits,
    at: Entry,
) -> Result<(C, Vec<String>), ApiError> {
    let at = at.field("criteria");
    let criteria = match criteria.map(C::take) {
        Some(Ok(criteria)) => criteria,
        Some(Err(other)) => {
            let must = format!("a {}'s criteria must be {}", C::KIND, C::SHAPE);
            return refuse_type(Code::InvalidCriteria, at, &must, &other);
        }
        None => {
            let msg = format!("a {} needs criteria: {}", C::KIND, C::SHAPE);
            return refuse(Code::InvalidCriteria, at, msg);
        }
    };
    let (limit, over_limit) = C::limit(limits);
    let over = OverLimit {
        limit,
        code: over_limit,
        noun: C::NOUN,
        flag: C::FLAG,
    };
    check_option_count(criteria.count(), &over, model, &at)?;
    Ok((criteria, at))
}

/// A choice's options in the caller's key order, each checked in order, its label before
/// its description.
fn choice_options(
    criteria: Option<Value>,
    model: &Resolved,
    limits: &Limits,
    at: Entry,
) -> Result<Vec<(String, Value)>, ApiError> {
    let (map, at): (Map<String, Value>, _) = counted(criteria, model, limits, at)?;
    let mut options = Vec::with_capacity(map.len());
    for (index, (label, description)) in map.into_iter().enumerate() {
        check_label(&label, index, &at)?;
        check_description(&description, &at, index)?;
        options.push((label, description));
    }
    Ok(options)
}

/// A noul's criteria: absent or null (instructions alone), or an object with only the keys
/// `"true"` and `"false"`, each a description (option #0 is false, #1 true). Returns the
/// `(false, true)` descriptions, null where not given.
fn noul_descriptions(criteria: Option<Value>, at: Entry) -> Result<(Value, Value), ApiError> {
    let mut map: Map<String, Value> = match criteria {
        None | Some(Value::Null) => return Ok((Value::Null, Value::Null)),
        Some(Value::Object(map)) => map,
        Some(other) => {
            let must = "a noul's criteria must be an object with \"true\" and/or \"false\"";
            return refuse_type(Code::InvalidCriteria, at.field("criteria"), must, &other);
        }
    };
    let at = at.field("criteria");
    // Named by position: any other key is the caller's own text.
    if let Some(index) = map.keys().position(|k| k != "true" && k != "false") {
        return refuse(
            Code::InvalidCriteria,
            at,
            format!("a noul's criteria may only have the keys \"true\" and \"false\"; key #{index} is another"),
        );
    }
    let f = map.remove("false").unwrap_or(Value::Null);
    let t = map.remove("true").unwrap_or(Value::Null);
    check_description(&f, &at, 0)?;
    check_description(&t, &at, 1)?;
    Ok((f, t))
}

/// A score's levels, lowest first: each is text-bearing (string, object or array), never a
/// bare null, boolean or number; the first that is not is named.
fn score_levels(
    criteria: Option<Value>,
    model: &Resolved,
    limits: &Limits,
    at: Entry,
) -> Result<Vec<Value>, ApiError> {
    let (levels, at): (Vec<Value>, _) = counted(criteria, model, limits, at)?;
    for (index, level) in levels.iter().enumerate() {
        if matches!(level, Value::Null | Value::Bool(_) | Value::Number(_)) {
            return refuse_type(
                Code::InvalidCriteria,
                at,
                &format!("level {index} must be a string, object or array"),
                level,
            );
        }
    }
    Ok(levels)
}

/// Null, or a blank string: says nothing.
fn is_nothing(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        _ => false,
    }
}

/// A question type's own bound on its options: the limit, the code for going over it, and
/// how the message names them (`11 levels is more than the limit of 10 (--max-levels)`).
struct OverLimit {
    limit: usize,
    code: Code,
    noun: &'static str,
    flag: &'static str,
}

/// At least one option; at most the type's own limit (refused with its code); and at most
/// the labels the model can ask with (always [`Code::TooManyOptions`], whatever the type).
fn check_option_count(
    n: usize,
    over: &OverLimit,
    model: &Resolved,
    at: &[String],
) -> Result<(), ApiError> {
    if n == 0 {
        return refuse(
            Code::InvalidCriteria,
            at.to_vec(),
            "criteria must hold at least 1 option, got 0",
        );
    }
    if n > over.limit {
        let OverLimit {
            limit, noun, flag, ..
        } = over;
        return refuse(
            over.code,
            at.to_vec(),
            format!("{n} {noun} is more than the limit of {limit} ({flag})"),
        );
    }
    let capacity = model.table.option_capacity();
    if n > capacity {
        return refuse(Code::TooManyOptions, at.to_vec(), over_capacity(n, model));
    }
    Ok(())
}

/// Why `n` options cannot be labelled on `model`: how many single-token labels its
/// tokenizer gives, and how many multi-token ones its table holds (none: its table was
/// built without them, or its tokenizer's numerals are not one token per digit).
fn over_capacity(n: usize, model: &Resolved) -> String {
    let single = model.table.capacity();
    if model.table.name == crate::models::tokens::NATIVE_TABLE {
        return format!(
            "{n} options is more than the {single} options model {} takes (the limit of its native upstream)",
            model.name
        );
    }
    match model.table.widest_scheme() {
        Some(widest) if widest.capacity() > single => format!(
            "{n} options is more than the {capacity} option labels model {} has ({single} single-token, {capacity} multi-token {kind})",
            model.name,
            capacity = widest.capacity(),
            kind = widest.scheme.as_str(),
        ),
        _ => format!(
            "{n} options is more than the {single} single-token option labels model {} has",
            model.name
        ),
    }
}

/// A label is written on one line of the prompt and echoed in the answer: it must say
/// something, fit [`MAX_LABEL_CHARS`] characters (not bytes) and hold no line break or
/// control character that could end its line early. Checked in that order.
fn check_label(label: &str, index: usize, at: &[String]) -> Result<(), ApiError> {
    let problem = if label.trim().is_empty() {
        "is blank".to_string()
    } else if label.chars().count() > MAX_LABEL_CHARS {
        format!(
            "has {} characters, more than the limit of {MAX_LABEL_CHARS}",
            label.chars().count()
        )
    } else if label
        .chars()
        .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
    {
        "contains a line break or control character".to_string()
    } else {
        return Ok(());
    };
    refuse(
        Code::InvalidLabel,
        at.to_vec(),
        format!("label #{index} {problem}"),
    )
}

/// A description goes into the prompt as JSON: any text-bearing value or null, never a bare
/// number or boolean. `index` is the option's position, as the message names it.
fn check_description(description: &Value, at: &[String], index: usize) -> Result<(), ApiError> {
    if matches!(description, Value::Bool(_) | Value::Number(_)) {
        return refuse_type(
            Code::InvalidDescription,
            at.to_vec(),
            &format!("the description of option #{index} must be a string, object, array or null"),
            description,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map, Value};

    use super::super::test_support::*;
    use crate::error::Code;
    use crate::request::ValidRequest;

    const AT: &[&str] = &["questions", "q1", "criteria"];

    /// A choice on `q1` with these criteria.
    fn choice_criteria(criteria: Value) -> Value {
        q1_with(choice(), "criteria", Some(criteria))
    }

    /// A choice on `q1` with `n` options labelled `o0`, `o1`, …
    fn choice_n(n: usize) -> Value {
        let criteria: Map<String, Value> = (0..n).map(|i| (format!("o{i}"), Value::Null)).collect();
        choice_criteria(Value::Object(criteria))
    }

    /// A choice on `q1` with the labels `["ok", label]`.
    fn label(label: &str) -> Value {
        let mut criteria = Map::new();
        criteria.insert("ok".into(), json!("fine"));
        criteria.insert(label.into(), json!("the label under test"));
        choice_criteria(Value::Object(criteria))
    }

    /// A score on `q1` with these levels.
    fn levels(levels: Value) -> Value {
        q1_with(score(), "criteria", Some(levels))
    }

    /// A score on `q1` with `n` string levels.
    fn score_n(n: usize) -> Value {
        levels(Value::Array(
            (0..n).map(|i| json!(format!("level {i}"))).collect(),
        ))
    }

    /// `body` asked of the [`VISION`] model (gemma-3: 10 single-token labels, then numerals).
    fn on_vision(mut body: Value) -> Value {
        body["model"] = json!(VISION);
        body
    }

    /// The labels of the first question, in order.
    fn labels(r: &ValidRequest) -> Vec<&str> {
        r.questions()[0]
            .options
            .iter()
            .map(|o| o.label.as_str())
            .collect()
    }

    #[test]
    #[rustfmt::skip]
    fn choice_criteria_labels_descriptions_and_option_count() {
        let shape = |got: &str| {
            format!("a choice's criteria must be an object label -> description, got {got}")
        };
        let over_labels = |n: usize, cap: usize, model: &str| {
            format!(
                "{n} options is more than the {cap} single-token option labels model {model} has"
            )
        };
        let broken = "label #1 contains a line break or control character";
        let desc = |i: usize, got: &str| {
            format!(
                "the description of option #{i} must be a string, object, array or null, got {got}"
            )
        };
        run(vec![
            reject("choice without criteria", q1_with(choice(), "criteria", None), Code::InvalidCriteria, AT, "a choice needs criteria: an object label -> description"),
            reject("choice criteria is an array", choice_criteria(json!(["a", "b"])), Code::InvalidCriteria, AT, shape("an array")),
            reject("choice criteria is a string", choice_criteria(json!("a")), Code::InvalidCriteria, AT, shape("a string")),
            reject("choice criteria is null", choice_criteria(Value::Null), Code::InvalidCriteria, AT, shape("null")),
            reject("choice with 0 options", choice_n(0), Code::InvalidCriteria, AT, "criteria must hold at least 1 option, got 0"),
            reject("choice with 256 options", choice_n(256), Code::TooManyOptions, AT, "256 options is more than the limit of 255 (--max-options)"),
            reject("choice with 255 options (191 labels)", choice_n(255), Code::TooManyOptions, AT, over_labels(255, 191, TEXT)),
            reject("choice with 192 options (191 labels)", choice_n(192), Code::TooManyOptions, AT, over_labels(192, 191, TEXT)),
            reject("choice over max_options", choice_n(4), Code::TooManyOptions, AT, "4 options is more than the limit of 3 (--max-options)").limits(|l| l.max_options = 3),
            reject("256 options on the 10 + 255 numeral labels of gemma-3", on_vision(choice_n(256)), Code::TooManyOptions, AT, format!("256 options is more than the 255 option labels model {VISION} has (10 single-token, 255 multi-token numerals)")).limits(|l| l.max_options = 300),
            accept("11 options on gemma-3: numerals 00-10", on_vision(choice_n(11))).holds(|r| r.rendered()[0].reads.nodes.len() == 3),
            // ~29k estimated tokens: over the default question limit on the estimate alone
            // (the engine then counts it exactly); see tokens.rs.
            accept("255 options on gemma-3: numerals 000-254", on_vision(choice_n(255))).holds(|r| r.rendered()[0].reads.nodes.len() == 30).limits(|l| l.max_question_tokens = 100_000),
            accept("10 options on gemma-3: one single-token read", on_vision(choice_n(10))).holds(|r| r.rendered()[0].reads.nodes.len() == 1),
            reject("empty label", label(""), Code::InvalidLabel, AT, "label #1 is blank"),
            reject("blank label", label("   "), Code::InvalidLabel, AT, "label #1 is blank"),
            reject("label of 129 characters", label(&"l".repeat(129)), Code::InvalidLabel, AT, "label #1 has 129 characters, more than the limit of 128"),
            reject("label of 129 blanks is blank", label(&" ".repeat(129)), Code::InvalidLabel, AT, "label #1 is blank"),
            reject("label too long before its control character", label(&format!("\n{}", "l".repeat(128))), Code::InvalidLabel, AT, "label #1 has 129 characters, more than the limit of 128"),
            reject("label with a newline", label("two\nlines"), Code::InvalidLabel, AT, broken),
            reject("label with a carriage return", label("a\rb"), Code::InvalidLabel, AT, broken),
            reject("label with a tab", label("a\tb"), Code::InvalidLabel, AT, broken),
            reject("label with a C0 control", label("a\u{1}b"), Code::InvalidLabel, AT, broken),
            reject("label with DEL", label("a\u{7f}b"), Code::InvalidLabel, AT, broken),
            reject("label with NEL (C1 control)", label("a\u{85}b"), Code::InvalidLabel, AT, broken),
            reject("label with U+2028", label("a\u{2028}b"), Code::InvalidLabel, AT, broken),
            reject("label with U+2029", label("a\u{2029}b"), Code::InvalidLabel, AT, broken),
            reject("description is a number", choice_criteria(json!({"a": "x", "b": 2})), Code::InvalidDescription, AT, desc(1, "a number")),
            reject("description is a boolean", choice_criteria(json!({"a": true, "b": "y"})), Code::InvalidDescription, AT, desc(0, "a boolean")),
            reject("an option's label before its description", choice_criteria(json!({"": 1, "b": "y"})), Code::InvalidLabel, AT, "label #0 is blank"),
            reject("option #0's description before option #1's label", choice_criteria(json!({"a": 1, "": "y"})), Code::InvalidDescription, AT, desc(0, "a number")),
            reject("the count before any label", choice_criteria(json!({"": 1, " ": 2})), Code::TooManyOptions, AT, "2 options is more than the limit of 1 (--max-options)").limits(|l| l.max_options = 1),
            accept("191 options (the model's capacity)", choice_n(191)).holds(|r| r.questions()[0].options.len() == 191),
            accept("1-option choice", choice_n(1)).holds(|r| labels(r) == ["o0"]),
            accept("10 options on a 10-label model", on_vision(choice_n(10))).holds(|r| r.questions()[0].options.len() == 10),
            accept("label of 128 characters", label(&"l".repeat(128))),
            accept("label of 128 two-byte characters", label(&"é".repeat(128))),
            accept("label with inner spaces and unicode", label("Billing & Rückerstattung ✓")).holds(|r| labels(r) == ["ok", "Billing & Rückerstattung ✓"]),
            accept("labels keep the caller's order", base()).holds(|r| labels(r) == ["billing", "bug", "other"]),
            accept("descriptions object, array, null", choice_criteria(json!({"a": {"k": 1}, "b": [1, 2], "c": null}))).holds(|r| r.questions()[0].options[1].description == json!([1, 2])),
            accept("options at max_options", choice_n(3)).limits(|l| l.max_options = 3),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn noul_descriptions_and_something_to_ask() {
        let nothing = "a noul needs instructions or a description in criteria; both are empty";
        let shape = |got: &str| {
            format!("a noul's criteria must be an object with \"true\" and/or \"false\", got {got}")
        };
        let desc = |i: usize, got: &str| {
            format!(
                "the description of option #{i} must be a string, object, array or null, got {got}"
            )
        };
        let keys = "a noul's criteria may only have the keys \"true\" and \"false\"; key #1 is another";
        run(vec![
            reject("noul with nothing to ask", q1(json!({"type": "noul"})), Code::NothingToAsk, &["questions", "q1"], nothing),
            reject("noul with blank instructions and empty descriptions", q1(json!({"type": "noul", "instructions": "  ", "criteria": {"true": "", "false": null}})), Code::NothingToAsk, &["questions", "q1"], nothing),
            reject("noul with null instructions and null criteria", q1(json!({"type": "noul", "instructions": null, "criteria": null})), Code::NothingToAsk, &["questions", "q1"], nothing),
            reject("noul criteria with another key", q1_with(noul(), "criteria", Some(json!({"true": "yes", "maybe": "?"}))), Code::InvalidCriteria, AT, keys),
            reject("noul criteria is a string", q1_with(noul(), "criteria", Some(json!("yes"))), Code::InvalidCriteria, AT, shape("a string")),
            reject("noul criteria is an array", q1_with(noul(), "criteria", Some(json!(["no", "yes"]))), Code::InvalidCriteria, AT, shape("an array")),
            reject("noul description is a number", q1_with(noul(), "criteria", Some(json!({"true": 1}))), Code::InvalidDescription, AT, desc(1, "a number")),
            reject("noul description is a boolean", q1_with(noul(), "criteria", Some(json!({"false": false}))), Code::InvalidDescription, AT, desc(0, "a boolean")),
            reject("false described before true", q1_with(noul(), "criteria", Some(json!({"true": 1, "false": 2}))), Code::InvalidDescription, AT, desc(0, "a number")),
            reject("the keys before the descriptions", q1_with(noul(), "criteria", Some(json!({"true": 1, "maybe": "?"}))), Code::InvalidCriteria, AT, keys),
            reject("a bad description before nothing to ask", q1(json!({"type": "noul", "criteria": {"true": 1}})), Code::InvalidDescription, AT, desc(1, "a number")),
            accept("valid noul", q1(noul())).holds(|r| labels(r) == ["no", "yes"]),
            accept("noul with only a true description", q1(json!({"type": "noul", "criteria": {"true": "wants a refund"}}))).holds(|r| r.questions()[0].options[1].description == json!("wants a refund")),
            accept("noul with only a false description", q1(json!({"type": "noul", "criteria": {"false": "no refund"}}))).holds(|r| r.questions()[0].options[0].description == json!("no refund")),
            accept("noul with null criteria", q1_with(noul(), "criteria", Some(Value::Null))),
            accept("noul with an object description only", q1(json!({"type": "noul", "criteria": {"true": {"k": 1}}}))),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn score_levels() {
        let shape = "a score's criteria must be an array of levels, lowest first, got an object";
        let level =
            |i: usize, got: &str| format!("level {i} must be a string, object or array, got {got}");
        run(vec![
            reject("score without criteria", q1_with(score(), "criteria", None), Code::InvalidCriteria, AT, "a score needs criteria: an array of levels, lowest first"),
            reject("score criteria is an object", levels(json!({"0": "low"})), Code::InvalidCriteria, AT, shape),
            reject("score criteria is null", levels(Value::Null), Code::InvalidCriteria, AT, "a score's criteria must be an array of levels, lowest first, got null"),
            reject("score with 0 levels", levels(json!([])), Code::InvalidCriteria, AT, "criteria must hold at least 1 option, got 0"),
            reject("score with 11 levels", score_n(11), Code::TooManyLevels, AT, "11 levels is more than the limit of 10 (--max-levels)"),
            reject("score over max_levels", score_n(4), Code::TooManyLevels, AT, "4 levels is more than the limit of 3 (--max-levels)").limits(|l| l.max_levels = 3),
            accept("levels over the single-token labels take numerals", on_vision(score_n(11))).holds(|r| r.rendered()[0].reads.nodes.len() == 3).limits(|l| l.max_levels = 20),
            reject("score with a null level", levels(json!(["low", null, "high"])), Code::InvalidCriteria, AT, level(1, "null")),
            reject("score with a numeric level", levels(json!(["low", 1, "high"])), Code::InvalidCriteria, AT, level(1, "a number")),
            reject("score with a boolean level", levels(json!([true, "high"])), Code::InvalidCriteria, AT, level(0, "a boolean")),
            reject("the first bad level", levels(json!(["low", 1, null])), Code::InvalidCriteria, AT, level(1, "a number")),
            reject("the count before the levels", levels(json!([1, 2, 3, 4])), Code::TooManyLevels, AT, "4 levels is more than the limit of 3 (--max-levels)").limits(|l| l.max_levels = 3),
            accept("valid score", q1(score())).holds(|r| labels(r) == ["level_0", "level_1", "level_2"]),
            accept("score with 10 levels", score_n(10)).holds(|r| r.questions()[0].options.len() == 10),
            accept("score with 10 levels on a 10-label model", on_vision(score_n(10))),
            accept("score with 1 level", score_n(1)).holds(|r| labels(r) == ["level_0"]),
            accept("score levels of every allowed type", levels(json!(["low", {"mid": 1}, ["high"]]))).holds(|r| r.questions()[0].options[2].description == json!(["high"])),
            accept("levels at max_levels", score_n(3)).limits(|l| l.max_levels = 3),
        ]);
    }
}
