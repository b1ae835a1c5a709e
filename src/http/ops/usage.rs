//! `GET /v1/usage?key=NAME&from=YYYY-MM-DD&to=YYYY-MM-DD`: each key's answered requests
//! and what its calls used, per UTC day, from the limit store (the front-door flow records
//! it: `http/flow/usage.rs`).
//!
//! It needs the `usage:own` scope (every key has it unless its `scopes` say otherwise). The
//! admin key (`--admin-key NAME`) and a caller with the `usage:all` scope read every key
//! (all configured keys without `key`; a token caller's `sub-…` or `…@<tag>` name with
//! it); any other caller reads only its own. `from` and `to` default to today (UTC), span
//! at most [`MAX_DAYS`] days, and are inclusive. Each row and the total say how much of
//! them came from batch lines (`batch`, the same five counters).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use serde_json::{json, Value};

use crate::days::{date_of, day_of};
use crate::error::{ApiError, Code};
use crate::http::auth::names::is_token_name;
use crate::http::auth::scope::Scope;
use crate::http::auth::{Caller, ANONYMOUS};
use crate::http::AppState;
use crate::quota::{batch_usage_name, UsageCounts, UsageRow, BATCH_SUFFIX, UNAVAILABLE_RETRY_SECS};

/// Most days one usage query may span.
const MAX_DAYS: u64 = 366;

fn bad(message: String) -> ApiError {
    ApiError::new(Code::BadUsageQuery, message)
}

/// The day of the query parameter `field`, `today` when absent.
fn day_param(query: &HashMap<String, String>, field: &str, today: u64) -> Result<u64, ApiError> {
    match query.get(field) {
        None => Ok(today),
        Some(text) => day_of(text).ok_or_else(|| {
            bad(format!(
                "{field} must be a UTC date written YYYY-MM-DD (1970 or later), got {text:?}"
            ))
        }),
    }
}

/// The keys the caller asked for and may read.
fn keys_to_read(
    state: &AppState,
    caller: &Caller,
    asked: Option<&String>,
) -> Result<Vec<String>, ApiError> {
    let all = if state.keys.is_open() {
        vec![ANONYMOUS.to_string()]
    } else {
        state.keys.names()
    };
    let admin = state.keys.is_open()
        || state.admin_key.as_deref() == Some(caller.name())
        || caller.has(Scope::UsageAll);
    match asked {
        None if admin => Ok(all),
        None => Ok(vec![caller.name().to_string()]),
        Some(name) if !admin && name != caller.name() => Err(ApiError::new(
            Code::UsageForbidden,
            format!(
                "this API key may read only its own usage (key {:?}); the admin key reads every key's",
                caller.name()
            ),
        )),
        Some(name) if all.contains(name) || is_token_name(name) => Ok(vec![name.clone()]),
        Some(name) => Err(bad(format!("key names no configured key, got {name:?}"))),
    }
}

pub(in crate::http) async fn handle(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    if !caller.has(Scope::UsageAll) {
        caller.require(Scope::UsageOwn)?;
    }
    if let Some(unknown) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "key" | "from" | "to"))
    {
        return Err(bad(format!(
            "unknown query parameter {unknown:?}; the parameters are key, from and to"
        )));
    }
    let today = state.quotas.now().day();
    let from = day_param(&query, "from", today)?;
    let to = day_param(&query, "to", today)?;
    if from > to {
        return Err(bad(format!(
            "from ({}) is after to ({})",
            date_of(from),
            date_of(to)
        )));
    }
    if to - from >= MAX_DAYS {
        return Err(bad(format!(
            "from..to spans {} days, more than the limit of {MAX_DAYS}",
            to - from + 1
        )));
    }
    let keys = keys_to_read(&state, &caller, query.get("key"))?;
    let mut names = keys.clone();
    names.extend(keys.iter().map(|k| batch_usage_name(k)));
    let rows = state.quotas.usage(&names, from, to).await.map_err(|_| {
        ApiError::new(
            Code::LimitsUnavailable,
            "usage cannot be read right now: the limit store is unavailable",
        )
        .retry_after(UNAVAILABLE_RETRY_SECS)
    })?;
    Ok(Json(body(&keys, from, to, &rows)))
}

/// The response: the query, one row per key and day with usage, and their total; each with
/// the part of it that came from batch lines (`batch`; a day recorded before batches has
/// none: all online).
fn body(keys: &[String], from: u64, to: u64, rows: &[UsageRow]) -> Value {
    let (batch_rows, key_rows): (Vec<&UsageRow>, Vec<&UsageRow>) =
        rows.iter().partition(|r| r.key.ends_with(BATCH_SUFFIX));
    let batch_of = |row: &UsageRow| {
        batch_rows
            .iter()
            .find(|b| b.day == row.day && b.key.strip_suffix(BATCH_SUFFIX) == Some(&row.key))
            .map(|b| b.counts)
            .unwrap_or_default()
    };
    let (mut total, mut total_batch) = (UsageCounts::default(), UsageCounts::default());
    let listed: Vec<Value> = key_rows
        .iter()
        .map(|row| {
            let batch = batch_of(row);
            total.add(&row.counts);
            total_batch.add(&batch);
            let mut entry = json!({"key": row.key, "date": date_of(row.day)});
            if let (Some(map), Value::Object(counts)) = (entry.as_object_mut(), json!(row.counts)) {
                map.extend(counts);
                map.insert("batch".into(), json!(batch));
            }
            entry
        })
        .collect();
    let mut total = json!(total);
    if let Some(map) = total.as_object_mut() {
        map.insert("batch".into(), json!(total_batch));
    }
    json!({
        "object": "usage",
        "from": date_of(from),
        "to": date_of(to),
        "keys": keys,
        "usage": listed,
        "total": total,
    })
}
