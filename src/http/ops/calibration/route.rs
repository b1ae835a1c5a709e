//! `GET /v1/calibration`: the calibration watch's figures per model and question shape
//! over the hours, days or weeks kept, from memory (never a scan of the ledger). A key sees
//! the figures of its own answers, the admin key (every caller of an open service) every
//! key's, merged. No figure holds caller text: shapes are model names, types, option
//! counts, layouts and classes.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde_json::{json, Value};

use crate::calibration::watch::{self, Class, Span, Watch};
use crate::error::{ApiError, Code};
use crate::http::auth::scope::Scope;
use crate::http::auth::Caller;
use crate::http::ops::ledger::{is_admin, open};
use crate::http::AppState;

/// The query parameters.
const PARAMETERS: &str = "model, type, options, layout, class, window";

fn bad(message: String) -> ApiError {
    ApiError::new(Code::BadLedgerQuery, message)
}

/// `GET /v1/calibration`.
pub(in crate::http) async fn figures(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let (watch, asked, span) = asked(&state, &caller, query)?;
    let shapes = watch.figures(&asked, span, crate::ledger::now_ms());
    Ok(Json(json!({
        "object": "calibration",
        "window": span.as_str(),
        "reference": watch.reference(),
        "shapes": shapes,
    })))
}

/// The watch, and what `caller` asks of it: the query's shapes (only its own answers' unless
/// it reads every key's) and span.
pub(in crate::http) fn asked<'s>(
    state: &'s AppState,
    caller: &Caller,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<(&'s Watch, watch::Query, Span), ApiError> {
    caller.require(Scope::LedgerRead)?;
    open(state)?;
    let Some(watch) = state.ledger.watch() else {
        return Err(ApiError::new(
            Code::LedgerOff,
            "the calibration watch is off (--ledger off or --no-calibration-watch)",
        ));
    };
    let pairs = query
        .map(|Query(p)| p)
        .map_err(|_| bad("the query string could not be read as name=value pairs".into()))?;
    let (mut asked, span) = parse(&pairs)?;
    if !is_admin(state, caller) {
        asked.key = Some(caller.name().to_owned());
    }
    Ok((watch.as_ref(), asked, span))
}

/// The shapes and the span the query asks for.
fn parse(pairs: &[(String, String)]) -> Result<(watch::Query, Span), ApiError> {
    let mut asked = watch::Query::default();
    let mut span = Span::Day;
    for (name, value) in pairs {
        match name.as_str() {
            "model" => asked.model = Some(value.clone()),
            "type" => asked.kind = Some(value.clone()),
            "layout" => asked.layout = Some(value.clone()),
            "options" => {
                asked.options =
                    Some(value.parse().map_err(|_| {
                        bad("options must be an option count (a whole number)".into())
                    })?)
            }
            "class" => {
                asked.class = Some(
                    Class::parse(value)
                        .ok_or_else(|| bad("class must be raw, prior or profile".into()))?,
                )
            }
            "window" => {
                span = Span::ALL
                    .into_iter()
                    .find(|s| s.as_str() == value)
                    .ok_or_else(|| bad("window must be hour, day or week".into()))?
            }
            _ => {
                return Err(bad(format!(
                    "the query has an unknown parameter; the parameters are {PARAMETERS}"
                )))
            }
        }
    }
    Ok((asked, span))
}
