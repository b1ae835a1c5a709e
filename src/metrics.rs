//! Metrics: names in one place, one prefix (`systemone_`), bounded label values (route,
//! status, error code, model). Exposed at `/metrics` in Prometheus text format. Gauges that
//! mirror state (token-table verdicts, slots in use) are read when scraped.

use prometheus::{
    Encoder, GaugeVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::limits::InFlight;
use crate::models::Models;

/// Every metric the service exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Holds every metric below.
    registry: Registry,
    /// Requests by route, status and error code.
    pub requests: IntCounterVec,
    /// Token-table verdict per model: 1 verified, 0 unchecked, -1 mismatch, 2 checks off.
    token_table_verdict: IntGaugeVec,
    /// Unix time of the last finished token-table check per model.
    token_table_last_check: GaugeVec,
    /// Upstream requests in flight now.
    upstream_in_flight: IntGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new_custom(Some("systemone".into()), None).unwrap_or_default();
        let requests = IntCounterVec::new(
            Opts::new(
                "requests_total",
                "HTTP requests by route, status and error code",
            ),
            &["route", "status", "code"],
        )
        .expect("valid metric");
        let token_table_verdict = IntGaugeVec::new(
            Opts::new(
                "token_table_verdict",
                "Token table vs serving tokenizer: 1 verified, 0 unchecked, -1 mismatch (model disabled), 2 checks off",
            ),
            &["model"],
        )
        .expect("valid metric");
        let token_table_last_check = GaugeVec::new(
            Opts::new(
                "token_table_last_check_timestamp_seconds",
                "Unix time the last token-table check finished",
            ),
            &["model"],
        )
        .expect("valid metric");
        let upstream_in_flight = IntGauge::new("upstream_in_flight", "Upstream requests in flight")
            .expect("valid metric");
        for m in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(token_table_verdict.clone()),
            Box::new(token_table_last_check.clone()),
            Box::new(upstream_in_flight.clone()),
        ] {
            registry.register(m).expect("metric names are unique");
        }
        Metrics {
            registry,
            requests,
            token_table_verdict,
            token_table_last_check,
            upstream_in_flight,
        }
    }

    /// Counts one finished request.
    pub fn count_request(&self, route: &str, status: u16, code: &str) {
        self.requests
            .with_label_values(&[route, &status.to_string(), code])
            .inc();
    }

    /// The text exposition, with state-mirroring gauges refreshed first.
    pub fn render(&self, models: &Models, in_flight: &InFlight) -> String {
        for model in models.iter() {
            let status = model.verifier.status();
            self.token_table_verdict
                .with_label_values(&[&model.name])
                .set(status.verdict.as_metric());
            if let Some(t) = status.last_check {
                let secs = t
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                self.token_table_last_check
                    .with_label_values(&[&model.name])
                    .set(secs);
            }
        }
        self.upstream_in_flight.set(in_flight.in_use() as i64);
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}
