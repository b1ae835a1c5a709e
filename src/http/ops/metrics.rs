//! `GET /metrics`: the Prometheus text, with each model's gauges read at scrape time.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::backend::host_report::Strategy;
use crate::http::AppState;
use crate::metrics::{ModelGauges, ReplicaGauges};

/// The metrics, each model's token table, circuit and host read now.
pub(in crate::http) async fn render(State(state): State<AppState>) -> Response {
    for model in state.models.iter() {
        for replica in model.serving.fleet().map_or(&[][..], |f| f.replicas()) {
            let gauges = ReplicaGauges {
                in_flight: replica.in_flight() as i64,
                circuit: replica.circuit.state().as_metric(),
                verdict: replica.verifier.status().verdict.as_metric(),
            };
            state
                .metrics
                .set_replica(&model.name, &replica.label, gauges);
        }
    }
    for model in state.models.iter() {
        for shape in crate::calibration::prior::by_frame(model.prior.report()) {
            state.metrics.set_prior(
                &model.name,
                &shape.shape,
                shape.samples,
                shape.weight,
                &shape.prior,
            );
        }
    }
    let gauges = state.models.iter().map(|model| {
        let status = model.verifier.status();
        ModelGauges {
            name: &model.name,
            verdict: status.verdict.as_metric(),
            last_check: status.last_check,
            circuit: model.circuit.state().as_metric(),
            read_strategy: model
                .serving
                .host_report()
                .map(|h| h.strategy.map_or(h.probe.as_str(), Strategy::as_str)),
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
