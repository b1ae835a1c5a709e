//! `GET /v1/models`: every name a caller may send as `model` (aliases included) and the
//! configured models.

use axum::extract::State;
use axum::Json;

use crate::http::auth::Caller;
use crate::http::{wire, AppState};

/// The names and models, for a key-holder.
pub(in crate::http) async fn list(
    State(state): State<AppState>,
    _caller: Caller,
) -> Json<serde_json::Value> {
    let listed: Vec<wire::ListedName<'_>> = state
        .models
        .every_name()
        .into_iter()
        .map(|(name, m)| wire::ListedName {
            name,
            model: &m.name,
            release_date: m.release_date.as_deref(),
        })
        .collect();
    let models: Vec<&str> = state.models.iter().map(|m| m.name.as_str()).collect();
    Json(wire::models_body(&listed, &models))
}
