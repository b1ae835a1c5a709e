//! `GET /healthz` (the process answers) and `GET /readyz` (every model can serve).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::calibration::prior::Declined;
use crate::http::AppState;
use crate::models::circuit::CircuitState;
use crate::models::tokens::verify::Verdict;

/// Always 200 while the process serves.
pub(in crate::http) async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

/// 200 only when every model is ready: its backend answered its last health probe (the
/// token-table check, whose concluding counts as an answer; one that could not conclude, by
/// a 429, a timeout or a malformed body, does not) and its token table is verified (or its
/// checks are off), its circuit is not open (half-open, when a probe may go through, counts
/// as ready), and a dialect that probes its host found a way to read it (`host`: what the
/// probe found, or what the host lacks). Answers from memory: the checks run in each
/// model's upkeep task, and a table not yet verified while its first check runs reads
/// `"checking"`. The limit store and the ledger, when unavailable, make it 503 under
/// `fail_closed`; the ledger's line is what its writer last found. With `[jwt]`, `tokens`
/// says how many keys are cached, how old they are and when they were fetched, whether the
/// last fetch failed (`stale`: they still serve) and how many since, and when the
/// background fetch tries next; unready until keys are fetched, and once they expired.
/// `prior` is the position priors' store: whether it last synced and what it set aside as
/// unreadable; and, when a model learns a prior, `declined`: the single reads answered raw
/// because the prior declined, by reason (never a tenant).
pub(in crate::http) async fn readyz(State(state): State<AppState>) -> Response {
    let models: Vec<(bool, serde_json::Value)> =
        state.models.iter().map(|m| model_readiness(m)).collect();
    let mut ready = models.iter().all(|(r, _)| *r);
    // A store that cannot answer makes the service unready only under `fail_closed`.
    let limits = state.quotas.status().await;
    ready &= limits.ready;
    // Likewise the ledger's, from what its writer last found (`null`: off).
    let ledger = state.ledger.status();
    ready &= ledger.as_ref().is_none_or(|l| l.ready);
    // The token keys (`null`: no `[jwt]`): unready once the cached keys expired unrenewed.
    let tokens = state.keys.jwt().map(|j| j.status());
    ready &= tokens.as_ref().is_none_or(|t| t.ready);
    // The position priors' store and declines (`null`: neither): shown, never unready.
    let prior = prior_line(&state);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let models: Vec<serde_json::Value> = models.into_iter().map(|(_, m)| m).collect();
    (
        status,
        Json(serde_json::json!({
            "ready": ready, "models": models, "limits": limits, "ledger": ledger,
            "tokens": tokens, "prior": prior,
        })),
    )
        .into_response()
}

/// The position priors' line (see `PriorStatus`): the store's state (`store: null`
/// without one) and, when any model learns a prior, the reads answered raw by reason;
/// `null` when there is neither.
fn prior_line(state: &AppState) -> serde_json::Value {
    let store = state.models.prior_status();
    let learns = state.models.iter().any(|m| m.prior.settings().enabled);
    let mut line = match store {
        Some(s) => serde_json::to_value(s).unwrap_or_default(),
        None if learns => serde_json::json!({"store": null}),
        None => return serde_json::Value::Null,
    };
    if learns {
        let reasons = Declined::ALL.iter().map(|d| d.as_str());
        line["declined"] = state.metrics.prior_declined_counts(reasons).into();
    }
    line
}

/// One model's line of `/readyz`, and whether it is ready; from memory only.
fn model_readiness(model: &crate::models::Model) -> (bool, serde_json::Value) {
    let status = model.verifier.status();
    let circuit = model.circuit.state();
    let host = model.serving.host_report();
    let replicas = replica_lines(model);
    let ready = match status.verdict {
        Verdict::Verified => status.last_check_concluded == Some(true),
        Verdict::Disabled => true,
        Verdict::Unchecked | Verdict::Mismatch => false,
    } && circuit != CircuitState::Open
        && host.as_ref().is_none_or(|h| h.ready())
        && replicas.as_ref().is_none_or(|(any, _)| *any);
    let token_table = match status.verdict {
        Verdict::Unchecked if status.checking => "checking",
        verdict => verdict.as_str(),
    };
    let last_check = status.last_check.map(|t| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    let line = serde_json::json!({
        "name": model.name,
        "ready": ready,
        "token_table": token_table,
        "backend_answered": status.last_check_concluded,
        "circuit": circuit.as_str(),
        "last_check_unix": last_check,
        "dialect": model.serving.dialect(),
        "host": host,
    });
    let mut line = line;
    if let Some((_, lines)) = replicas {
        line["replicas"] = serde_json::Value::Array(lines);
    }
    (ready, line)
}

/// A fleet's replicas for `/readyz` (from memory), and whether any can serve: each one's
/// `host:port`, whether it is ready, its table's verdict and circuit, and why it is out.
fn replica_lines(model: &crate::models::Model) -> Option<(bool, Vec<serde_json::Value>)> {
    let fleet = model.serving.fleet()?;
    let mut any = false;
    let lines = fleet
        .replicas()
        .iter()
        .map(|r| {
            let (ready, reason) = r.readiness();
            any |= ready;
            serde_json::json!({
                "replica": r.label,
                "ready": ready,
                "token_table": r.verifier.status().verdict.as_str(),
                "circuit": r.circuit.state().as_str(),
                "in_flight": r.in_flight(),
                "reason": reason,
            })
        })
        .collect();
    Some((any, lines))
}
