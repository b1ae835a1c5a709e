//! The ledger's door: `GET /v1/ledger/decisions` (a page of records, newest first),
//! `GET /v1/ledger/decisions/{request_id}` and
//! `POST /v1/ledger/decisions/{request_id}/outcomes` (what was true, or a person's
//! override).
//!
//! Reading needs the `ledger:read` scope, posting an outcome `outcomes:write` (every key
//! has both unless its `scopes` say otherwise). A key reads and annotates its own records; the admin key (`--admin-key`; every caller
//! of an open service) every key's. Another key's record is a 404, as a missing one is.
//! Records hold keyed hashes of question ids and labels: a caller who names them in the
//! query (`question=…`, `label=…`, repeatable) gets them back by name where they match
//! (the service hashes the query), else as hashes only.
//!
//! Every refusal is in the error contract's shape (the body and the code header), as the
//! doors' are: a request id in the path that is not text, a query or body that cannot be
//! read. An outcome body is read as the doors read theirs (`Content-Encoding`, the body
//! memory budget, strict JSON that refuses a repeated key), under a limit of its own;
//! messages name the field and never repeat what the caller sent (a question id, a label,
//! a request id), which a log line or a shared dashboard might show to someone else.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, Code};
use crate::http::auth::scope::Scope;
use crate::http::auth::Caller;
use crate::http::body::read_request;
use crate::http::AppState;
use crate::ledger::key::{Domain, LedgerKey};
use crate::ledger::query::{Filter, NewOutcome, OutcomeError, OutcomeRow};
use crate::ledger::record::{Decision, QuestionRecord};
use crate::ledger::store::{Store, StoreError};
use crate::quota::UNAVAILABLE_RETRY_SECS;

/// Records per page unless `limit` says otherwise, and the most it may say.
const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;
/// Most bytes of records one page holds (as JSON): a page ends at the record that would
/// take it past this, and its `next_cursor` continues after its last record, so records
/// with full inputs never make one answer of hundreds of megabytes. A page always holds
/// its first record, however large.
const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;
/// Longest outcome note, in characters.
const MAX_NOTE_CHARS: usize = 2000;
/// Largest outcome body, decoded: a question id, a label and a note of
/// [`MAX_NOTE_CHARS`] fit many times over even fully `\u`-escaped, and no caller makes
/// the service hold megabytes to record one outcome.
const MAX_OUTCOME_BODY_BYTES: usize = 64 * 1024;
/// The query parameters of the list.
const PARAMETERS: &str = "since, until, model, route, has_outcome, limit, cursor, question, label";

fn bad(message: String) -> ApiError {
    ApiError::new(Code::BadLedgerQuery, message)
}

fn unavailable(state: &AppState, e: StoreError) -> ApiError {
    tracing::warn!(error = %e, "the ledger could not be read");
    state.ledger.read_failed(&e);
    ApiError::new(
        Code::LedgerUnavailable,
        "the decision ledger cannot be read right now",
    )
    .retry_after(UNAVAILABLE_RETRY_SECS)
}

/// The open ledger's store and key, or 404 `system_one_ledger_off`.
pub(in crate::http) fn open(state: &AppState) -> Result<(&Store, &LedgerKey), ApiError> {
    match (state.ledger.store(), state.ledger.key()) {
        (Some(store), Some(key)) => Ok((store, key)),
        _ => Err(ApiError::new(
            Code::LedgerOff,
            "the decision ledger is off (--ledger off)",
        )),
    }
}

/// Whether `caller` reads every key's records.
pub(in crate::http) fn is_admin(state: &AppState, caller: &Caller) -> bool {
    state.keys.is_open() || state.admin_key.as_deref() == Some(caller.name())
}

/// `GET /v1/ledger/decisions`.
pub(in crate::http) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::LedgerRead)?;
    let (store, key) = open(&state)?;
    let (mut filter, names) = parse_query(&pairs(query)?, key)?;
    if !is_admin(&state, &caller) {
        filter.key = Some(caller.name().to_owned());
    }
    let page = store
        .decisions(&filter)
        .await
        .map_err(|e| unavailable(&state, e))?;
    let ids: Vec<&str> = page.iter().map(|d| d.request_id.as_str()).collect();
    let outcomes = store
        .outcomes(&ids)
        .await
        .map_err(|e| unavailable(&state, e))?;
    let decisions = within_page_bytes(page.iter().map(|d| render(d, &outcomes, &names)));
    let full = decisions.len() == filter.limit as usize || decisions.len() < page.len();
    let next = full
        .then(|| page.get(decisions.len().wrapping_sub(1)))
        .flatten()
        .map(|d| format!("{}.{}", d.at_ms, d.request_id));
    Ok(Json(
        json!({"object": "list", "decisions": decisions, "next_cursor": next}),
    ))
}

/// The rendered records, in order, up to the first that would take the page past
/// [`MAX_PAGE_BYTES`] (the first always kept).
fn within_page_bytes(rendered: impl Iterator<Item = Value>) -> Vec<Value> {
    let mut bytes = 0usize;
    let mut kept = Vec::new();
    for record in rendered {
        bytes = bytes.saturating_add(json_bytes(&record));
        if bytes > MAX_PAGE_BYTES && !kept.is_empty() {
            break;
        }
        kept.push(record);
    }
    kept
}

/// The length of `value` as JSON, counted without writing it anywhere.
fn json_bytes(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).map_or(usize::MAX, |()| counter.0)
}

/// `GET /v1/ledger/decisions/{request_id}`.
pub(in crate::http) async fn one(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::LedgerRead)?;
    let request_id = path_id(path)?;
    let (store, key) = open(&state)?;
    let (_, names) = parse_query(&pairs(query)?, key)?;
    let decision = own_decision(&state, &caller, store, &request_id).await?;
    let outcomes = store
        .outcomes(&[&request_id])
        .await
        .map_err(|e| unavailable(&state, e))?;
    Ok(Json(render(&decision, &outcomes, &names)))
}

/// The request id in the path; one that is not UTF-8 text (or not there) names no record.
fn path_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(id)| id).map_err(|_| {
        ApiError::new(
            Code::DecisionNotFound,
            "the request id in the path is not UTF-8 text, so no decision has it",
        )
    })
}

/// The query's pairs; a query that cannot be read is refused in the contract's shape.
fn pairs(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Vec<(String, String)>, ApiError> {
    query
        .map(|Query(pairs)| pairs)
        .map_err(|_| bad("the query string could not be read as name=value pairs".into()))
}

/// The record `request_id` if `caller` may see it, else 404 (whether missing or another
/// key's: the answer does not tell which).
async fn own_decision(
    state: &AppState,
    caller: &Caller,
    store: &Store,
    request_id: &str,
) -> Result<Decision, ApiError> {
    let found = store
        .decision(request_id)
        .await
        .map_err(|e| unavailable(state, e))?;
    found
        .filter(|d| is_admin(state, caller) || d.key == caller.name())
        .ok_or_else(|| {
            ApiError::new(
                Code::DecisionNotFound,
                "no decision with this request id is on record for this API key",
            )
        })
}

/// Names the caller gave: hash → name, for question ids and labels.
#[derive(Debug, Default)]
struct Names {
    questions: HashMap<String, String>,
    labels: HashMap<String, String>,
}

/// The list's filter and the names to show, from its query.
fn parse_query(pairs: &[(String, String)], key: &LedgerKey) -> Result<(Filter, Names), ApiError> {
    let mut filter = Filter {
        limit: DEFAULT_LIMIT,
        ..Filter::default()
    };
    let mut names = Names::default();
    for (name, value) in pairs {
        match name.as_str() {
            "since" => filter.since_ms = Some(instant_ms(name, value)?),
            "until" => filter.until_ms = Some(instant_ms(name, value)?),
            "model" => filter.model = Some(value.clone()),
            "route" => filter.route = Some(value.clone()),
            "has_outcome" => filter.has_outcome = Some(boolean(name, value)?),
            "limit" => filter.limit = limit(value)?,
            "cursor" => filter.after = Some(cursor(value)?),
            "question" => {
                names
                    .questions
                    .insert(key.hash(Domain::Name, value), value.clone());
            }
            "label" => {
                names
                    .labels
                    .insert(key.hash(Domain::Label, value), value.clone());
            }
            _ => {
                return Err(bad(format!(
                    "the query has an unknown parameter; the parameters are {PARAMETERS}"
                )))
            }
        }
    }
    Ok((filter, names))
}

/// Unix milliseconds, or the start (UTC) of a `YYYY-MM-DD` day.
fn instant_ms(field: &str, text: &str) -> Result<i64, ApiError> {
    crate::days::instant_ms(text).ok_or_else(|| {
        bad(format!(
            "{field} must be Unix milliseconds or a UTC date YYYY-MM-DD"
        ))
    })
}

fn boolean(field: &str, text: &str) -> Result<bool, ApiError> {
    text.parse()
        .map_err(|_| bad(format!("{field} must be true or false")))
}

fn limit(text: &str) -> Result<u32, ApiError> {
    text.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| bad(format!("limit must be an integer from 1 to {MAX_LIMIT}")))
}

/// A `next_cursor`: `<at_ms>.<request_id>`.
fn cursor(text: &str) -> Result<(i64, String), ApiError> {
    text.split_once('.')
        .and_then(|(at, id)| Some((at.parse().ok()?, id.to_owned())))
        .ok_or_else(|| bad("cursor must be a next_cursor this service gave".into()))
}

/// A record as the door shows it: names where the caller gave them, each question's
/// outcomes (current and replaced).
fn render(d: &Decision, outcomes: &[OutcomeRow], names: &Names) -> Value {
    let questions: Vec<Value> = d
        .questions
        .iter()
        .map(|q| {
            let mine: Vec<&OutcomeRow> = outcomes
                .iter()
                .filter(|o| o.request_id == d.request_id && o.question == q.name)
                .collect();
            render_question(q, &mine, names)
        })
        .collect();
    let mut body = json!({
        "request_id": d.request_id,
        "at_ms": d.at_ms,
        "key": d.key,
        "route": d.route,
        "status": d.status,
        "code": d.code,
        "model": d.model,
        "latency_ms": d.latency_ms,
        "usage": d.usage,
        "body_hash": d.body_hash,
        "hash_key_id": d.hash_key_id,
        "images": d.images,
        "questions": questions,
    });
    if let (Some(map), Some(inputs)) = (body.as_object_mut(), &d.inputs) {
        map.insert("inputs".into(), inputs.clone());
    }
    body
}

fn render_question(q: &QuestionRecord, outcomes: &[&OutcomeRow], names: &Names) -> Value {
    let label = |hash: &String| names.labels.get(hash).cloned();
    let mut out = Map::new();
    out.insert("name".into(), json!(names.questions.get(&q.name)));
    out.insert("name_hash".into(), json!(q.name));
    out.insert("type".into(), json!(q.kind));
    out.insert("options".into(), json!(q.options));
    out.insert("answer".into(), json!(q.answer));
    if !q.labels.is_empty() {
        out.insert(
            "answer_label".into(),
            json!(q.labels.get(q.answer).and_then(label)),
        );
        out.insert(
            "labels".into(),
            json!(q.labels.iter().map(label).collect::<Vec<_>>()),
        );
        out.insert("label_hashes".into(), json!(q.labels));
    }
    out.insert("probabilities".into(), json!(q.probabilities));
    out.insert("confidence".into(), json!(q.confidence));
    out.insert("temperature".into(), json!(q.temperature));
    out.insert("option_mass".into(), json!(q.option_mass));
    out.insert("model".into(), json!(q.model));
    let current = outcomes.iter().find(|o| o.replaced_at_ms.is_none());
    out.insert("outcome".into(), json!(current.map(|o| o.outcome)));
    out.insert("outcomes".into(), json!(outcomes));
    Value::Object(out)
}

/// `POST /v1/ledger/decisions/{request_id}/outcomes`.
pub(in crate::http) async fn add_outcome(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    caller.require(Scope::OutcomesWrite)?;
    let request_id = path_id(path)?;
    let (store, key) = open(&state)?;
    let asked = read_outcome(&state, &headers, body).await?;
    let decision = own_decision(&state, &caller, store, &request_id).await?;
    let question_hash = key.hash(Domain::Name, &asked.question);
    let question = decision
        .questions
        .iter()
        .find(|q| q.name == question_hash)
        .ok_or_else(|| {
            ApiError::new(
                Code::BadOutcome,
                "question is not the id of a question of this decision",
            )
        })?;
    let index = option_index(key, question, &asked)?;
    let at_ms = crate::ledger::now_ms();
    let new = NewOutcome {
        request_id: &request_id,
        question: &question_hash,
        outcome: index,
        note: asked.note.as_deref(),
        key: caller.name(),
        at_ms,
    };
    match store.add_outcome(&new, asked.replace).await {
        Ok(replaced) => {
            if let Some(watch) = state.ledger.watch() {
                crate::ledger::watch::outcome(watch, &decision, question, index, replaced);
            }
        }
        Err(OutcomeError::Exists) => {
            return Err(ApiError::new(
                Code::OutcomeExists,
                "this question of this decision already has an outcome; send \"replace\": true to replace it (the old one is kept as history)",
            ))
        }
        Err(OutcomeError::Store(e)) => return Err(unavailable(&state, e)),
    }
    let answer = json!({
        "request_id": request_id,
        "question": asked.question,
        "outcome": asked.outcome,
        "index": index,
        "note": asked.note,
        "key": caller.name(),
        "at_ms": at_ms,
        "replace": asked.replace,
    });
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// The outcome body, read as a door reads its body (encoding, budget, strict JSON). A
/// multipart body's image parts have no place in an outcome.
async fn read_outcome(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<OutcomeBody, ApiError> {
    let body = read_request(headers, body, MAX_OUTCOME_BODY_BYTES, &state.body_budget).await?;
    if !body.parts.is_empty() {
        return Err(ApiError::new(
            Code::BadOutcome,
            "an outcome body has no parts but \"request\"",
        ));
    }
    OutcomeBody::from_json(body.json)
}

/// The outcome body: `{"question", "outcome", "note"?, "replace"?}`.
#[derive(Debug)]
struct OutcomeBody {
    question: String,
    outcome: Value,
    note: Option<String>,
    replace: bool,
}

impl OutcomeBody {
    fn from_json(value: Value) -> Result<Self, ApiError> {
        let invalid = |m: String| ApiError::new(Code::BadOutcome, m);
        let Value::Object(map) = value else {
            return Err(invalid(
                "the body must be an object {\"question\", \"outcome\", \"note\"?, \"replace\"?}"
                    .into(),
            ));
        };
        if map
            .keys()
            .any(|k| !matches!(k.as_str(), "question" | "outcome" | "note" | "replace"))
        {
            return Err(invalid(
                "the body has an unknown field; the fields are question, outcome, note and replace"
                    .into(),
            ));
        }
        let question = match map.get("question") {
            Some(Value::String(q)) => q.clone(),
            _ => {
                return Err(invalid(
                    "question is required: the question's id as sent".into(),
                ))
            }
        };
        let outcome = map.get("outcome").cloned().ok_or_else(|| invalid("outcome is required: a label (choice), true or false (noul), or a level index (score)".into()))?;
        let note = match map.get("note") {
            None | Some(Value::Null) => None,
            Some(Value::String(n)) if n.chars().count() <= MAX_NOTE_CHARS => Some(n.clone()),
            Some(Value::String(n)) => {
                return Err(invalid(format!(
                    "note is {} characters, more than the limit of {MAX_NOTE_CHARS}",
                    n.chars().count()
                )))
            }
            Some(_) => return Err(invalid("note must be a string".into())),
        };
        let replace = match map.get("replace") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid("replace must be true or false".into())),
        };
        Ok(OutcomeBody {
            question,
            outcome,
            note,
            replace,
        })
    }
}

/// The option index the outcome names: a choice's label, a noul's `true`/`false`, a
/// score's level index.
fn option_index(
    key: &LedgerKey,
    q: &QuestionRecord,
    asked: &OutcomeBody,
) -> Result<usize, ApiError> {
    let index = match (q.kind.as_str(), &asked.outcome) {
        ("choice", Value::String(label)) => {
            let hash = key.hash(Domain::Label, label);
            q.labels.iter().position(|l| *l == hash)
        }
        ("noul", Value::Bool(yes)) => Some(usize::from(*yes)),
        ("score", Value::Number(n)) => n.as_u64().map(|n| n as usize).filter(|n| *n < q.options),
        _ => None,
    };
    index.ok_or_else(|| {
        let expected = match q.kind.as_str() {
            "choice" => "one of its labels".to_string(),
            "noul" => "true or false".to_string(),
            _ => format!("a level index from 0 to {}", q.options.saturating_sub(1)),
        };
        ApiError::new(
            Code::BadOutcome,
            format!(
                "outcome is not an outcome of this {} question: expected {expected}",
                q.kind
            ),
        )
    })
}
