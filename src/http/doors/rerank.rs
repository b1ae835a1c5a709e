//! `POST /v2/rerank` and `POST /v1/rerank`: Cohere's rerank shape (`cohere` 7.3.1,
//! `ClientV2.rerank`), as TEI and Jina clients call it too. A front door, not a second
//! engine: the call becomes System One requests with one noul per document, validated by
//! [`crate::request::validate()`] and run by the same [`crate::engine::Pipeline`] under the
//! same keys, limits, circuit, metrics and logs as `/v1/systemone`.
//!
//! Each document `i` is the noul `"i"`: its instructions are the serving model's configured
//! `rerank_question`, the state is `{"query": <query>}`, and the document is the question's
//! history `{"document": <document>}`. The history layout (`docs/layouts.md`) puts preamble,
//! question, state (the query) and then the document in the cacheable head, so every
//! document of a call shares the backend's prefix cache up to the document; the layout is
//! `accuracy` whatever the model's default, so no read carries the other documents.
//! `relevance_score` is the noul's P(yes).
//!
//! Documents are asked in batches of `max_questions` (the per-request question limit); a
//! batch over `max_request_tokens` is halved until it fits. The first batch goes alone (it
//! seats the shared prefix, and is the circuit's probe when half-open), the rest together
//! under the one in-flight cap; the whole call keeps the request deadline.

use std::sync::Arc;

use axum::response::Response;
use serde_json::{json, Map, Value};

use super::Door;
use crate::config::Limits;
use crate::engine::Answers;
use crate::error::{ApiError, Code};
use crate::http::blocking::Weight;
use crate::http::body::RequestBody;
use crate::http::context::{RequestContext, RequestId};
use crate::http::flow::AnsweredCall;
use crate::http::wire;
use crate::json::write_python_str;
use crate::models::{Model, Models, Routes};
use crate::request::images::Parts;
use crate::request::validate::{is_token_limit, loc, refuse_type, requested_model, type_name};
use crate::request::{validate, ValidRequest};

/// Cohere's default for `max_tokens_per_doc`.
pub(super) const DEFAULT_MAX_TOKENS_PER_DOC: usize = 4096;
/// Documents per search unit, as Cohere bills them.
const DOCUMENTS_PER_SEARCH_UNIT: usize = 100;

/// The rerank door.
pub(in crate::http) struct Rerank;

impl Door for Rerank {
    type Plan = Plan;

    /// Documents are text: only exact token counting makes the plan heavy.
    fn weight(_body: &RequestBody, models: &Models) -> Weight {
        if models.any_counts_exactly() {
            Weight::Heavy
        } else {
            Weight::Light
        }
    }

    /// The rerank rules and truncation, then validated batches, all before anything is sent.
    fn plan(
        json: Value,
        _parts: &Parts,
        routes: &Routes<'_>,
        limits: &Limits,
    ) -> Result<Plan, ApiError> {
        plan(json, routes, limits)
    }

    fn requests(plan: &Plan) -> &[ValidRequest] {
        &plan.batches
    }

    fn in_door_terms(e: ApiError, plan: &Plan) -> ApiError {
        exact_refusal_in_rerank_terms(e, &plan.batches)
    }

    /// Cohere's shape.
    fn respond(
        plan: &Plan,
        answered: &AnsweredCall,
        context: &RequestContext,
    ) -> Result<Response, ApiError> {
        wire::json_ok(&response_body(&context.id, plan, answered))
    }
}

/// A rerank call that passed every rule, ready to run.
pub(in crate::http) struct Plan {
    /// One validated System One request per batch of documents, in document order.
    batches: Vec<ValidRequest>,
    /// Documents in the call.
    documents: usize,
    /// Most results to return.
    top_n: usize,
    /// Indexes of the documents cut to `max_tokens_per_doc`.
    truncated: Vec<usize>,
    /// The `max_tokens_per_doc` applied.
    max_tokens_per_doc: usize,
}

/// The rerank body as the rules read it.
struct Call {
    /// The model that serves (its fallback while its circuit is open).
    model: Arc<Model>,
    query: String,
    documents: Vec<String>,
    top_n: Option<usize>,
    max_tokens_per_doc: usize,
}

/// The whole pure part: the body's rules, truncation, then one validated request per batch.
fn plan(json: Value, models: &Routes, limits: &Limits) -> Result<Plan, ApiError> {
    let mut call = parse(json, models, limits)?;
    let truncated = truncate(&mut call);
    let docs: Vec<(usize, &str)> = call
        .documents
        .iter()
        .map(String::as_str)
        .enumerate()
        .collect();
    let mut batches = Vec::new();
    for chunk in docs.chunks(limits.max_questions.max(1)) {
        validate_batch(&call, chunk, models, limits, &mut batches)?;
    }
    Ok(Plan {
        batches,
        documents: call.documents.len(),
        top_n: call.top_n.unwrap_or(usize::MAX),
        truncated,
        max_tokens_per_doc: call.max_tokens_per_doc,
    })
}

/// The rerank body's own rules, field by field in this order: the body, `model`, `query`,
/// `documents`, `top_n`, `max_tokens_per_doc`, then the options this service cannot
/// honour. `priority` (a scheduling hint) and any other field are ignored, as on
/// `/v1/systemone`.
fn parse(json: Value, models: &Routes, limits: &Limits) -> Result<Call, ApiError> {
    let Value::Object(body) = json else {
        return refuse_type(
            Code::InvalidBody,
            Vec::new(),
            "the body must be a JSON object",
            &json,
        );
    };
    let model = models
        .serving(requested_model(body.get("model"), models)?)
        .clone();
    let call = Call {
        model,
        query: query(body.get("query"))?,
        documents: documents(body.get("documents"), limits)?,
        top_n: top_n(body.get("top_n"))?,
        max_tokens_per_doc: max_tokens_per_doc(body.get("max_tokens_per_doc"), limits)?,
    };
    unsupported_options(&body)?;
    Ok(call)
}

/// `query`: required, a non-blank string.
fn query(value: Option<&Value>) -> Result<String, ApiError> {
    match value {
        None => Err(ApiError::at(
            Code::InvalidQuery,
            loc(&["query"]),
            "query is required",
        )),
        Some(Value::String(q)) if q.trim().is_empty() => Err(ApiError::at(
            Code::InvalidQuery,
            loc(&["query"]),
            "query must not be a blank string",
        )),
        Some(Value::String(q)) => Ok(q.clone()),
        Some(other) => refuse_type(
            Code::InvalidQuery,
            loc(&["query"]),
            "query must be a string",
            other,
        ),
    }
}

/// `documents`: required, 1 to `max_rerank_documents` strings (an empty string is a
/// document too: it is simply not relevant).
fn documents(value: Option<&Value>, limits: &Limits) -> Result<Vec<String>, ApiError> {
    let list = match value {
        None => {
            return Err(ApiError::at(
                Code::InvalidDocuments,
                loc(&["documents"]),
                "documents is required",
            ))
        }
        Some(Value::Array(list)) => list,
        Some(other) => {
            return refuse_type(
                Code::InvalidDocuments,
                loc(&["documents"]),
                "documents must be an array of strings",
                other,
            )
        }
    };
    let max = limits.max_rerank_documents;
    if list.is_empty() {
        return Err(ApiError::at(
            Code::InvalidDocuments,
            loc(&["documents"]),
            format!("documents must hold 1 to {max} documents, got 0"),
        ));
    }
    if list.len() > max {
        return Err(ApiError::at(
            Code::TooManyDocuments,
            loc(&["documents"]),
            format!("{} documents is more than the limit of {max}", list.len()),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, d)| match d {
            Value::String(s) => Ok(s.clone()),
            other => refuse_type(
                Code::InvalidDocuments,
                loc(&["documents", &i.to_string()]),
                "a document must be a string",
                other,
            ),
        })
        .collect()
}

/// `top_n`: absent or null returns every result; else an integer of at least 1 (more
/// than the documents returns them all, as Cohere does).
fn top_n(value: Option<&Value>) -> Result<Option<usize>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => whole(v, 1, u64::MAX)
            .map(|n| Some(usize::try_from(n).unwrap_or(usize::MAX)))
            .ok_or_else(|| bad_integer(Code::BadTopN, "top_n", "an integer of at least 1", v)),
    }
}

/// `max_tokens_per_doc`: absent or null is Cohere's 4,096; else an integer from 1 to
/// `max_state_tokens` (no document may be longer than a state may be).
fn max_tokens_per_doc(value: Option<&Value>, limits: &Limits) -> Result<usize, ApiError> {
    let max = limits.max_state_tokens;
    match value {
        None | Some(Value::Null) => Ok(DEFAULT_MAX_TOKENS_PER_DOC.min(max)),
        Some(v) => whole(v, 1, max as u64).map(|n| n as usize).ok_or_else(|| {
            bad_integer(
                Code::BadMaxTokensPerDoc,
                "max_tokens_per_doc",
                &format!("an integer from 1 to {max}"),
                v,
            )
        }),
    }
}

/// What the service cannot honour is refused, not dropped: relevant spans, returning the
/// documents' text (v1 clients' `return_documents`) and `rank_fields`.
fn unsupported_options(body: &Map<String, Value>) -> Result<(), ApiError> {
    let refuse = |field: &str, msg: &str| {
        Err(ApiError::at(
            Code::UnsupportedRerankOption,
            loc(&[field]),
            msg,
        ))
    };
    match body.get("relevant_spans") {
        None | Some(Value::Null) => {}
        Some(Value::Object(spans)) if spans.get("mode") == Some(&json!("disabled")) => {}
        Some(_) => {
            return refuse(
                "relevant_spans",
                "relevant_spans is not supported here; omit it or set mode \"disabled\"",
            )
        }
    }
    match body.get("return_documents") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(_) => {
            return refuse(
                "return_documents",
                "return_documents is not supported: results carry index and relevance_score",
            )
        }
    }
    match body.get("rank_fields") {
        None | Some(Value::Null) => Ok(()),
        Some(_) => refuse(
            "rank_fields",
            "rank_fields is not supported: documents are strings",
        ),
    }
}

/// An integer JSON number from `min` to `max` (`2.0` and `1e3` are not integers).
fn whole(v: &Value, min: u64, max: u64) -> Option<u64> {
    v.as_u64().filter(|n| (min..=max).contains(n))
}

/// `<field> must be <wants>, got <the number as sent | its type>`.
fn bad_integer(code: Code, field: &str, wants: &str, got: &Value) -> ApiError {
    let got = match got {
        Value::Number(n) => n.to_string(),
        other => type_name(other).to_string(),
    };
    ApiError::at(
        code,
        loc(&[field]),
        format!("{field} must be {wants}, got {got}"),
    )
}

/// Cuts every document over `max_tokens_per_doc` with the serving model's counter (its
/// real tokenizer when configured, else the byte estimate); returns their indexes.
fn truncate(call: &mut Call) -> Vec<usize> {
    let (counter, max) = (&call.model.counter, call.max_tokens_per_doc);
    let mut cut = Vec::new();
    for (i, doc) in call.documents.iter_mut().enumerate() {
        if let Some(head) = counter.truncate(doc, max) {
            let len = head.len();
            doc.truncate(len);
            cut.push(i);
        }
    }
    cut
}

/// Validates one batch as a System One request, halving it while it is over the
/// request's token limit; a single document still over it is refused at its index.
fn validate_batch(
    call: &Call,
    docs: &[(usize, &str)],
    models: &Routes,
    limits: &Limits,
    out: &mut Vec<ValidRequest>,
) -> Result<(), ApiError> {
    // A batch the byte estimate puts over the request limit is halved too (smaller batches
    // cost nothing more); a single document is left to the engine's exact count.
    let result = validate(systemone_body(call, docs), models, limits);
    let over = match &result {
        Ok(request) => request
            .recount()
            .is_some_and(|c| c.over == Code::RequestTooLarge),
        Err(e) => e.code == Code::RequestTooLarge,
    };
    if over && docs.len() > 1 {
        let (a, b) = docs.split_at(docs.len() / 2);
        validate_batch(call, a, models, limits, out)?;
        return validate_batch(call, b, models, limits, out);
    }
    out.push(result.map_err(|e| in_rerank_terms(e, docs))?);
    Ok(())
}

/// A token limit the engine refused on an exact count, said in the rerank body's terms:
/// at the document when the call was one batch of one document (a batch the estimate put
/// over the request limit is halved down to one document, but which batch failed is not
/// known when there are several).
fn exact_refusal_in_rerank_terms(e: ApiError, batches: &[ValidRequest]) -> ApiError {
    if !is_token_limit(e.code) {
        return e;
    }
    let docs: Vec<(usize, &str)> = match batches {
        [one] => one
            .questions()
            .iter()
            .filter_map(|q| q.id.parse().ok())
            .map(|i| (i, ""))
            .collect(),
        _ => Vec::new(),
    };
    in_rerank_terms(e, &docs)
}

/// The System One body of one batch: what a caller would post to `/v1/systemone` to get
/// the same answers (docs/api/rerank.md shows it).
fn systemone_body(call: &Call, docs: &[(usize, &str)]) -> Value {
    let question = json!({"type": "noul", "instructions": call.model.rerank_question});
    let mut questions = Map::new();
    let mut history = Map::new();
    for (i, doc) in docs {
        questions.insert(i.to_string(), question.clone());
        history.insert(i.to_string(), Value::String(document_history(doc)));
    }
    json!({
        "model": call.model.name,
        "state": {"query": call.query},
        "questions": questions,
        "history": history,
        "layout": "accuracy",
    })
}

/// `{"document": <doc>}` as the prompt's Python JSON.
fn document_history(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len() + 16);
    out.push_str("{\"document\": ");
    write_python_str(&mut out, doc);
    out.push('}');
    out
}

/// A refusal of the System One request, said in the rerank body's terms: the state is the
/// query, a question or its history is a document (the ids are document indexes).
fn in_rerank_terms(mut e: ApiError, docs: &[(usize, &str)]) -> ApiError {
    match e.loc.first().map(String::as_str) {
        Some("state") => {
            e.loc = loc(&["query"]);
            e.msg = e
                .msg
                .replacen("the state is", "the query (as the state) is", 1);
        }
        Some("questions" | "history") => {
            e.loc = vec![
                "documents".into(),
                e.loc.get(1).cloned().unwrap_or_default(),
            ]
        }
        None if e.code == Code::RequestTooLarge => {
            if let Some((i, _)) = docs.first() {
                e.loc = vec!["documents".into(), i.to_string()];
            }
            e.msg = e
                .msg
                .replacen("the request needs", "reading this document needs", 1);
        }
        _ => {}
    }
    e
}

/// `(index, relevance_score)` of every document, most relevant first (ties: lower index
/// first), cut to `top_n`.
fn ranked(plan: &Plan, all_answers: &[Answers]) -> Vec<(usize, f64)> {
    let mut scores: Vec<(usize, f64)> = plan
        .batches
        .iter()
        .zip(all_answers)
        .flat_map(|(batch, answers)| batch.questions().iter().zip(&answers.answers))
        .map(|(q, a)| {
            // Question ids are the document indexes.
            (q.id.parse().unwrap_or(usize::MAX), a.yes())
        })
        .collect();
    scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scores.truncate(plan.top_n);
    scores
}

/// Cohere's `V2RerankResponse`: `id`, `results`, `meta` (`billed_units.search_units` =
/// one per started 100 documents, `tokens`, `cached_tokens`, and `warnings` when documents
/// were truncated), plus this service's `model` and `usage`, which Cohere's types allow.
fn response_body(id: &RequestId, plan: &Plan, answered: &AnsweredCall) -> Value {
    let usage = answered.usage;
    let results: Vec<Value> = ranked(plan, &answered.answers)
        .into_iter()
        .map(|(index, score)| json!({"index": index, "relevance_score": score}))
        .collect();
    let mut meta = json!({
        "api_version": {"version": "2"},
        "billed_units": {"search_units": plan.documents.div_ceil(DOCUMENTS_PER_SEARCH_UNIT)},
        "tokens": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        "cached_tokens": usage.cached_tokens,
    });
    if !plan.truncated.is_empty() {
        meta["warnings"] = json!([truncation_warning(plan)]);
    }
    json!({
        "id": id.0,
        "results": results,
        "meta": meta,
        "model": answered.model(),
        "usage": serde_json::to_value(wire::UsageWire(usage)).unwrap_or(Value::Null),
    })
}

/// Which documents were cut, by index (never their text).
fn truncation_warning(plan: &Plan) -> String {
    let list: Vec<String> = plan.truncated.iter().map(usize::to_string).collect();
    format!(
        "{} document(s) were truncated to max_tokens_per_doc = {} tokens: indexes {}",
        plan.truncated.len(),
        plan.max_tokens_per_doc,
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_said_in_the_rerank_bodys_terms() {
        let docs = [(7, "d")];
        let state = ApiError::at(
            Code::StateTooLarge,
            loc(&["state"]),
            "the state is about 9 tokens",
        );
        let e = in_rerank_terms(state, &docs);
        assert_eq!(
            (e.loc, e.msg.as_str()),
            (
                loc(&["query"]),
                "the query (as the state) is about 9 tokens"
            )
        );
        let big = ApiError::new(
            Code::RequestTooLarge,
            "the request needs 900 upstream prompt tokens",
        );
        let e = in_rerank_terms(big, &docs);
        assert_eq!(e.loc, loc(&["documents", "7"]));
        assert!(
            e.msg.starts_with("reading this document needs 900"),
            "{}",
            e.msg
        );
        let question = ApiError::at(Code::QuestionTooLarge, loc(&["questions", "7"]), "too long");
        assert_eq!(
            in_rerank_terms(question, &docs).loc,
            loc(&["documents", "7"])
        );
    }

    #[test]
    fn a_document_is_its_python_json_history() {
        assert_eq!(
            document_history("a \"b\"\n é"),
            "{\"document\": \"a \\\"b\\\"\\n é\"}"
        );
    }
}
