//! The HTTP surface: routes, the request-id middleware, body extraction and handlers (one
//! file or folder per front door: `systemone.rs`, `decisions/`, `rerank.rs`; the browser
//! page that calls them: `playground/`).
//! A door only translates: its body → [`crate::request::validate()`] → `flow::run` (the one
//! front-door flow: circuit, quotas, pipeline, refunds, usage, metrics, the ledger) → its client's
//! shape; every error goes out through [`crate::error::ApiError`].

pub mod auth;
mod blocking;
mod body;
pub mod budget;
mod decisions;
pub mod edge;
mod escalate;
mod flow;
mod ledger;
pub mod openapi;
mod playground;
mod record;
mod rerank;
pub mod state;
mod summary;
mod systemone;
mod usage;
mod wire;

pub use state::AppState;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tracing::Instrument;

use crate::error::{ApiError, Code};
use crate::metrics::ModelGauges;
use crate::models::circuit::CircuitState;
use crate::models::tokens::verify::Verdict;
use auth::{AuthError, Caller};
use summary::Summary;

/// The request id every response carries (`req_<32 hex>`).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl RequestId {
    /// A fresh id: a UUIDv7 (RFC 9562), whose first 48 bits are the Unix time in ms and the
    /// rest random, so ids made later sort later. The ledger's primary key is the request
    /// id: in time order, a batch of records adds to one end of its index instead of
    /// touching a random page of it per record, which SQLite writes whole into its WAL.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        RequestId(format!("req_{}", uuid::Uuid::now_v7().simple()))
    }
}

/// `x-typesafe-request-id`, which the Python SDK reads.
pub static TYPESAFE_REQUEST_ID: HeaderName = HeaderName::from_static("x-typesafe-request-id");
/// `x-request-id`, the same value for everything else.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The service's router. Starts the models' background upkeep when called in a runtime.
pub fn router(state: AppState) -> Router {
    state.models.start_upkeep(state.pipeline.in_flight());
    let api = Router::new()
        .route("/v1/systemone", post(systemone::handle))
        .route("/v1/decisions", post(decisions::handle))
        .route("/v2/rerank", post(rerank::handle))
        .route("/v1/rerank", post(rerank::handle))
        .route("/v1/models", get(list_models))
        .route("/v1/usage", get(usage::handle))
        .route("/v1/ledger/decisions", get(ledger::list))
        .route("/v1/ledger/decisions/{request_id}", get(ledger::one))
        .route(
            "/v1/ledger/decisions/{request_id}/outcomes",
            post(ledger::add_outcome),
        )
        .layer(shed_over_cap(&state));
    Router::new()
        .merge(api)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi::handle))
        .route("/playground", get(playground::page))
        .route("/", get(playground::root))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            request_context,
        ))
        .with_state(state)
}

/// The cap on API requests being handled at once (`--max-concurrent-requests`): beyond
/// it a request is answered 503 `system_one_overloaded` with `Retry-After` at once, rather
/// than queued without bound. One tower semaphore for all the API routes, with load
/// shedding; a request holds its place until its response is made.
fn shed_over_cap(
    state: &AppState,
) -> impl tower::Layer<
    axum::routing::Route,
    Service = impl tower::Service<
        Request,
        Response = Response,
        Error = std::convert::Infallible,
        Future = impl Send + 'static,
    > + Clone
                  + Send
                  + Sync
                  + 'static,
> + Clone
       + Send
       + Sync
       + 'static {
    let max = state.edge.max_concurrent_requests;
    let metrics = state.metrics.clone();
    tower::ServiceBuilder::new()
        .layer(axum::error_handling::HandleErrorLayer::new(
            move |_: tower::BoxError| {
                metrics.count_request_shed();
                std::future::ready(
                    ApiError::new(
                        Code::Overloaded,
                        format!("the service is handling its limit of {max} requests; retry later"),
                    )
                    .retry_after(1),
                )
            },
        ))
        .load_shed()
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(max))
}

/// Gives each request an id, a tracing span and one summary log line; puts the id on the
/// response. The log names the route and outcome only, never the caller's content.
async fn request_context(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let RequestId(id) = RequestId::new();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    request.extensions_mut().insert(RequestId(id.clone()));
    let span = tracing::info_span!("request", request_id = %id);
    let summary = Arc::new(Summary::for_request(&id, &route));
    let started = Instant::now();
    let mut abandoned = Abandoned {
        state: &state,
        route: &route,
        started,
        span: &span,
        summary: &summary,
    };
    let mut response = summary
        .scope(next.run(request))
        .instrument(span.clone())
        .await;
    let code = response.extensions().get::<Code>().copied();
    record::refused(&state, &summary, response.status().as_u16(), code).await;
    abandoned.disarm();
    let code = response.extensions().get::<Code>().map(|c| c.as_str());
    let latency = started.elapsed();
    state.metrics.count_request(
        &route,
        response.status().as_u16(),
        code.unwrap_or(""),
        latency,
    );
    let status = response.status().as_u16();
    let fields = summary.fields();
    span.in_scope(|| {
        let code = code.unwrap_or("");
        log_summary(Ending::Finished, &route, status, code, latency, &fields)
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        let headers = response.headers_mut();
        headers.insert(TYPESAFE_REQUEST_ID.clone(), value.clone());
        headers.insert(REQUEST_ID.clone(), value);
    }
    response
}

/// How a request ended, as its summary line says.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Finished,
    Abandoned,
}

/// The one summary line of a request (inside its span, which names its id): route,
/// outcome, latency and what the handler noted ([`summary`]); never the caller's content.
fn log_summary(
    ending: Ending,
    route: &str,
    status: u16,
    code: &str,
    latency: std::time::Duration,
    fields: &summary::Fields,
) {
    let message = match ending {
        Ending::Finished => "request finished",
        Ending::Abandoned => "request abandoned by the client",
    };
    tracing::info!(
        route,
        key = fields.key.as_deref(),
        model = fields.model.as_deref(),
        questions = fields.questions,
        upstream_requests = fields.upstream_requests,
        status,
        error_code = code,
        latency_ms = latency.as_secs_f64() * 1e3,
        "{message}"
    );
}

/// The status a request the client abandoned is counted with (nginx's "client closed
/// request"); it is never sent, there being no one to send it to.
const CLIENT_CLOSED_STATUS: u16 = 499;

/// While armed, counts and logs the request as abandoned when dropped: hyper drops a
/// request's handler when its client closes the connection before the response is made.
struct Abandoned<'a> {
    state: &'a AppState,
    route: &'a str,
    started: Instant,
    span: &'a tracing::Span,
    summary: &'a Summary,
}

impl Abandoned<'_> {
    /// The response was made: nothing to count here.
    fn disarm(&mut self) {
        self.route = "";
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.route.is_empty() {
            return;
        }
        let elapsed = self.started.elapsed();
        self.state.metrics.count_request(
            self.route,
            CLIENT_CLOSED_STATUS,
            "client_closed",
            elapsed,
        );
        let fields = self.summary.fields();
        self.span.in_scope(|| {
            log_summary(
                Ending::Abandoned,
                self.route,
                CLIENT_CLOSED_STATUS,
                "client_closed",
                elapsed,
                &fields,
            )
        });
    }
}

/// The caller of a `/v1` route: authenticated by its bearer and counted against its key's
/// requests per minute, before the body is read. The key's name (never the key) goes into
/// the request's summary line and the per-key metrics.
impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = state
            .keys
            .authenticate(parts.headers.get(axum::http::header::AUTHORIZATION))?;
        summary::note_key(caller.name());
        state.metrics.count_key_request(caller.name());
        caller
            .check_request(&state.quotas)
            .await
            .inspect_err(|e| count_rejection(state, &caller, e))?;
        Ok(caller)
    }
}

fn count_rejection(state: &AppState, caller: &Caller, e: &AuthError) {
    if let Some(kind) = e.limit_kind() {
        state.metrics.count_rejection(caller.name(), kind.as_str());
    }
}

async fn list_models(State(state): State<AppState>, _caller: Caller) -> Json<serde_json::Value> {
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

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

/// 200 only when every model is ready: its backend answered its last health probe (the
/// token-table check, whose concluding counts as an answer; one that could not conclude, by
/// a 429, a timeout or a malformed body, does not) and its token table is verified (or its
/// checks are off), its circuit is not open (half-open, when a probe may go through, counts
/// as ready), and a dialect that probes its host found a way to read it (`host`: what the
/// probe found, or what the host lacks). Answers from memory: the checks run in each
/// model's upkeep task, and a table not yet verified while its first check runs reads
/// `"checking"`.
async fn readyz(State(state): State<AppState>) -> Response {
    let models: Vec<(bool, serde_json::Value)> =
        state.models.iter().map(|m| model_readiness(m)).collect();
    let mut ready = models.iter().all(|(r, _)| *r);
    // A store that cannot answer makes the service unready only under `fail_closed`.
    let limits = state.quotas.status().await;
    ready &= limits.ready;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let models: Vec<serde_json::Value> = models.into_iter().map(|(_, m)| m).collect();
    (
        status,
        Json(serde_json::json!({"ready": ready, "models": models, "limits": limits})),
    )
        .into_response()
}

/// One model's line of `/readyz`, and whether it is ready; from memory only.
fn model_readiness(model: &crate::models::Model) -> (bool, serde_json::Value) {
    let status = model.verifier.status();
    let circuit = model.circuit.state();
    let host = model.backend.host_report();
    let ready = match status.verdict {
        Verdict::Verified => status.last_check_concluded == Some(true),
        Verdict::Disabled => true,
        Verdict::Unchecked | Verdict::Mismatch => false,
    } && circuit != CircuitState::Open
        && host.as_ref().is_none_or(|h| h.ready());
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
        "dialect": model.backend.dialect(),
        "host": host,
    });
    (ready, line)
}

async fn metrics(State(state): State<AppState>) -> Response {
    let gauges = state.models.iter().map(|model| {
        let status = model.verifier.status();
        ModelGauges {
            name: &model.name,
            verdict: status.verdict.as_metric(),
            last_check: status.last_check,
            circuit: model.circuit.state().as_metric(),
            read_strategy: model
                .backend
                .host_report()
                .map(|h| h.strategy.unwrap_or(h.probe)),
        }
    });
    if state.quotas.store_kind() != "memory" {
        state
            .metrics
            .set_limit_store_up(state.quotas.store_kind(), state.quotas.connected());
    }
    let body = state
        .metrics
        .render(gauges, state.pipeline.in_flight().in_use());
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        body,
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(Code::NotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(Code::MethodNotAllowed, "method not allowed on this route")
}
