//! The token limits: one question, the state and the whole request.
//!
//! Validation counts every piece with the model's counter. With `--tokenizer` the count is
//! exact and a request over a limit is refused here (a question as it passes, the state and
//! the request last). Without one the count is the byte estimate, an upper bound about four
//! times the real count: a request it puts over a limit is not refused here but marked
//! ([`ValidRequest::recount`]) for the engine to count exactly with the backend's own
//! tokenizer before refusing (`engine/context_window.rs`), so ordinary requests pay nothing and
//! none is refused on the estimate while an exact count can be had.
//!
//! The request limit bounds what the backend must evaluate, not what the reads repeat:
//! each option order's prompt once, plus each trie read's label prefix after `answer=`. A
//! trie's reads and a node's slices share the whole prompt up to the prefill, which a
//! prefix-caching backend evaluates once. `usage.input_tokens` still sums every read's
//! whole prompt, as the backend bills it.

use std::borrow::Cow;

use super::{loc, prompt, refuse, Entry};
use crate::config::{Layout, Limits};
use crate::error::{ApiError, Code};
use crate::models::tokens::{estimate_tokens, fewest_tokens_for_bytes, TokenCounter};
use crate::models::Resolved;
use crate::question::{LoweredQuestion, COMPACT_PREAMBLE, PREAMBLE};
use crate::request::{compact, History, ValidRequest};

/// Tokens each upstream request adds around its parts (`{"state": `, newlines, the chat
/// template's turn markers and the `answer=` prefill): a generous allowance.
const FRAMING_TOKENS: usize = 32;

/// What an estimated count adds to its message: why a short text may count high, why it
/// was not counted exactly, and what makes it exact.
pub(super) const ESTIMATE_NOTE: &str = "; estimated at one token per UTF-8 byte (an upper bound): \
     the model has no tokenizer configured (--tokenizer counts exactly) and the backend's \
     tokenizer could not count it";

/// What a count by the backend's tokenizer adds to its message.
const BACKEND_NOTE: &str = "; counted by the backend's tokenizer";

/// The three token limits, kept with a request whose estimate went over one so the engine
/// can check them again on an exact count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLimits {
    /// `--max-question-tokens`.
    pub question: usize,
    /// `--max-state-tokens`.
    pub state: usize,
    /// `--max-request-tokens`.
    pub request: usize,
}

impl From<&Limits> for TokenLimits {
    fn from(l: &Limits) -> Self {
        TokenLimits {
            question: l.max_question_tokens,
            state: l.max_state_tokens,
            request: l.max_request_tokens,
        }
    }
}

/// A request the byte estimate put over a token limit: the limits to check again on an
/// exact count, and the code of the first limit the estimate broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recount {
    pub limits: TokenLimits,
    pub over: Code,
}

/// Whether `code` is one of the token limits, which the engine may give after an exact
/// count (a front door that says refusals in its own body's terms says these too).
pub fn is_token_limit(code: Code) -> bool {
    matches!(
        code,
        Code::QuestionTooLarge | Code::StateTooLarge | Code::RequestTooLarge
    )
}

/// How a request's pieces were counted, which its refusal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// By the configured `--tokenizer`.
    Tokenizer,
    /// By the backend's own tokenizer (`POST /tokenize`).
    Backend,
    /// By the byte estimate, no exact count being available.
    Estimate,
    /// Bounded from below by bytes alone, no token standing for more than this many
    /// bytes ([`TokenCounter::widest_token_bytes`]).
    Fewest(usize),
}

impl Counted {
    fn about(self) -> &'static str {
        match self {
            Counted::Estimate => "about ",
            Counted::Fewest(_) => "at least ",
            Counted::Tokenizer | Counted::Backend => "",
        }
    }

    fn note(self) -> Cow<'static, str> {
        match self {
            Counted::Tokenizer => "".into(),
            Counted::Backend => BACKEND_NOTE.into(),
            Counted::Estimate => ESTIMATE_NOTE.into(),
            Counted::Fewest(widest) => format!(
                "; counted from its UTF-8 bytes, no token of the model standing for more than \
                 {widest} bytes"
            )
            .into(),
        }
    }
}

/// The instruction every prompt of `layout` opens with.
fn preamble(layout: Layout) -> &'static str {
    match layout {
        Layout::Compact => COMPACT_PREAMBLE,
        Layout::Accuracy | Layout::Cost => PREAMBLE,
    }
}

/// The token counts of a request's pieces, each counted on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PieceTokens {
    preamble: usize,
    state: usize,
    /// Each question object in the caller's option order.
    questions: Vec<usize>,
    /// Each question's history (a shared one repeated), 0 for none.
    histories: Vec<usize>,
}

/// The texts a request's limits count, in the order [`PieceTokens::from_counts`] takes
/// their counts: the preamble, the state, each question object in the caller's order, then
/// the history (a shared one once, else each question's that has one), each as the
/// request's layout writes it.
pub fn piece_texts(req: &ValidRequest) -> Vec<Cow<'_, str>> {
    let mut texts = vec![preamble(req.layout).into(), state_piece(req)];
    texts.extend(req.rendered.iter().map(|r| r.text[0].as_str().into()));
    match &req.history {
        History::None => {}
        History::Shared(h) => texts.push(history_piece(req, h)),
        History::PerQuestion(per) => {
            texts.extend(per.iter().flatten().map(|h| history_piece(req, h)))
        }
    }
    texts
}

/// The state as `req`'s layout writes it.
fn state_piece(req: &ValidRequest) -> Cow<'_, str> {
    match req.layout {
        Layout::Compact => compact::state_text(&req.state_json),
        Layout::Accuracy | Layout::Cost => req.state_json.as_str().into(),
    }
}

/// A history as `req`'s layout writes it (`compact` quotes it).
fn history_piece<'a>(req: &ValidRequest, history: &'a str) -> Cow<'a, str> {
    match req.layout {
        Layout::Compact if !history.is_empty() => compact::history_text(history).into(),
        _ => history.into(),
    }
}

impl PieceTokens {
    /// The pieces' counts from the counts of [`piece_texts`], in its order.
    pub fn from_counts(req: &ValidRequest, counts: &[usize]) -> Self {
        let mut next = counts.iter().copied();
        let mut take = || next.next().unwrap_or(0);
        let preamble = take();
        let state = take();
        let questions = req.questions.iter().map(|_| take()).collect();
        let histories = match &req.history {
            History::None => vec![0; req.questions.len()],
            History::Shared(_) => vec![take(); req.questions.len()],
            History::PerQuestion(per) => per
                .iter()
                .map(|h| h.as_ref().map_or(0, |_| take()))
                .collect(),
        };
        PieceTokens {
            preamble,
            state,
            questions,
            histories,
        }
    }

    /// The fewest tokens each piece can be, from its bytes alone when no token stands for
    /// more than `widest` bytes.
    fn fewest(req: &ValidRequest, widest: usize) -> Self {
        let counts: Vec<usize> = piece_texts(req)
            .into_iter()
            .map(|text| fewest_tokens_for_bytes(text.len(), widest))
            .collect();
        Self::from_counts(req, &counts)
    }

    /// The pieces counted by `counter`, reusing the question counts validation already has.
    fn counted(req: &ValidRequest, question_tokens: &[usize], counter: &TokenCounter) -> Self {
        let count = |h: &str| counter.count(&history_piece(req, h));
        PieceTokens {
            preamble: match req.layout {
                Layout::Compact => counter.count(COMPACT_PREAMBLE),
                Layout::Accuracy | Layout::Cost => req.model.preamble_tokens(),
            },
            state: counter.count(&state_piece(req)),
            questions: question_tokens.to_vec(),
            histories: match &req.history {
                History::None => vec![0; req.questions.len()],
                History::Shared(h) => vec![count(h); req.questions.len()],
                History::PerQuestion(per) => {
                    per.iter().map(|h| h.as_deref().map_or(0, count)).collect()
                }
            },
        }
    }
}

/// A token limit: its value, the flag that sets it and the code for going over it.
struct TokenLimit {
    limit: usize,
    flag: &'static str,
    code: Code,
}

/// `count` within the limit, or its code at `at`: `what` says what was counted and how
/// much (`the state is about 7 tokens`), and the message adds the limit, its flag, and how
/// it was counted.
fn within(
    count: usize,
    bound: TokenLimit,
    counted: Counted,
    at: Vec<String>,
    what: impl FnOnce() -> String,
) -> Result<(), ApiError> {
    if count <= bound.limit {
        return Ok(());
    }
    refuse(
        bound.code,
        at,
        format!(
            "{}, more than the limit of {} ({}){}",
            what(),
            bound.limit,
            bound.flag,
            counted.note()
        ),
    )
}

/// `max_question_tokens`: the question as `layout` writes it in the caller's option order, rendered here
/// once (the prompt reuses it) and counted; over the limit it is refused here only when the
/// count is exact (an estimate is settled with the rest, [`check_token_limits`]). A number
/// no `f64` holds in the instructions or a description is refused while rendering. Returns
/// the count and the rendering.
pub(super) fn question_tokens(
    lowered: &LoweredQuestion,
    model: &Resolved,
    limits: &Limits,
    layout: Layout,
    at: Entry,
) -> Result<(usize, String), ApiError> {
    let rendered = prompt::render_question(lowered, 0, &model.table, layout)
        .map_err(|e| ApiError::at(Code::InvalidNumber, at.whole(), e.to_string()))?;
    let counter = &model.counter;
    let tokens = counter.count(&rendered);
    if counter.is_exact() {
        question_within(tokens, limits.max_question_tokens, Counted::Tokenizer, at)?;
    }
    Ok((tokens, rendered))
}

fn question_within(
    tokens: usize,
    limit: usize,
    counted: Counted,
    at: Entry,
) -> Result<(), ApiError> {
    let bound = TokenLimit {
        limit,
        flag: "--max-question-tokens",
        code: Code::QuestionTooLarge,
    };
    within(tokens, bound, counted, at.whole(), || {
        format!("the question is {}{tokens} tokens", counted.about())
    })
}

/// The token limits once the whole request is known; `question_tokens` is aligned with
/// the questions. A request whose bytes alone prove it over a limit is refused first,
/// without counting it. Then, with an exact counter a request over a limit is refused;
/// with the estimate it is marked for an exact recount ([`Recount`]) instead.
pub(super) fn check_token_limits(
    req: &mut ValidRequest,
    question_tokens: &[usize],
    limits: &Limits,
) -> Result<(), ApiError> {
    let bounds = TokenLimits::from(limits);
    check_fewest(req, bounds)?;
    let counter = &req.model.counter;
    let tokens = PieceTokens::counted(req, question_tokens, counter);
    if counter.is_exact() {
        return check(req, &tokens, bounds, Counted::Tokenizer);
    }
    if let Err(e) = check(req, &tokens, bounds, Counted::Estimate) {
        req.recount = Some(Recount {
            limits: bounds,
            over: e.code,
        });
    }
    Ok(())
}

/// Refuses `req` when the fewest tokens its pieces' bytes allow are already over a limit:
/// a lower bound, so nothing it refuses could have passed an exact count, and a state of
/// megabytes is refused in the time it takes to measure it rather than to tokenize it
/// (with the backend's tokenizer: minutes, and the backend's CPU). A counter whose widest
/// token is unknown refuses nothing here.
fn check_fewest(req: &ValidRequest, limits: TokenLimits) -> Result<(), ApiError> {
    let Some(widest) = req.model.counter.widest_token_bytes() else {
        return Ok(());
    };
    let fewest = PieceTokens::fewest(req, widest);
    check(req, &fewest, limits, Counted::Fewest(widest))
}

/// Every token limit on counts `tokens`, in the order a refusal is chosen: each question
/// in request order, the state, the whole request.
pub fn check(
    req: &ValidRequest,
    tokens: &PieceTokens,
    limits: TokenLimits,
    counted: Counted,
) -> Result<(), ApiError> {
    for (q, count) in req.questions.iter().zip(&tokens.questions) {
        let at = Entry {
            map: "questions",
            key: &q.id,
        };
        question_within(*count, limits.question, counted, at)?;
    }
    let state = tokens.state;
    let bound = TokenLimit {
        limit: limits.state,
        flag: "--max-state-tokens",
        code: Code::StateTooLarge,
    };
    within(state, bound, counted, loc(&["state"]), || {
        format!("the state is {}{state} tokens", counted.about())
    })?;
    let total = evaluated_prompt_tokens(req, tokens);
    let bound = TokenLimit {
        limit: limits.request,
        flag: "--max-request-tokens",
        code: Code::RequestTooLarge,
    };
    within(total, bound, counted, vec![], || {
        format!(
            "the request needs {}{total} prompt tokens evaluated by the backend (each option \
             order's prompt once, plus each trie read's label prefix; usage.input_tokens, \
             which sums every read's whole prompt, can be larger)",
            counted.about()
        )
    })
}

/// `req`'s limits checked on the byte estimate alone: the refusal when no exact count can be
/// had for a request marked for one.
pub fn check_on_estimate(req: &ValidRequest, limits: TokenLimits) -> Result<(), ApiError> {
    let counts: Vec<usize> = piece_texts(req)
        .iter()
        .map(|t| estimate_tokens(t))
        .collect();
    check(
        req,
        &PieceTokens::from_counts(req, &counts),
        limits,
        Counted::Estimate,
    )
}

/// The distinct prompt tokens the plan makes the backend evaluate. Each question of two or
/// more options is asked once per option order; that prompt carries the preamble, the
/// state, the framing, the lead (the question alone, or the whole question block under the
/// cost layout or a shared history; none in the compact layout), the question and its history. A trie's node reads
/// share it up to the prefill and add only their label prefix (one token per character);
/// slices of one node's ids share it whole. A one-option question is answered without a
/// read and costs nothing.
fn evaluated_prompt_tokens(req: &ValidRequest, tokens: &PieceTokens) -> usize {
    let block: usize = tokens.questions.iter().sum();
    let whole_block = req.layout == Layout::Cost || matches!(req.history, History::Shared(_));
    let base = tokens.preamble + tokens.state + FRAMING_TOKENS;
    let mut total = 0usize;
    for (qi, q) in req.questions.iter().enumerate() {
        if q.options.len() < 2 {
            continue;
        }
        let lead = if req.layout == Layout::Compact {
            // The compact prompt writes the question once, after the state.
            0
        } else if whole_block {
            block
        } else {
            tokens.questions[qi]
        };
        let rendered = &req.rendered[qi];
        let one = base + lead + tokens.questions[qi] + tokens.histories[qi];
        let per_order = one.saturating_add(rendered.reads.label_prefix_tokens());
        total = total.saturating_add(rendered.shifts.len().saturating_mul(per_order));
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

    /// An 11-option choice on `gemma-3` (labels `00`…`10`: the root, then nodes `0` and
    /// `1`): one prompt plus the two nodes' one-token label prefixes.
    const TRIE_11: usize = BASE + 2 * 626 + 2;
    /// Bytes of the 255-option question object on `gemma-3` (labels `o0`…`o254`).
    const Q_255: usize = 14456;
    /// Its request: one prompt, plus the label prefixes of its 29 nodes after the root
    /// (`0`…`2`: one token each; `00`…`25`: two each).
    const TRIE_255: usize = BASE + 2 * Q_255 + 3 + 26 * 2;

    /// A request with one `n`-option choice on the vision model (`gemma-3`'s labels).
    fn on_vision(n: usize) -> serde_json::Value {
        let criteria: serde_json::Map<String, serde_json::Value> = (0..n)
            .map(|i| (format!("o{i}"), serde_json::Value::Null))
            .collect();
        json!({"model": VISION, "state": STATE, "questions": {"q1": {"type": "choice", "criteria": criteria}}})
    }

    fn needs(total: usize, limit: usize) -> String {
        format!("the request needs about {total} prompt tokens evaluated by the backend (each option order's prompt once, plus each trie read's label prefix; usage.input_tokens, which sums every read's whole prompt, can be larger), more than the limit of {limit} (--max-request-tokens){ESTIMATE_NOTE}")
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
            reject("an estimated size after every schema rule", then_bad, Code::UnsupportedQuestionType, &["questions", "q2", "type"], "type must be \"choice\", \"noul\" or \"score\"").limits(|l| l.max_question_tokens = 400),
            reject("state over max_state_tokens", top("state", json!("s".repeat(200))), Code::StateTooLarge, &["state"], state_over(202, 100)).limits(|l| l.max_state_tokens = 100),
            reject("state one token over", top("state", json!("s".repeat(99))), Code::StateTooLarge, &["state"], state_over(101, 100)).limits(|l| l.max_state_tokens = 100),
            accept("state at max_state_tokens", top("state", json!("s".repeat(98)))).limits(|l| l.max_state_tokens = 100),
            reject("the questions before the state's size", big_state_bad_q, Code::UnsupportedQuestionType, &["questions", "q1", "type"], "type must be \"choice\", \"noul\" or \"score\"").limits(|l| l.max_state_tokens = 100),
            reject("the images before the state's size", big_state_images, Code::ImagesUnsupported, &["images"], "model glm-5.3-flash is not configured as vision-capable, so it takes no images").limits(|l| l.max_state_tokens = 100),
            reject("the state's size before the request's", top("state", json!("s".repeat(200))), Code::StateTooLarge, &["state"], state_over(202, 100)).limits(|l| { l.max_state_tokens = 100; l.max_request_tokens = 100; }),
            reject("a state its bytes prove too long, on them alone", top("state", json!("s".repeat(600))), Code::StateTooLarge, &["state"], "the state is at least 2 tokens, more than the limit of 1 (--max-state-tokens); counted from its UTF-8 bytes, no token of the model standing for more than 512 bytes").limits(|l| l.max_state_tokens = 1),
            reject("request one token over", base(), Code::RequestTooLarge, &[], needs(ONE_CHOICE, ONE_CHOICE - 1)).limits(|l| l.max_request_tokens = ONE_CHOICE - 1),
            accept("request at max_request_tokens", base()).limits(|l| l.max_request_tokens = ONE_CHOICE),
            reject("each order is a read", top("permutations", json!(2)), Code::RequestTooLarge, &[], needs(2 * ONE_CHOICE, ONE_CHOICE)).limits(|l| l.max_request_tokens = ONE_CHOICE),
            accept("slices of ids share their prompt", top("model", json!(NARROW))).limits(|l| l.max_request_tokens = ONE_CHOICE),
            reject("a trie's reads add their label prefixes", on_vision(11), Code::RequestTooLarge, &[], needs(TRIE_11, TRIE_11 - 1)).limits(|l| l.max_request_tokens = TRIE_11 - 1),
            accept("a trie at the limit", on_vision(11)).holds(|r| r.rendered()[0].reads.label_prefix_tokens() == 2).limits(|l| l.max_request_tokens = TRIE_11),
            accept("255 options pass the default limits, even on the estimate", on_vision(255)).holds(|r| r.recount().is_none()),
            reject("255 options: one prompt and 55 prefix tokens", on_vision(255), Code::RequestTooLarge, &[], needs(TRIE_255, TRIE_255 - 1)).limits(|l| l.max_request_tokens = TRIE_255 - 1),
            reject("255 options: the question limit on the estimate", on_vision(255), Code::QuestionTooLarge, &["questions", "q1"], question_over(Q_255, Q_255 - 1)).limits(|l| l.max_question_tokens = Q_255 - 1),
            reject("accuracy: each question leads alone", pair(json!({})), Code::RequestTooLarge, &[], needs(ONE_CHOICE + ONE_NOUL, 100)).limits(|l| l.max_request_tokens = 100),
            reject("cost: the whole block leads", pair(json!({"layout": "cost"})), Code::RequestTooLarge, &[], needs(2 * BASE + 3 * (CHOICE + NOUL), 100)).limits(|l| l.max_request_tokens = 100),
            reject("a shared history: the whole block leads", pair(json!({"history": history})), Code::RequestTooLarge, &[], needs(2 * BASE + 3 * (CHOICE + NOUL) + 2 * 50, 100)).limits(|l| l.max_request_tokens = 100),
            reject("a per-question history counts for its question", pair(json!({"history": {"q2": history}})), Code::RequestTooLarge, &[], needs(ONE_CHOICE + ONE_NOUL + 50, 100)).limits(|l| l.max_request_tokens = 100),
            accept("a one-option question costs nothing", q1(json!({"type": "choice", "criteria": {"only": null}}))).limits(|l| l.max_request_tokens = 0),
            accept("request under the default limit", pair(json!({"permutations": 8}))),
        ]);
    }
}
