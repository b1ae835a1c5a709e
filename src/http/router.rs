//! The service's routes: the front doors and the key-holders' reads under one cap on
//! requests handled at once, the operations routes beside them, and the request middleware
//! around all.

use axum::extract::Request;
use axum::middleware;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use super::batches::{self, files, jobs};
use super::doors::{self, decisions::Decisions, rerank::Rerank, systemone::SystemOne};
use super::middleware::request_context;
use super::ops::{calibration, health, ledger, metrics, models, usage};
use super::routes::DOORS;
use super::{calibration_page, openapi, playground, AppState};
use crate::error::{ApiError, Code};

/// The service's router. Starts the models' background upkeep when called in a runtime.
pub fn router(state: AppState) -> Router {
    state.models.start_upkeep(state.pipeline.in_flight());
    if let Some(jwt) = state.keys.jwt() {
        jwt.start();
    }
    batches::resume(&state);
    let [systemone, decisions, rerank, rerank_v1] = DOORS;
    let api = Router::new()
        .route(systemone, post(doors::serve::<SystemOne>))
        .route(decisions, post(doors::serve::<Decisions>))
        .route(rerank, post(doors::serve::<Rerank>))
        .route(rerank_v1, post(doors::serve::<Rerank>))
        .route("/v1/files", post(files::upload).get(files::list))
        .route("/v1/files/{id}", get(files::get).delete(files::delete))
        .route("/v1/files/{id}/content", get(files::content))
        .route("/v1/batches", post(jobs::create).get(jobs::list))
        .route("/v1/batches/{id}", get(jobs::get))
        .route("/v1/batches/{id}/cancel", post(jobs::cancel))
        .route("/v1/models", get(models::list))
        .route("/v1/usage", get(usage::handle))
        .route("/v1/ledger/decisions", get(ledger::list))
        .route("/v1/calibration", get(calibration::route::figures))
        .route("/v1/calibration/charts", get(calibration::charts::charts))
        .route("/v1/ledger/decisions/{request_id}", get(ledger::one))
        .route(
            "/v1/ledger/decisions/{request_id}/outcomes",
            post(ledger::add_outcome),
        )
        .layer(shed_over_cap(&state));
    Router::new()
        .merge(api)
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::render))
        .route("/openapi.json", get(openapi::handle))
        .route("/playground", get(playground::page))
        .route("/calibration", get(calibration_page::page))
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

async fn not_found() -> ApiError {
    ApiError::new(Code::NotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(Code::MethodNotAllowed, "method not allowed on this route")
}
