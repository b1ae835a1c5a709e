//! `questions`: the map of question id → question, and each question's own fields (`type`,
//! `instructions`, nothing else). What a type's `criteria` must hold is in [`super::criteria`].

use serde_json::{Map, Value};

use super::{criteria, loc, refuse, refuse_field_type, refuse_type, tokens, Entry};
use crate::config::{Layout, Limits};
use crate::error::{ApiError, Code};
use crate::models::Resolved;
use crate::question::LoweredQuestion;

/// One question that passed its rules.
pub(super) struct CheckedQuestion {
    /// The question lowered to numbered options.
    lowered: LoweredQuestion,
    /// Tokens of its question as the layout writes it, counted once for the request limit.
    tokens: usize,
    /// Its question object in the caller's option order, as the prompt will send it.
    first_order: String,
}

/// The checked questions as the three aligned lists the request is assembled from.
pub(super) fn unzip(
    checked: Vec<CheckedQuestion>,
) -> (Vec<LoweredQuestion>, Vec<usize>, Vec<String>) {
    let mut questions = Vec::with_capacity(checked.len());
    let mut tokens = Vec::with_capacity(checked.len());
    let mut first_orders = Vec::with_capacity(checked.len());
    for q in checked {
        questions.push(q.lowered);
        tokens.push(q.tokens);
        first_orders.push(q.first_order);
    }
    (questions, tokens, first_orders)
}

/// `questions`: required, an object of 1 to `max_questions` questions. They are then
/// checked one by one in the caller's order, so the first bad question is the one named.
pub(super) fn validate_questions(
    questions: Option<Value>,
    model: &Resolved,
    limits: &Limits,
    layout: Layout,
) -> Result<Vec<CheckedQuestion>, ApiError> {
    let questions = questions_object(questions)?;
    check_question_count(questions.len(), limits)?;
    questions
        .into_iter()
        .map(|(id, q)| validate_question(id, q, model, limits, layout))
        .collect()
}

/// Questions are keyed by id, so only an object will do; a missing map gets its own message
/// saying what is expected.
fn questions_object(questions: Option<Value>) -> Result<Map<String, Value>, ApiError> {
    match questions {
        Some(Value::Object(map)) => Ok(map),
        None => refuse(
            Code::InvalidQuestions,
            loc(&["questions"]),
            "questions is required: an object of question id -> question",
        ),
        Some(other) => refuse_field_type(
            Code::InvalidQuestions,
            "questions",
            "an object of question id -> question",
            &other,
        ),
    }
}

/// A request asks at least one question and at most `limits.max_questions`.
fn check_question_count(n: usize, limits: &Limits) -> Result<(), ApiError> {
    if n == 0 {
        return refuse(
            Code::NoQuestions,
            loc(&["questions"]),
            "questions must hold at least 1 question, got 0",
        );
    }
    if n > limits.max_questions {
        return refuse(
            Code::TooManyQuestions,
            loc(&["questions"]),
            format!(
                "{n} questions is more than the limit of {}",
                limits.max_questions
            ),
        );
    }
    Ok(())
}

/// One question, in this order: its id, that it is an object, no unknown field, its type,
/// its instructions, its type's criteria, then its token count.
fn validate_question(
    id: String,
    question: Value,
    model: &Resolved,
    limits: &Limits,
    layout: Layout,
) -> Result<CheckedQuestion, ApiError> {
    if id.is_empty() {
        return refuse(
            Code::InvalidQuestionId,
            loc(&["questions", ""]),
            "question ids must be non-empty strings",
        );
    }
    let at = Entry {
        map: "questions",
        key: &id,
    };
    let mut q = question_object(question, at)?;
    let kind = question_type(&q, at)?;
    let instructions = instructions(q.remove("instructions"), at)?;
    let lowered = criteria::lower(
        &kind,
        id.clone(),
        instructions,
        q.remove("criteria"),
        model,
        limits,
        at,
    )?;
    let (tokens, first_order) = tokens::question_tokens(&lowered, model, limits, layout, at)?;
    Ok(CheckedQuestion {
        lowered,
        tokens,
        first_order,
    })
}

/// A question is an object of `type`, `instructions` and `criteria` only: a misspelt or
/// extra field is refused rather than silently ignored. It is named by its position, at
/// the question: the name is the caller's own key, which a message never repeats.
fn question_object(question: Value, at: Entry) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(q) = question else {
        return refuse_type(
            Code::InvalidQuestion,
            at.whole(),
            "a question must be an object",
            &question,
        );
    };
    if let Some(index) = q
        .keys()
        .position(|k| !matches!(k.as_str(), "type" | "instructions" | "criteria"))
    {
        return refuse(
            Code::UnknownField,
            at.whole(),
            format!(
                "field #{index} is unknown; a question has only type, instructions and criteria"
            ),
        );
    }
    Ok(q)
}

/// `type` is required and a string; whether it names a served type is decided with the
/// criteria, after the instructions are checked.
fn question_type(q: &Map<String, Value>, at: Entry) -> Result<String, ApiError> {
    match q.get("type") {
        Some(Value::String(t)) => Ok(t.clone()),
        Some(other) => refuse_type(
            Code::InvalidQuestion,
            at.field("type"),
            "type must be a string",
            other,
        ),
        None => refuse(
            Code::InvalidQuestion,
            at.field("type"),
            "type is required: \"choice\", \"noul\" or \"score\"",
        ),
    }
}

/// `instructions` go into the prompt as JSON, so any text-bearing value (string, object,
/// array) or nothing (absent, null) will do; a bare number or boolean says nothing to ask.
fn instructions(instructions: Option<Value>, at: Entry) -> Result<Value, ApiError> {
    let instructions = instructions.unwrap_or(Value::Null);
    if matches!(instructions, Value::Bool(_) | Value::Number(_)) {
        return refuse_type(
            Code::InvalidInstructions,
            at.field("instructions"),
            "instructions must be a string, object, array or null",
            &instructions,
        );
    }
    Ok(instructions)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::test_support::*;
    use crate::error::Code;

    #[test]
    #[rustfmt::skip]
    fn questions_map() {
        let shape = |got: &str| {
            format!("questions must be an object of question id -> question, got {got}")
        };
        run(vec![
            reject("missing questions", without("questions"), Code::InvalidQuestions, &["questions"], "questions is required: an object of question id -> question"),
            reject("questions is an array", top("questions", json!([choice()])), Code::InvalidQuestions, &["questions"], shape("an array")),
            reject("questions is a string", top("questions", json!("q1")), Code::InvalidQuestions, &["questions"], shape("a string")),
            reject("questions is null", top("questions", Value::Null), Code::InvalidQuestions, &["questions"], shape("null")),
            reject("no questions", top("questions", json!({})), Code::NoQuestions, &["questions"], "questions must hold at least 1 question, got 0"),
            reject("65 questions", n_questions(65), Code::TooManyQuestions, &["questions"], "65 questions is more than the limit of 64"),
            reject("questions over max_questions", n_questions(3), Code::TooManyQuestions, &["questions"], "3 questions is more than the limit of 2").limits(|l| l.max_questions = 2),
            reject("the count before any question", json!({"state": STATE, "questions": {"a": 1, "b": 2, "c": 3}}), Code::TooManyQuestions, &["questions"], "3 questions is more than the limit of 2").limits(|l| l.max_questions = 2),
            accept("64 questions", n_questions(64)).holds(|r| r.questions().len() == 64),
            accept("questions at max_questions", n_questions(2)).limits(|l| l.max_questions = 2),
            accept("questions keep the caller's order", json!({"state": STATE, "questions": {"zeta": score(), "alpha": choice(), "mid": noul()}})).holds(|r| r.questions().iter().map(|q| q.id.as_str()).eq(["zeta", "alpha", "mid"])),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn question() {
        let types = "type must be \"choice\", \"noul\" or \"score\"";
        let unknown = |i: usize| format!("field #{i} is unknown; a question has only type, instructions and criteria");
        let instr =
            |got: &str| format!("instructions must be a string, object, array or null, got {got}");
        let second_bad =
            json!({"state": STATE, "questions": {"q1": choice(), "q2": {"type": "box"}}});
        run(vec![
            reject("empty question id", top("questions", json!({"": noul()})), Code::InvalidQuestionId, &["questions", ""], "question ids must be non-empty strings"),
            reject("the id before the question", top("questions", json!({"": 1})), Code::InvalidQuestionId, &["questions", ""], "question ids must be non-empty strings"),
            reject("question is a string", q1(json!("noul")), Code::InvalidQuestion, &["questions", "q1"], "a question must be an object, got a string"),
            reject("question is null", q1(Value::Null), Code::InvalidQuestion, &["questions", "q1"], "a question must be an object, got null"),
            reject("question is an array", q1(json!([noul()])), Code::InvalidQuestion, &["questions", "q1"], "a question must be an object, got an array"),
            reject("question without type", q1_with(noul(), "type", None), Code::InvalidQuestion, &["questions", "q1", "type"], "type is required: \"choice\", \"noul\" or \"score\""),
            reject("type is a number", q1_with(noul(), "type", Some(json!(1))), Code::InvalidQuestion, &["questions", "q1", "type"], "type must be a string, got a number"),
            reject("type box", q1_with(noul(), "type", Some(json!("box"))), Code::UnsupportedQuestionType, &["questions", "q1", "type"], types),
            reject("type upper-case", q1_with(choice(), "type", Some(json!("CHOICE"))), Code::UnsupportedQuestionType, &["questions", "q1", "type"], types),
            reject("type empty", q1_with(noul(), "type", Some(json!(""))), Code::UnsupportedQuestionType, &["questions", "q1", "type"], types),
            reject("unknown field in a question", q1_with(choice(), "options", Some(json!(["a"]))), Code::UnknownField, &["questions", "q1"], unknown(3)),
            reject("an unknown field before a missing type", q1(json!({"label": "x"})), Code::UnknownField, &["questions", "q1"], unknown(0)),
            reject("second question bad, first valid", second_bad, Code::UnsupportedQuestionType, &["questions", "q2", "type"], types),
            reject("instructions is a number", q1_with(noul(), "instructions", Some(json!(3))), Code::InvalidInstructions, &["questions", "q1", "instructions"], instr("a number")),
            reject("instructions is a boolean", q1_with(choice(), "instructions", Some(json!(false))), Code::InvalidInstructions, &["questions", "q1", "instructions"], instr("a boolean")),
            reject("a bad type before bad instructions", q1(json!({"type": 1, "instructions": 3})), Code::InvalidQuestion, &["questions", "q1", "type"], "type must be a string, got a number"),
            reject("bad instructions before an unknown type", q1(json!({"type": "box", "instructions": 3})), Code::InvalidInstructions, &["questions", "q1", "instructions"], instr("a number")),
            reject("an unknown type before its criteria", q1(json!({"type": "box", "criteria": 3})), Code::UnsupportedQuestionType, &["questions", "q1", "type"], types),
            accept("instructions object", q1_with(choice(), "instructions", Some(json!({"task": "route"})))).holds(|r| r.questions()[0].instructions == json!({"task": "route"})),
            accept("instructions array", q1_with(choice(), "instructions", Some(json!(["route", "it"])))),
            accept("instructions null on a choice", q1_with(choice(), "instructions", Some(Value::Null))).holds(|r| r.questions()[0].instructions.is_null()),
            accept("instructions absent on a choice", q1_with(choice(), "instructions", None)).holds(|r| r.questions()[0].instructions.is_null()),
        ]);
    }
}
