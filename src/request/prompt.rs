//! The prompt: a lowered question becomes the exact user-message bytes the reference
//! library sends (the `accuracy` and `cost` rows of the book's
//! [layouts page](../../docs/layouts.md)). The golden vectors pin every byte.
//!
//! ```text
//! PREAMBLE + LEAD + {"state": <state>, "question": …, ["note": …,] "options": […]}
//! ```
//! LEAD is the asked question object + `\n` (layout `accuracy`) or every question object of
//! the request, each + `\n` (layout `cost`). A history splits the content into parts so the
//! growing record sits in the cacheable head; images go ahead of the text. The `compact`
//! layout's own bytes are in [`super::compact`].

use std::sync::Arc;

pub use super::ask::Ask;
use super::trie::ReadPlan;
use super::{History, RenderedQuestion, ValidRequest};
use crate::backend::{EncodedContent, Part, UserContent};
use crate::config::Layout;
use crate::json::{write_escaped, write_python, write_python_str, NonFiniteNumber};
use crate::models::tokens::{OptionLabels, TokenTable};
use crate::question::{LoweredQuestion, PREAMBLE};

/// The rotation of each order for `n` options and `k` requested permutations:
/// `min(k, n)` orders, order `r` shifted by `round(r·n/k')` with round-half-to-even.
pub fn shifts(n: usize, k: usize) -> Vec<usize> {
    let orders = k.min(n).max(1);
    (0..orders)
        .map(|r| {
            let num = r * n;
            let (q, rem) = (num / orders, num % orders);
            match (2 * rem).cmp(&orders) {
                std::cmp::Ordering::Less => q,
                std::cmp::Ordering::Greater => q + 1,
                std::cmp::Ordering::Equal => q + (q % 2),
            }
        })
        .collect()
}

/// The question object of `q` in the order rotated by `shift`, as Python JSON:
/// `{"question": …, ["note": …,] "options": [{"number": N, "label": …, "description": …}, …]}`.
pub fn question_json(
    q: &LoweredQuestion,
    shift: usize,
    table: &TokenTable,
) -> Result<String, NonFiniteNumber> {
    let n = q.options.len();
    let labels = table.labels_for(n);
    let mut out = String::with_capacity(64 + 64 * n);
    out.push_str("{\"question\": ");
    write_python(&mut out, &q.instructions)?;
    if let Some(note) = q.note() {
        out.push_str(", \"note\": ");
        write_python_str(&mut out, note);
    }
    out.push_str(", \"options\": [");
    for p in 0..n {
        let option = &q.options[(p + shift) % n];
        if p > 0 {
            out.push_str(", ");
        }
        out.push_str("{\"number\": ");
        write_number(&mut out, labels, p);
        out.push_str(", \"label\": ");
        write_python_str(&mut out, &option.label);
        out.push_str(", \"description\": ");
        write_python(&mut out, &option.description)?;
        out.push('}');
    }
    out.push_str("]}");
    Ok(out)
}

/// Option `p`'s number as the prompt writes it: the JSON integer of its single-token label
/// (the reference's bytes), or the JSON string of its multi-token label (`"07"`: the
/// leading zero is part of what the model must answer). Without labels (validation refuses
/// such a question first) the position itself is written.
fn write_number(out: &mut String, labels: Option<OptionLabels<'_>>, p: usize) {
    match labels {
        Some(OptionLabels::Single(l)) => out.push_str(&l[p].number.to_string()),
        Some(OptionLabels::Multi(l)) => write_python_str(out, &l[p].text),
        None => out.push_str(&p.to_string()),
    }
}

/// The question as a `layout`'s prompt writes it in the order rotated by `shift`: the
/// reference's question object ([`question_json`]), or the `compact` layout's lines
/// ([`super::compact::question_lines`]).
pub fn render_question(
    q: &LoweredQuestion,
    shift: usize,
    table: &TokenTable,
    layout: Layout,
) -> Result<String, NonFiniteNumber> {
    match layout {
        Layout::Compact => super::compact::question_lines(q, shift, table),
        Layout::Accuracy | Layout::Cost => question_json(q, shift, table),
    }
}

/// Appends `{"state": S, <keys of the question object>}` without re-rendering either.
fn push_state_and_question(out: &mut String, state_json: &str, qjson: &str) {
    out.push_str("{\"state\": ");
    out.push_str(state_json);
    out.push_str(", ");
    out.push_str(&qjson[1..]);
}

/// The orders of `q` for `permutations` requested rotations, each rendered for `layout`;
/// `first` is the caller's order, already rendered (validation counted its tokens).
pub fn render_orders(
    q: &LoweredQuestion,
    first: String,
    permutations: usize,
    table: &TokenTable,
    layout: Layout,
) -> Result<RenderedQuestion, NonFiniteNumber> {
    let n = q.options.len();
    let shifts = shifts(n, permutations);
    let mut text = Vec::with_capacity(shifts.len());
    text.push(first);
    for shift in &shifts[1..] {
        text.push(render_question(q, *shift, table, layout)?);
    }
    // Validation refuses a question the table cannot label; were one to get here, it
    // would read nothing and decoding would refuse it as a protocol break.
    let reads = ReadPlan::new(table, n).unwrap_or_else(ReadPlan::nothing);
    Ok(RenderedQuestion {
        shifts,
        text,
        reads,
    })
}

/// Every ask of every question, in logical order (question, then order).
/// Includes single-option questions; the pipeline answers those without asking.
///
/// A text prompt's upstream encoding (its JSON string literal) is joined from pieces
/// escaped once each (the state, each question object), so nothing is escaped twice:
/// the question object appears twice in an `accuracy` prompt, every object in each `cost`
/// prompt.
pub fn plan(req: &ValidRequest) -> Vec<Vec<Ask>> {
    if req.layout() == Layout::Compact {
        return super::compact::plan(req);
    }
    let rendered = req.rendered();
    let images: Vec<Part> = req
        .images()
        .iter()
        .map(|u| Part::ImageUrl(u.clone()))
        .collect();
    let text_prompts = images.is_empty() && !matches!(req.history(), History::Shared(_));
    let orders = Orders {
        rendered,
        escaped: Escaped::new(req, text_prompts),
        whole_block_lead: req.layout() == Layout::Cost
            || matches!(req.history(), History::Shared(_)),
    };
    rendered
        .iter()
        .enumerate()
        .map(|(qi, question)| {
            let message = Message {
                preamble: &orders.escaped.preamble,
                state: Piece {
                    text: req.state_json(),
                    escaped: &orders.escaped.state,
                },
                history: req.history().of(qi),
                images: &images,
            };
            (question.shifts.iter().zip(&question.text).enumerate())
                .map(|(r, (shift, qjson))| orders.ask(&message, qi, r, *shift, qjson))
                .collect()
        })
        .collect()
}

/// What every ask of a request shares: the rendered questions, their escaped forms, and
/// whether each prompt leads with the whole block of questions (`cost`, a shared history)
/// or with its own question.
struct Orders<'a> {
    rendered: &'a [RenderedQuestion],
    escaped: Escaped,
    whole_block_lead: bool,
}

impl Orders<'_> {
    /// The ask of question `qi` in order `r`, whose question object is `qjson`.
    fn ask(&self, message: &Message<'_>, qi: usize, r: usize, shift: usize, qjson: &str) -> Ask {
        let qjson = Piece {
            text: qjson,
            escaped: self.escaped.question(qi, r),
        };
        let content = if self.whole_block_lead {
            let text = block(&rendered_json(self.rendered), r, "\n");
            let escaped = block(&self.escaped.questions, r, "\\n");
            let piece = Piece {
                text: &text,
                escaped: &escaped,
            };
            message.content(
                Lead {
                    piece,
                    newline: false,
                },
                qjson,
            )
        } else {
            message.content(
                Lead {
                    piece: qjson,
                    newline: true,
                },
                qjson,
            )
        };
        Ask {
            question: qi,
            order: r,
            shift,
            content: Arc::new(content),
        }
    }
}

/// The escaped form (inside a JSON string literal) of the state and of every question
/// object in every order; empty when no prompt of the request is a plain text (images, a
/// shared history).
struct Escaped {
    preamble: String,
    state: String,
    questions: Vec<Vec<String>>,
}

impl Escaped {
    fn new(req: &ValidRequest, text_prompts: bool) -> Self {
        if !text_prompts {
            return Escaped {
                preamble: String::new(),
                state: String::new(),
                questions: Vec::new(),
            };
        }
        Escaped {
            preamble: escape(PREAMBLE),
            state: escape(req.state_json()),
            questions: rendered_json(req.rendered())
                .iter()
                .map(|orders| orders.iter().map(|j| escape(j)).collect())
                .collect(),
        }
    }

    fn question(&self, q: usize, order: usize) -> &str {
        self.questions
            .get(q)
            .and_then(|orders| orders.get(order))
            .map_or("", String::as_str)
    }
}

/// `s` escaped for the inside of a JSON string literal.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 4);
    write_escaped(&mut out, s);
    out
}

/// Each question's objects, one per order.
fn rendered_json(rendered: &[RenderedQuestion]) -> Vec<&[String]> {
    rendered.iter().map(|q| q.text.as_slice()).collect()
}

/// The whole question block for order index `r` (the `cost` layout, a shared history):
/// each question's object in that order (its last order when it has fewer), each followed
/// by `newline` (`\n`, or its escape `\\n` when `questions` are escaped ones).
fn block<S: AsRef<str>>(questions: &[impl AsRef<[S]>], r: usize, newline: &str) -> String {
    let mut lead = String::new();
    for orders in questions {
        let orders = orders.as_ref();
        let Some(last) = orders.len().checked_sub(1) else {
            continue;
        };
        lead.push_str(orders[r.min(last)].as_ref());
        lead.push_str(newline);
    }
    lead
}

/// What a prompt starts with after the preamble: the question block, or the asked
/// question's object and a newline (borrowed, not copied).
#[derive(Clone, Copy)]
struct Lead<'a> {
    piece: Piece<'a>,
    newline: bool,
}

impl Lead<'_> {
    fn len(&self) -> usize {
        self.piece.escaped.len().max(self.piece.text.len()) + 2
    }
    fn push_text(&self, out: &mut String) {
        out.push_str(self.piece.text);
        if self.newline {
            out.push('\n');
        }
    }
    fn push_escaped(&self, out: &mut String) {
        out.push_str(self.piece.escaped);
        if self.newline {
            out.push_str("\\n");
        }
    }
}

/// One piece of a prompt and its escaped form.
#[derive(Clone, Copy)]
struct Piece<'a> {
    text: &'a str,
    escaped: &'a str,
}

/// What every user message of one question shares.
struct Message<'a> {
    /// The preamble, escaped.
    preamble: &'a str,
    /// The state as Python JSON.
    state: Piece<'a>,
    /// The question's history, if any.
    history: Option<&'a str>,
    /// Image parts, sent ahead of the text.
    images: &'a [Part],
}

impl Message<'_> {
    /// The user message for one order: `lead` then the state and `qjson`, encoded.
    fn content(&self, lead: Lead<'_>, qjson: Piece<'_>) -> EncodedContent {
        let state = self.state.text;
        match self.history {
            // The growing record sits in the cacheable head; the question comes last.
            Some(h) => {
                let mut head =
                    String::with_capacity(PREAMBLE.len() + lead.len() + state.len() + h.len() + 16);
                head.push_str(PREAMBLE);
                lead.push_text(&mut head);
                head.push_str("{\"state\": ");
                head.push_str(state);
                head.push('}');
                if !h.is_empty() {
                    head.push_str("\n\n");
                    head.push_str(h);
                }
                let mut parts = Vec::with_capacity(self.images.len() + 2);
                parts.push(Part::Text(head));
                parts.extend(self.images.iter().cloned());
                parts.push(Part::Text(qjson.text.to_string()));
                EncodedContent::new(UserContent::Parts(parts))
            }
            None => {
                let mut text = String::with_capacity(
                    PREAMBLE.len() + lead.len() + state.len() + qjson.text.len() + 12,
                );
                text.push_str(PREAMBLE);
                lead.push_text(&mut text);
                push_state_and_question(&mut text, state, qjson.text);
                if self.images.is_empty() {
                    let json = self.text_json(lead, qjson);
                    EncodedContent::from_text(text, json)
                } else {
                    let mut parts = self.images.to_vec();
                    parts.push(Part::Text(text));
                    EncodedContent::new(UserContent::Parts(parts))
                }
            }
        }
    }

    /// The JSON string literal of the plain text prompt, joined from escaped pieces.
    fn text_json(&self, lead: Lead<'_>, qjson: Piece<'_>) -> String {
        let mut json = String::with_capacity(
            PREAMBLE.len() + lead.len() + self.state.escaped.len() + qjson.escaped.len() + 32,
        );
        json.push('"');
        json.push_str(self.preamble);
        lead.push_escaped(&mut json);
        json.push_str("{\\\"state\\\": ");
        json.push_str(self.state.escaped);
        json.push_str(", ");
        // The object's opening brace needs no escape: dropping it drops one byte.
        json.push_str(qjson.escaped.get(1..).unwrap_or_default());
        json.push('"');
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preamble_is_the_specified_206_bytes() {
        assert_eq!(PREAMBLE.len(), 206);
    }

    #[test]
    fn shifts_round_half_to_even_and_cap_at_n() {
        assert_eq!(shifts(5, 2), vec![0, 2]);
        assert_eq!(shifts(5, 3), vec![0, 2, 3]);
        assert_eq!(shifts(3, 5), vec![0, 1, 2]);
        assert_eq!(shifts(150, 2), vec![0, 75]);
        assert_eq!(shifts(1, 8), vec![0]);
        assert_eq!(shifts(4, 1), vec![0]);
    }
}
