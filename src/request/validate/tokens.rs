//! The token limits: one question (checked as each question passes), the state and the
//! whole request (checked last, once everything they count is known). The request limit
//! counts each piece once and multiplies: no whole prompt is rendered for it.

use super::{loc, prompt, refuse, Entry};
use crate::config::{Layout, Limits};
use crate::error::{ApiError, Code};
use crate::models::tokens::TokenCounter;
use crate::models::Resolved;
use crate::question::LoweredQuestion;
use crate::request::{History, ValidRequest};

/// Tokens each upstream request adds around its parts (`{"state": `, newlines, the chat
/// template's turn markers and the `answer=` prefill): a generous allowance.
const FRAMING_TOKENS: usize = 32;

/// `"about "` when `counter` estimates, nothing when it counts with the real tokenizer.
fn about(counter: &TokenCounter) -> &'static str {
    if counter.is_exact() {
        ""
    } else {
        "about "
    }
}

/// What an estimated count adds to its message, so the caller knows why a short text may
/// count high and what makes it exact.
const ESTIMATE_NOTE: &str = "; estimated at one token per UTF-8 byte (an upper bound), \
     since the model has no tokenizer configured (--tokenizer counts exactly)";

/// A token limit: its value, the flag that sets it and the code for going over it.
struct TokenLimit {
    limit: usize,
    flag: &'static str,
    code: Code,
}

/// `count` within the limit, or its code at `at`: `what` says what was counted and how
/// much (`the state is about 7 tokens`), and the message adds the limit, its flag, and,
/// for an estimate, how it was estimated.
fn within(
    count: usize,
    bound: TokenLimit,
    counter: &TokenCounter,
    at: Vec<String>,
    what: impl FnOnce() -> String,
) -> Result<(), ApiError> {
    if count <= bound.limit {
        return Ok(());
    }
    let note = if counter.is_exact() {
        ""
    } else {
        ESTIMATE_NOTE
    };
    refuse(
        bound.code,
        at,
        format!(
            "{}, more than the limit of {} ({}){note}",
            what(),
            bound.limit,
            bound.flag
        ),
    )
}

/// `max_question_tokens`: the question object in the caller's option order, rendered here
/// once (the prompt reuses it) and counted. A number no `f64` holds in the instructions or
/// a description is refused while rendering. Returns the count and the rendering.
pub(super) fn question_tokens(
    lowered: &LoweredQuestion,
    model: &Resolved,
    limits: &Limits,
    at: Entry,
) -> Result<(usize, String), ApiError> {
    let rendered = prompt::question_json(lowered, 0, &model.table)
        .map_err(|e| ApiError::at(Code::InvalidNumber, at.whole(), e.to_string()))?;
    let counter = &model.counter;
    let tokens = counter.count(&rendered);
    let bound = TokenLimit {
        limit: limits.max_question_tokens,
        flag: "--max-question-tokens",
        code: Code::QuestionTooLarge,
    };
    within(tokens, bound, counter, at.whole(), || {
        format!("the question is {}{tokens} tokens", about(counter))
    })?;
    Ok((tokens, rendered))
}

/// The state and whole-request token limits, in that order (the per-question one is
/// checked with each question); `question_tokens` is aligned with the questions.
pub(super) fn check_token_limits(
    req: &ValidRequest,
    question_tokens: &[usize],
    limits: &Limits,
) -> Result<(), ApiError> {
    let counter = &req.model.counter;
    let state_tokens = counter.count(&req.state_json);
    let bound = TokenLimit {
        limit: limits.max_state_tokens,
        flag: "--max-state-tokens",
        code: Code::StateTooLarge,
    };
    within(state_tokens, bound, counter, loc(&["state"]), || {
        format!("the state is {}{state_tokens} tokens", about(counter))
    })?;
    let total = upstream_prompt_tokens(req, question_tokens, state_tokens);
    let bound = TokenLimit {
        limit: limits.max_request_tokens,
        flag: "--max-request-tokens",
        code: Code::RequestTooLarge,
    };
    within(total, bound, counter, vec![], || {
        format!(
            "the request needs {}{total} upstream prompt tokens",
            about(counter)
        )
    })
}

/// Prompt tokens over every upstream request the plan will send. Each question of two or
/// more options is read once per option order and per slice of `max_ids_per_read` options;
/// each read carries the preamble, the state, the framing, the lead (the question alone, or
/// the whole question block under the cost layout or a shared history), the question and
/// its history. A one-option question is answered without a read and costs nothing.
fn upstream_prompt_tokens(
    req: &ValidRequest,
    question_tokens: &[usize],
    state_tokens: usize,
) -> usize {
    let counter = &req.model.counter;
    let per_read_ids = |ids: usize| req.model.backend.max_ids_per_read(ids);
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
        let rendered = &req.rendered[qi];
        let reads = rendered.shifts.len() * rendered.reads.requests(per_read_ids);
        let one = base + lead + question_tokens[qi] + history;
        total = total.saturating_add(reads.saturating_mul(one));
    }
    total
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::*;
    use super::ESTIMATE_NOTE;
    use crate::error::Code;

    /// What every read carries with the estimated counter (one token per byte): the
    /// preamble (206), `STATE` as JSON (71 + 2 quotes) and the framing allowance (32).
    const BASE: usize = 206 + 73 + 32;
    /// Tokens (bytes) of the question objects of `choice()` and `noul()`.
    const CHOICE: usize = 233;
    const NOUL: usize = 164;
    /// One read of `choice()` asked alone: the lead and the question are both the question.
    const ONE_CHOICE: usize = BASE + 2 * CHOICE;
    /// `choice()` and `noul()` asked in one request.
    const ONE_NOUL: usize = BASE + 2 * NOUL;

    fn needs(total: usize, limit: usize) -> String {
        format!("the request needs about {total} upstream prompt tokens, more than the limit of {limit} (--max-request-tokens){ESTIMATE_NOTE}")
    }

    fn question_over(tokens: usize, limit: usize) -> String {
        format!("the question is about {tokens} tokens, more than the limit of {limit} (--max-question-tokens){ESTIMATE_NOTE}")
    }

    fn state_over(tokens: usize, limit: usize) -> String {
        format!("the state is about {tokens} tokens, more than the limit of {limit} (--max-state-tokens){ESTIMATE_NOTE}")
    }

    /// `choice()` as `q1` and `noul()` as `q2`, with these top-level fields set.
    fn pair(fields: serde_json::Value) -> serde_json::Value {
        let mut body = json!({"state": STATE, "questions": {"q1": choice(), "q2": noul()}});
        for (k, v) in fields.as_object().expect("fields") {
            body[k] = v.clone();
        }
        body
    }

    #[test]
    #[rustfmt::skip]
    fn state_question_and_request_token_limits() {
        let long_noul = q1_with(noul(), "instructions", Some(json!("i".repeat(600))));
        let non_finite = r#"{"state": "s", "questions": {"q1": {"type": "noul", "instructions": {"x": 1e400}}}}"#;
        let non_finite_desc = r#"{"state": "s", "questions": {"q1": {"type": "choice", "criteria": {"a": [1e400]}}}}"#;
        let then_bad = json!({"state": STATE, "questions": {"q1": {"type": "noul", "instructions": "i".repeat(600)}, "q2": {"type": "box"}}});
        let big_state_bad_q =
            json!({"state": "s".repeat(200), "questions": {"q1": {"type": "box"}}});
        let big_state_images =
            json!({"state": "s".repeat(200), "questions": {"q1": choice()}, "images": [b64(PNG)]});
        let history = "h".repeat(50);
        run(vec![
            reject("question over max_question_tokens", long_noul, Code::QuestionTooLarge, &["questions", "q1"], question_over(132 + 600, 400)).limits(|l| l.max_question_tokens = 400),
            reject("question one token over", base(), Code::QuestionTooLarge, &["questions", "q1"], question_over(CHOICE, CHOICE - 1)).limits(|l| l.max_question_tokens = CHOICE - 1),
            accept("question at max_question_tokens", base()).limits(|l| l.max_question_tokens = CHOICE),
            reject("a number beyond f64 in instructions", raw(non_finite), Code::InvalidNumber, &["questions", "q1"], "it holds a number outside the range of a 64-bit float (about ±1.8e308)"),
            reject("a number beyond f64 in a description", raw(non_finite_desc), Code::InvalidNumber, &["questions", "q1"], "it holds a number outside the range of a 64-bit float (about ±1.8e308)"),
            reject("a question's size before the next question", then_bad, Code::QuestionTooLarge, &["questions", "q1"], question_over(132 + 600, 400)).limits(|l| l.max_question_tokens = 400),
            reject("state over max_state_tokens", top("state", json!("s".repeat(200))), Code::StateTooLarge, &["state"], state_over(202, 100)).limits(|l| l.max_state_tokens = 100),
            reject("state one token over", top("state", json!("s".repeat(99))), Code::StateTooLarge, &["state"], state_over(101, 100)).limits(|l| l.max_state_tokens = 100),
            accept("state at max_state_tokens", top("state", json!("s".repeat(98)))).limits(|l| l.max_state_tokens = 100),
            reject("the questions before the state's size", big_state_bad_q, Code::UnsupportedQuestionType, &["questions", "q1", "type"], "type must be \"choice\", \"noul\" or \"score\"").limits(|l| l.max_state_tokens = 100),
            reject("the images before the state's size", big_state_images, Code::ImagesUnsupported, &["images"], "model glm-5.3-flash is not configured as vision-capable, so it takes no images").limits(|l| l.max_state_tokens = 100),
            reject("the state's size before the request's", top("state", json!("s".repeat(200))), Code::StateTooLarge, &["state"], state_over(202, 100)).limits(|l| { l.max_state_tokens = 100; l.max_request_tokens = 0; }),
            reject("request one token over", base(), Code::RequestTooLarge, &[], needs(ONE_CHOICE, ONE_CHOICE - 1)).limits(|l| l.max_request_tokens = ONE_CHOICE - 1),
            accept("request at max_request_tokens", base()).limits(|l| l.max_request_tokens = ONE_CHOICE),
            reject("each order is a read", top("permutations", json!(2)), Code::RequestTooLarge, &[], needs(2 * ONE_CHOICE, ONE_CHOICE)).limits(|l| l.max_request_tokens = ONE_CHOICE),
            reject("each slice of ids is a read", top("model", json!(NARROW)), Code::RequestTooLarge, &[], needs(3 * ONE_CHOICE, ONE_CHOICE)).limits(|l| l.max_request_tokens = ONE_CHOICE),
            reject("accuracy: each question leads alone", pair(json!({})), Code::RequestTooLarge, &[], needs(ONE_CHOICE + ONE_NOUL, 0)).limits(|l| l.max_request_tokens = 0),
            reject("cost: the whole block leads", pair(json!({"layout": "cost"})), Code::RequestTooLarge, &[], needs(2 * BASE + 3 * (CHOICE + NOUL), 0)).limits(|l| l.max_request_tokens = 0),
            reject("a shared history: the whole block leads", pair(json!({"history": history})), Code::RequestTooLarge, &[], needs(2 * BASE + 3 * (CHOICE + NOUL) + 2 * 50, 0)).limits(|l| l.max_request_tokens = 0),
            reject("a per-question history counts for its question", pair(json!({"history": {"q2": history}})), Code::RequestTooLarge, &[], needs(ONE_CHOICE + ONE_NOUL + 50, 0)).limits(|l| l.max_request_tokens = 0),
            accept("a one-option question costs nothing", q1(json!({"type": "choice", "criteria": {"only": null}}))).limits(|l| l.max_request_tokens = 0),
            accept("request under the default limit", pair(json!({"permutations": 8}))),
        ]);
    }
}
