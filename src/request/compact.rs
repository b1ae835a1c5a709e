//! The `compact` layout: the project's own prompt bytes, as few tokens as the exact answer
//! allows (the reference's bytes are the `accuracy` and `cost` layouts, [`super::prompt`]).
//!
//! ```text
//! COMPACT_PREAMBLE + <state> + "\n\n" [+ <history> + "\n\n"] + "Question: " <instructions> "\n"
//! <label>: <option label>[ - <description>]        one line per option
//! ```
//! Everything up to the question is the same for every read of a request (with a per-question
//! history, up to the state), so a prefix-caching backend computes it once: the shared head
//! is the instruction line and the state, the tail one question's lines. A string (state,
//! instructions, description) is written as its text, anything else as Python JSON; a null
//! instruction or description is left out; a score's levels show only their text (the
//! `level_i` label says nothing the number does not). Images go ahead of the text. The
//! labels, their tokens, the masking, the chain rule and the `answer=` prefill are those of
//! the other layouts. `tests/golden/compact-cases.jsonl` pins the bytes.

use std::sync::Arc;

use serde_json::Value;

use super::ask::Ask;
use super::{History, ValidRequest};
use crate::backend::{EncodedContent, Part, UserContent};
use crate::json::{write_python, NonFiniteNumber};
use crate::models::tokens::{OptionLabels, TokenTable};
use crate::question::{LoweredQuestion, QuestionKind, COMPACT_PREAMBLE};

/// The question's lines in the order rotated by `shift`: `Question: …` (when it has
/// instructions), then `<label>: <option>[ - <description>]` per option, no final newline.
pub fn question_lines(
    q: &LoweredQuestion,
    shift: usize,
    table: &TokenTable,
) -> Result<String, NonFiniteNumber> {
    let n = q.options.len();
    let labels = table.labels_for(n);
    let mut out = String::with_capacity(32 + 24 * n);
    if !q.instructions.is_null() {
        out.push_str("Question: ");
        write_text(&mut out, &q.instructions)?;
    }
    for p in 0..n {
        let option = &q.options[(p + shift) % n];
        if !out.is_empty() {
            out.push('\n');
        }
        write_label(&mut out, labels, p);
        out.push_str(": ");
        let described = !option.description.is_null();
        if q.kind == QuestionKind::Score && described {
            write_text(&mut out, &option.description)?;
            continue;
        }
        out.push_str(&option.label);
        if described {
            out.push_str(" - ");
            write_text(&mut out, &option.description)?;
        }
    }
    Ok(out)
}

/// A string as its text; any other value as Python JSON.
fn write_text(out: &mut String, v: &Value) -> Result<(), NonFiniteNumber> {
    match v {
        Value::String(s) => {
            out.push_str(s);
            Ok(())
        }
        other => write_python(out, other),
    }
}

/// Option `p`'s label as the model answers it (`3`, or `07` for a multi-token label).
fn write_label(out: &mut String, labels: Option<OptionLabels<'_>>, p: usize) {
    match labels {
        Some(OptionLabels::Single(l)) => out.push_str(&l[p].number.to_string()),
        Some(OptionLabels::Multi(l)) => out.push_str(&l[p].text),
        None => out.push_str(&p.to_string()),
    }
}

/// The state as the compact prompt writes it: a string's text, else its Python JSON.
fn state_text(state_json: &str) -> std::borrow::Cow<'_, str> {
    if state_json.starts_with('"') {
        if let Ok(text) = serde_json::from_str::<String>(state_json) {
            return text.into();
        }
    }
    state_json.into()
}

/// Every ask of every question in the compact layout, in logical order (question, then
/// order): the shared head, the question's history, its lines.
pub fn plan(req: &ValidRequest) -> Vec<Vec<Ask>> {
    let state = state_text(req.state_json());
    let images: Vec<Part> = req
        .images()
        .iter()
        .map(|u| Part::ImageUrl(u.clone()))
        .collect();
    req.rendered()
        .iter()
        .enumerate()
        .map(|(qi, question)| {
            let history = match req.history() {
                History::None => None,
                History::Shared(h) => Some(h.as_str()),
                History::PerQuestion(per) => per[qi].as_deref(),
            };
            (question.shifts.iter().zip(&question.json).enumerate())
                .map(|(order, (shift, lines))| Ask {
                    question: qi,
                    order,
                    shift: *shift,
                    content: Arc::new(content(&state, history, lines, &images)),
                })
                .collect()
        })
        .collect()
}

/// One user message: the images, then one text (the head, the history, the question).
fn content(state: &str, history: Option<&str>, lines: &str, images: &[Part]) -> EncodedContent {
    let history = history.filter(|h| !h.is_empty());
    let mut text = String::with_capacity(
        COMPACT_PREAMBLE.len() + state.len() + history.map_or(0, str::len) + lines.len() + 4,
    );
    text.push_str(COMPACT_PREAMBLE);
    text.push_str(state);
    text.push_str("\n\n");
    if let Some(h) = history {
        text.push_str(h);
        text.push_str("\n\n");
    }
    text.push_str(lines);
    if images.is_empty() {
        return EncodedContent::new(UserContent::Text(text));
    }
    let mut parts = images.to_vec();
    parts.push(Part::Text(text));
    EncodedContent::new(UserContent::Parts(parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::question::{lower_choice, lower_noul, lower_score};
    use serde_json::json;

    fn table() -> TokenTable {
        TokenTable::load("gemma-3").expect("shipped gemma-3 table")
    }

    #[test]
    fn lines_write_text_raw_and_leave_nulls_out() {
        let q = lower_choice(
            "t".into(),
            json!("Which team?"),
            vec![
                ("payments".into(), json!("wrong charges")),
                ("human".into(), Value::Null),
                ("other".into(), json!({"k": 1.5})),
            ],
        );
        let lines = question_lines(&q, 0, &table()).expect("renders");
        assert_eq!(
            lines,
            "Question: Which team?\n0: payments - wrong charges\n1: human\n2: other - {\"k\": 1.5}"
        );
        let rotated = question_lines(&q, 1, &table()).expect("renders");
        assert!(rotated.ends_with("0: human\n1: other - {\"k\": 1.5}\n2: payments - wrong charges"));
    }

    #[test]
    fn nouls_show_no_then_yes_and_scores_their_levels() {
        let q = lower_noul("s".into(), Value::Null, Value::Null, json!("it is spam"));
        assert_eq!(
            question_lines(&q, 0, &table()).expect("renders"),
            "0: no\n1: yes - it is spam"
        );
        let q = lower_score(
            "u".into(),
            json!("How urgent?"),
            vec![json!("low"), json!("high")],
        );
        assert_eq!(
            question_lines(&q, 0, &table()).expect("renders"),
            "Question: How urgent?\n0: low\n1: high"
        );
    }

    #[test]
    fn a_string_state_is_written_as_its_text() {
        assert_eq!(state_text("\"a \\\"b\\\"\\nc\""), "a \"b\"\nc");
        assert_eq!(state_text("{\"a\": 1}"), "{\"a\": 1}");
        let text = content("S", Some(""), "Q", &[]);
        assert_eq!(text.text(), format!("{COMPACT_PREAMBLE}S\n\nQ"));
        let text = content("S", Some("H"), "Q", &[]);
        assert_eq!(text.text(), format!("{COMPACT_PREAMBLE}S\n\nH\n\nQ"));
    }
}
