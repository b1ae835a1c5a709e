//! Metrics: names in one place, one prefix (`systemone_`), bounded label values (route,
//! status, error code, model, API key name, backend dialect, upstream status class, limit
//! kind): every value comes from the configuration or a fixed set, never from a caller.
//! Exposed at `/metrics` in Prometheus text format. Gauges that mirror state (token-table
//! verdicts, slots in use, circuit states) are read when scraped.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Every metric the service exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Holds every metric below.
    registry: Registry,
    /// Every metric as registered, even those with no series yet (which a scrape omits).
    catalogue: Arc<[MetricInfo]>,
    /// Requests by route, status and error code.
    pub requests: IntCounterVec,
    /// Seconds from a request's arrival to its response, by route and status class: what an
    /// SLO or a p99 chart is drawn from.
    request_duration: HistogramVec,
    /// Token-table verdict per model: 1 verified, 0 unchecked, -1 mismatch, 2 checks off.
    token_table_verdict: IntGaugeVec,
    /// Unix time of the last finished token-table check per model.
    token_table_last_check: GaugeVec,
    /// Upstream requests in flight now.
    upstream_in_flight: IntGauge,
    /// Questions per validated request.
    questions_per_request: Histogram,
    /// Options per question of validated requests.
    options_per_question: Histogram,
    /// `option_mass` of each answer the model was asked for, by model.
    option_mass: HistogramVec,
    /// Seconds one upstream read took (slot wait excluded), by dialect.
    upstream_latency: HistogramVec,
    /// Upstream reads by dialect and status class (`2xx`, `4xx`, `5xx`, `timeout`,
    /// `unreachable`, `protocol`).
    upstream_responses: IntCounterVec,
    /// Requests refused by a key's limits, by key name and kind (`requests`, `questions`,
    /// `daily`).
    key_rejections: IntCounterVec,
    /// Requests that passed authentication, by key name (`anonymous` when open).
    key_requests: IntCounterVec,
    /// Circuit state per model: 0 closed, 1 open, 2 half-open.
    circuit_state: IntGaugeVec,
    /// Reads per replica of a model with several, by status class.
    replica_reads: IntCounterVec,
    /// Reads per replica that failed (any status class but `2xx`).
    replica_errors: IntCounterVec,
    /// Requests reading from each replica now.
    replica_in_flight: IntGaugeVec,
    /// Circuit state per replica: 0 closed, 1 open, 2 half-open.
    replica_circuit_state: IntGaugeVec,
    /// Token-table verdict per replica: 1 verified, 0 unchecked, -1 mismatch (out), 2 off.
    replica_token_table_verdict: IntGaugeVec,
    /// 1 for the read strategy a probing dialect (`openai`) chose per model, 0 for the others.
    read_strategy: IntGaugeVec,
    /// Answers a calibration profile covered, by profile name (operator-configured) and
    /// whether they were flagged for automation.
    profile_answers: IntCounterVec,
    /// Seconds one limit-store call took, by store (`memory`, `embedded`, `redis`) and
    /// operation.
    limit_store_latency: HistogramVec,
    /// Limit-store calls that failed, by store, operation and kind (`timeout`,
    /// `unavailable`, `error`, or `skipped`: not sent, backing off after a failure).
    limit_store_errors: IntCounterVec,
    /// What the failure policy decided for a failed call, by store and decision
    /// (`fail_open`, `fail_closed`).
    limit_store_decisions: IntCounterVec,
    /// 1 when the limit store answered its last call, else 0.
    limit_store_up: IntGaugeVec,
    /// Ledger records by store and result (`committed`, or the policy that applied to a
    /// miss: `fail_open`, `fail_closed`).
    ledger_records: IntCounterVec,
    ledger_missed_waits: IntCounterVec,
    /// Seconds one ledger transaction (a batch of records) took to commit, by store.
    ledger_commit: HistogramVec,
    /// Records per ledger transaction (group commit), by store.
    ledger_batch_rows: HistogramVec,
    /// Answered questions with a recorded outcome, per model (newest records, background).
    ledger_outcomes: IntGaugeVec,
    /// Their accuracy (the answer was the outcome), per model.
    ledger_accuracy: GaugeVec,
    /// Their mean Brier score, per model.
    ledger_brier: GaugeVec,
    /// The calibration watch's figures per model, shape, class and window, one family per
    /// figure in [`CALIBRATION_FIGURES`]' order.
    calibration: Vec<GaugeVec>,
    /// Client connections open now (the edge's own count).
    open_connections: IntGauge,
    /// Connections the edge refused or closed, by rule (`connection_cap`,
    /// `header_timeout`, `idle_timeout`, `bad_request_head`, `headers_too_large`).
    connections_closed: IntCounterVec,
    /// Requests refused over the concurrent-request cap (503 `system_one_overloaded`).
    requests_shed: prometheus::IntCounter,
    /// Escalations when unsure, by the model that answered first, the model asked again
    /// (both configured names) and outcome (`answered`, `failed`).
    escalations: IntCounterVec,
    /// Answers replaced by an escalation, by the same model pair.
    escalated_answers: IntCounterVec,
    /// Batch lines finished, by endpoint and outcome (`answered`, `refused`).
    batch_lines: IntCounterVec,
    /// Batches that reached each status.
    batches: IntCounterVec,
    /// Questions the position prior learned from, per model and shape.
    prior_samples: IntGaugeVec,
    /// The position prior (log space), per model, shape and position.
    prior: GaugeVec,
    /// The weight single reads get (0: declined or not learned yet), per model and shape.
    prior_weight: GaugeVec,
    /// Exchanges of the position priors with their store, by store and outcome.
    prior_syncs: IntCounterVec,
    /// What a position priors' store held that could not be read, set aside, by store and
    /// reason.
    prior_set_aside: IntCounterVec,
    /// Single reads answered raw because the position prior declined, by reason.
    prior_declined: IntCounterVec,
}

/// The `status` label of `request_duration_seconds` by `status / 100`.
const STATUS_CLASSES: [&str; 10] = [
    "0xx", "1xx", "2xx", "3xx", "4xx", "5xx", "6xx", "7xx", "8xx", "9xx",
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new_custom(Some("systemone".into()), None).unwrap_or_default();
        let r = Registrar(&registry, RefCell::default());
        // Process-wide (see the function); registered here so `/metrics` and the catalogue
        // list it.
        r.register(Ok(trace_spans_dropped().clone()));
        let mut metrics = Metrics {
            requests: r.counters(&REQUESTS),
            token_table_verdict: r.gauges(&TOKEN_TABLE_VERDICT),
            token_table_last_check: r.register(GaugeVec::new(
                Opts::new(
                    "token_table_last_check_timestamp_seconds",
                    "Unix time the last token-table check finished",
                ),
                &["model"],
            )),
            upstream_in_flight: r.register(IntGauge::new(
                "upstream_in_flight",
                "Upstream requests in flight",
            )),
            questions_per_request: r.register(Histogram::with_opts(
                HistogramOpts::new("questions_per_request", "Questions per validated request")
                    .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            )),
            options_per_question: r.register(Histogram::with_opts(
                HistogramOpts::new("options_per_question", "Options per question")
                    .buckets(vec![1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 128.0, 255.0]),
            )),
            option_mass: r.histograms(&OPTION_MASS, OPTION_MASS_BUCKETS),
            request_duration: r.histograms(&REQUEST_DURATION, REQUEST_DURATION_BUCKETS),
            upstream_latency: r.histograms(&UPSTREAM_LATENCY, UPSTREAM_LATENCY_BUCKETS),
            upstream_responses: r.counters(&UPSTREAM_RESPONSES),
            key_rejections: r.counters(&KEY_REJECTIONS),
            key_requests: r.counters(&KEY_REQUESTS),
            read_strategy: r.gauges(&READ_STRATEGY),
            circuit_state: r.gauges(&CIRCUIT_STATE),
            replica_reads: r.counters(&REPLICA_READS),
            replica_errors: r.counters(&REPLICA_ERRORS),
            replica_in_flight: r.gauges(&REPLICA_IN_FLIGHT),
            replica_circuit_state: r.gauges(&REPLICA_CIRCUIT_STATE),
            replica_token_table_verdict: r.gauges(&REPLICA_TOKEN_TABLE_VERDICT),
            profile_answers: r.counters(&PROFILE_ANSWERS),
            limit_store_latency: r.histograms(&LIMIT_STORE_LATENCY, LIMIT_STORE_LATENCY_BUCKETS),
            limit_store_errors: r.counters(&LIMIT_STORE_ERRORS),
            limit_store_decisions: r.counters(&LIMIT_STORE_DECISIONS),
            limit_store_up: r.gauges(&LIMIT_STORE_UP),
            ledger_records: r.counters(&LEDGER_RECORDS),
            ledger_missed_waits: r.counters(&LEDGER_MISSED_WAITS),
            ledger_commit: r.histograms(&LEDGER_COMMIT, LIMIT_STORE_LATENCY_BUCKETS),
            ledger_batch_rows: r.histograms(&LEDGER_BATCH_ROWS, LEDGER_BATCH_ROWS_BUCKETS),
            ledger_outcomes: r.gauges(&LEDGER_OUTCOMES),
            ledger_accuracy: r.register(GaugeVec::new(
                Opts::new(LEDGER_ACCURACY.name, LEDGER_ACCURACY.help),
                LEDGER_ACCURACY.labels,
            )),
            ledger_brier: r.register(GaugeVec::new(
                Opts::new(LEDGER_BRIER.name, LEDGER_BRIER.help),
                LEDGER_BRIER.labels,
            )),
            calibration: CALIBRATION_FIGURES
                .iter()
                .map(|(name, help)| {
                    r.register(GaugeVec::new(Opts::new(*name, *help), CALIBRATION_LABELS))
                })
                .collect(),
            open_connections: r.register(IntGauge::new(
                "open_connections",
                "Client connections open now",
            )),
            connections_closed: r.counters(&CONNECTIONS_CLOSED),
            escalations: r.counters(&ESCALATIONS),
            escalated_answers: r.counters(&ESCALATED_ANSWERS),
            batch_lines: r.counters(&BATCH_LINES),
            batches: r.counters(&BATCHES),
            prior_samples: r.gauges(&PRIOR_SAMPLES),
            prior: r.register(GaugeVec::new(
                Opts::new(PRIOR.name, PRIOR.help),
                PRIOR.labels,
            )),
            prior_weight: r.register(GaugeVec::new(
                Opts::new(PRIOR_WEIGHT.name, PRIOR_WEIGHT.help),
                PRIOR_WEIGHT.labels,
            )),
            prior_syncs: r.counters(&PRIOR_SYNCS),
            prior_set_aside: r.counters(&PRIOR_SET_ASIDE),
            prior_declined: r.counters(&PRIOR_DECLINED),
            requests_shed: r.register(prometheus::IntCounter::new(
                "requests_shed_total",
                "Requests refused over the concurrent-request cap",
            )),
            catalogue: Arc::from(Vec::new()),
            registry: registry.clone(),
        };
        metrics.catalogue = r.1.take().into();
        metrics
    }

    /// Every metric this service can export, in registration order: what the generated
    /// metrics page lists (`systemone docs`), read from the registrations themselves so the
    /// page cannot miss one.
    pub fn catalogue(&self) -> &[MetricInfo] {
        &self.catalogue
    }

    /// Records one limit-store call's duration.
    pub fn observe_limit_store(&self, store: &str, op: &str, elapsed: Duration) {
        self.limit_store_latency
            .with_label_values(&[store, op])
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one failed limit-store call.
    pub fn count_limit_store_error(&self, store: &str, op: &str, kind: &str) {
        self.limit_store_errors
            .with_label_values(&[store, op, kind])
            .inc();
    }

    /// Counts one failure-policy decision.
    pub fn count_limit_decision(&self, store: &str, decision: &str) {
        self.limit_store_decisions
            .with_label_values(&[store, decision])
            .inc();
    }

    /// Mirrors whether the limit store answered its last call.
    pub fn set_limit_store_up(&self, store: &str, up: bool) {
        self.limit_store_up
            .with_label_values(&[store])
            .set(i64::from(up));
    }

    /// Counts `n` ledger records by what became of them: `committed` while their request
    /// waited, `late` (after it stopped waiting), or `lost` (never on record).
    pub fn count_ledger_records(&self, store: &str, result: &str, n: usize) {
        self.ledger_records
            .with_label_values(&[store, result])
            .inc_by(n as u64);
    }

    /// Makes the ledger's record and missed-wait series exist at 0 for `store` and
    /// `policy` as it opens, so a dashboard's rate of them is 0, not absent, until the
    /// first one.
    pub fn start_ledger_series(&self, store: &str, policy: &str) {
        for result in ["committed", "late", "lost"] {
            self.ledger_records.with_label_values(&[store, result]);
        }
        self.ledger_missed_waits.with_label_values(&[store, policy]);
    }

    /// Counts one request that stopped waiting for its record (its record may still land
    /// `late`), under `policy`.
    pub fn count_ledger_missed_wait(&self, store: &str, policy: &str) {
        self.ledger_missed_waits
            .with_label_values(&[store, policy])
            .inc();
    }

    /// One ledger transaction of `rows` records that took `elapsed`.
    pub fn observe_ledger_commit(&self, store: &str, rows: usize, elapsed: Duration) {
        self.ledger_commit
            .with_label_values(&[store])
            .observe(elapsed.as_secs_f64());
        self.ledger_batch_rows
            .with_label_values(&[store])
            .observe(rows as f64);
    }

    /// One model's outcome figures (`count` questions with an outcome, their accuracy and
    /// mean Brier score).
    pub fn set_ledger_quality(&self, model: &str, count: u64, accuracy: f64, brier: f64) {
        self.ledger_outcomes
            .with_label_values(&[model])
            .set(i64::try_from(count).unwrap_or(i64::MAX));
        self.ledger_accuracy
            .with_label_values(&[model])
            .set(accuracy);
        self.ledger_brier.with_label_values(&[model]).set(brier);
    }

    /// Replaces every calibration gauge by `rows`: per (model, type, options, layout,
    /// class, window), the figures in [`CALIBRATION_FIGURES`]' order; a figure that is
    /// `None` (nothing under it) has no series, never a 0.
    pub fn set_calibration(&self, rows: &[([&str; 6], Vec<Option<f64>>)]) {
        for family in &self.calibration {
            family.reset();
        }
        for (labels, figures) in rows {
            for (family, figure) in self.calibration.iter().zip(figures) {
                if let Some(value) = figure.filter(|v| v.is_finite()) {
                    family.with_label_values(labels).set(value);
                }
            }
        }
    }

    /// Counts one authenticated request of a key.
    pub fn count_key_request(&self, key: &str) {
        self.key_requests.with_label_values(&[key]).inc();
    }

    /// Counts one request a key's limit refused (`kind`: which limit).
    pub fn count_rejection(&self, key: &str, kind: &str) {
        self.key_rejections.with_label_values(&[key, kind]).inc();
    }

    /// Records the shape of a validated request: its option count per question.
    pub fn observe_request(&self, options_per_question: impl Iterator<Item = usize>) {
        let mut questions = 0usize;
        for n in options_per_question {
            questions += 1;
            self.options_per_question.observe(n as f64);
        }
        self.questions_per_request.observe(questions as f64);
    }

    /// Records one answer: its option mass, when the model was asked and could report it,
    /// and the profile (name, automate flag) that covered it, if any.
    pub fn observe_answer(
        &self,
        model: &str,
        option_mass: Option<f64>,
        profile: Option<(&str, bool)>,
    ) {
        if let Some(mass) = option_mass {
            self.option_mass.with_label_values(&[model]).observe(mass);
        }
        if let Some((name, automate)) = profile {
            let automate = if automate { "true" } else { "false" };
            self.profile_answers
                .with_label_values(&[name, automate])
                .inc();
        }
    }

    /// Records one upstream read.
    pub fn observe_upstream(&self, dialect: &str, elapsed: Duration, status: &str) {
        self.upstream_latency
            .with_label_values(&[dialect])
            .observe(elapsed.as_secs_f64());
        self.upstream_responses
            .with_label_values(&[dialect, status])
            .inc();
    }

    /// One read of `model`'s replica `replica` (its `host:port` from the configuration)
    /// and its status class.
    pub fn count_replica_read(&self, model: &str, replica: &str, status: &str) {
        self.replica_reads
            .with_label_values(&[model, replica, status])
            .inc();
        if status != "2xx" {
            self.replica_errors
                .with_label_values(&[model, replica])
                .inc();
        }
    }

    /// What `/metrics` mirrors of one replica when scraped.
    pub fn set_replica(&self, model: &str, replica: &str, gauges: ReplicaGauges) {
        let labels = [model, replica];
        self.replica_in_flight
            .with_label_values(&labels)
            .set(gauges.in_flight);
        self.replica_circuit_state
            .with_label_values(&labels)
            .set(gauges.circuit);
        self.replica_token_table_verdict
            .with_label_values(&labels)
            .set(gauges.verdict);
    }

    /// Counts one finished request and records how long it took (the route label is the
    /// matched route pattern, so its values are bounded).
    /// A client connection opened (+1) or closed (-1).
    pub fn add_open_connections(&self, delta: i64) {
        self.open_connections.add(delta);
    }

    /// A connection the edge refused or closed by `rule` (a fixed name).
    pub fn count_connection_closed(&self, rule: &'static str) {
        self.connections_closed.with_label_values(&[rule]).inc();
    }

    /// A request refused over the concurrent-request cap.
    pub fn count_request_shed(&self) {
        self.requests_shed.inc();
    }

    /// One batch line finished through the door at `endpoint` (a fixed route).
    pub fn count_batch_line(&self, endpoint: &str, answered: bool) {
        let outcome = if answered { "answered" } else { "refused" };
        self.batch_lines
            .with_label_values(&[endpoint, outcome])
            .inc();
    }

    /// A batch reached `status` (one of OpenAI's batch statuses).
    pub fn count_batch(&self, status: &str) {
        self.batches.with_label_values(&[status]).inc();
    }

    /// One escalation from model `from` to model `to` (configured names) and its outcome
    /// (`answered` or `failed`), with the answers it replaced.
    pub fn count_escalation(&self, from: &str, to: &str, outcome: &'static str, answers: usize) {
        self.escalations
            .with_label_values(&[from, to, outcome])
            .inc();
        self.escalated_answers
            .with_label_values(&[from, to])
            .inc_by(answers as u64);
    }

    pub fn count_request(&self, route: &str, status: u16, code: &str, elapsed: Duration) {
        // Static label text (no per-request `String`): a valid status has its own.
        let code_text = axum::http::StatusCode::from_u16(status);
        let status_text = code_text.as_ref().map_or("invalid", |s| s.as_str());
        self.requests
            .with_label_values(&[route, status_text, code])
            .inc();
        let class = STATUS_CLASSES
            .get(usize::from(status / 100))
            .copied()
            .unwrap_or("invalid");
        self.request_duration
            .with_label_values(&[route, class])
            .observe(elapsed.as_secs_f64());
    }

    /// Mirrors one shape's position prior of `model` (`shape`: type/options/layout, a
    /// bounded label with nothing a caller wrote).
    pub fn set_prior(&self, model: &str, shape: &str, samples: u64, weight: f64, prior: &[f64]) {
        self.prior_samples
            .with_label_values(&[model, shape])
            .set(i64::try_from(samples).unwrap_or(i64::MAX));
        self.prior_weight
            .with_label_values(&[model, shape])
            .set(weight);
        for (p, b) in prior.iter().enumerate() {
            self.prior
                .with_label_values(&[model, shape, &p.to_string()])
                .set(*b);
        }
    }

    /// Counts one exchange of a model's position prior with `store` (`file`, `redis`).
    pub fn prior_synced(&self, store: &str, outcome: &str) {
        self.prior_syncs.with_label_values(&[store, outcome]).inc();
    }

    /// Counts one thing `store` held that could not be read and was set aside (`reason`:
    /// `not_a_number`, `implausible`, `unreadable`).
    pub fn prior_set_aside(&self, store: &str, reason: &str) {
        self.prior_set_aside
            .with_label_values(&[store, reason])
            .inc();
    }

    /// Counts one single read answered raw because the position prior declined (`reason`:
    /// [`crate::calibration::prior::Declined::as_str`]; never a tenant or model).
    pub fn prior_declined(&self, reason: &str) {
        self.prior_declined.with_label_values(&[reason]).inc();
    }

    /// The reads answered raw so far by each of `reasons` (for `/readyz`).
    pub fn prior_declined_counts(
        &self,
        reasons: impl Iterator<Item = &'static str>,
    ) -> serde_json::Map<String, serde_json::Value> {
        reasons
            .map(|r| {
                let n = self.prior_declined.with_label_values(&[r]).get();
                (r.to_string(), n.into())
            })
            .collect()
    }

    /// The text exposition, with the state-mirroring gauges set first from `models` and
    /// the slots in use.
    pub fn render<'a>(
        &self,
        models: impl Iterator<Item = ModelGauges<'a>>,
        in_flight: usize,
    ) -> String {
        for model in models {
            self.token_table_verdict
                .with_label_values(&[model.name])
                .set(model.verdict);
            if let Some(t) = model.last_check {
                let secs = t
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                self.token_table_last_check
                    .with_label_values(&[model.name])
                    .set(secs);
            }
            self.circuit_state
                .with_label_values(&[model.name])
                .set(model.circuit);
            if let Some(current) = model.read_strategy {
                for strategy in READ_STRATEGIES {
                    self.read_strategy
                        .with_label_values(&[model.name, strategy])
                        .set(i64::from(strategy == current));
                }
            }
        }
        self.upstream_in_flight.set(in_flight as i64);
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Spans the trace exporter dropped, by reason (`queue_full`: its queue was full, the
/// collector not keeping up; `export_failed`: the collector refused a batch or could not be
/// reached): one counter for the process, whose one exporter hangs off the process's
/// tracing subscriber, registered into every [`Metrics`] (a test process makes several).
pub fn trace_spans_dropped() -> &'static IntCounterVec {
    static DROPPED: OnceLock<IntCounterVec> = OnceLock::new();
    DROPPED.get_or_init(|| {
        let f = &TRACE_SPANS_DROPPED;
        let dropped =
            IntCounterVec::new(Opts::new(f.name, f.help), f.labels).expect("valid metric");
        // Both series from the start (0 while traces are off), so an alert on a rise needs
        // no "absent" case.
        for reason in ["queue_full", "export_failed"] {
            dropped.with_label_values(&[reason]);
        }
        dropped
    })
}

/// What `/metrics` mirrors of one model's state when scraped.
#[derive(Debug, Clone, Copy)]
pub struct ModelGauges<'a> {
    /// The model's public name (from the configuration).
    pub name: &'a str,
    /// Token-table verdict: 1 verified, 0 unchecked, -1 mismatch, 2 checks off.
    pub verdict: i64,
    /// When the last token-table check finished.
    pub last_check: Option<std::time::SystemTime>,
    /// Circuit breaker: 0 closed, 1 open, 2 half-open.
    pub circuit: i64,
    /// The read strategy a probing dialect chose (`post_bias`, `raw_top_k`), or its probe's
    /// state (`unprobed`, `refused`); `None` for dialects that do not probe.
    pub read_strategy: Option<&'static str>,
}

/// What `/metrics` mirrors of one replica of a model when scraped.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaGauges {
    /// Requests reading from it now.
    pub in_flight: i64,
    /// Circuit breaker: 0 closed, 1 open, 2 half-open.
    pub circuit: i64,
    /// Token-table verdict: 1 verified, 0 unchecked, -1 mismatch, 2 checks off.
    pub verdict: i64,
}

/// Every value of the `strategy` label of `systemone_backend_read_strategy`.
pub const READ_STRATEGIES: [&str; 4] = ["post_bias", "raw_top_k", "unprobed", "refused"];

/// One registered metric as documentation sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricInfo {
    /// The exported name, `systemone_` prefix included.
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// The label names, in order.
    pub labels: Vec<String>,
    /// The `# HELP` text.
    pub help: String,
}

/// Creates metrics and registers each as it is made, noting each in the catalogue. Names and
/// label sets are fixed at compile time, so a failure here is a programming error caught by
/// every test.
struct Registrar<'a>(&'a Registry, RefCell<Vec<MetricInfo>>);

/// One labelled metric family as declared: name (after the `systemone_` prefix), help and
/// label names.
struct Family {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

// The labelled families, declared as data (`Metrics::new` registers them).
/// `requests_total`.
const REQUESTS: Family = Family {
    name: "requests_total",
    help: "HTTP requests by route, status and error code",
    labels: &["route", "status", "code"],
};

/// `token_table_verdict`.
const TOKEN_TABLE_VERDICT: Family = Family {
    name: "token_table_verdict",
    help: "Token table vs serving tokenizer: 1 verified, 0 unchecked, -1 mismatch (model disabled), 2 checks off",
    labels: &["model"],
};

/// `upstream_responses_total`.
const UPSTREAM_RESPONSES: Family = Family {
    name: "upstream_responses_total",
    help: "Upstream reads by dialect and status class",
    labels: &["dialect", "status"],
};

/// `key_rejections_total`.
const KEY_REJECTIONS: Family = Family {
    name: "key_rejections_total",
    help: "Requests refused by a caller's limits, by key name (token callers: token or token:<tier>) and kind",
    labels: &["key", "kind"],
};

/// `key_requests_total`.
const KEY_REQUESTS: Family = Family {
    name: "key_requests_total",
    help: "Authenticated requests by API key name (token callers: token or token:<tier>)",
    labels: &["key"],
};

/// `backend_read_strategy`.
const READ_STRATEGY: Family = Family {
    name: "backend_read_strategy",
    help: "Read strategy the openai dialect's probe chose per model (1 = current): post_bias, raw_top_k, unprobed, refused",
    labels: &["model", "strategy"],
};

/// `circuit_state`.
const CIRCUIT_STATE: Family = Family {
    name: "circuit_state",
    help: "Circuit breaker per model: 0 closed, 1 open, 2 half-open",
    labels: &["model"],
};

/// `replica_reads_total`.
const REPLICA_READS: Family = Family {
    name: "replica_reads_total",
    help: "Reads per replica of a model with several backend URLs (replica: host:port), by status class",
    labels: &["model", "replica", "status"],
};

/// `replica_errors_total`.
const REPLICA_ERRORS: Family = Family {
    name: "replica_errors_total",
    help: "Reads per replica that failed (status class other than 2xx)",
    labels: &["model", "replica"],
};

/// `replica_in_flight`.
const REPLICA_IN_FLIGHT: Family = Family {
    name: "replica_in_flight",
    help: "Requests reading from each replica now (what bounded load compares to the mean)",
    labels: &["model", "replica"],
};

/// `replica_circuit_state`.
const REPLICA_CIRCUIT_STATE: Family = Family {
    name: "replica_circuit_state",
    help: "Circuit breaker per replica: 0 closed, 1 open, 2 half-open",
    labels: &["model", "replica"],
};

/// `replica_token_table_verdict`.
const REPLICA_TOKEN_TABLE_VERDICT: Family = Family {
    name: "replica_token_table_verdict",
    help: "Token table vs each replica's tokenizer: 1 verified, 0 unchecked, -1 mismatch (replica out), 2 checks off",
    labels: &["model", "replica"],
};

/// `profile_answers_total`.
const PROFILE_ANSWERS: Family = Family {
    name: "profile_answers_total",
    help: "Answers a calibration profile covered, by profile and automate flag",
    labels: &["profile", "automate"],
};

/// `prior_samples`.
const PRIOR_SAMPLES: Family = Family {
    name: "prior_samples",
    help: "Questions read in two or more orders the position prior learned from, per model and shape (type/options/layout)",
    labels: &["model", "shape"],
};

/// `prior`.
const PRIOR: Family = Family {
    name: "prior",
    help: "The position prior (log space, sums to 0) per model, shape and position",
    labels: &["model", "shape", "position"],
};

/// `prior_weight`.
const PRIOR_WEIGHT: Family = Family {
    name: "prior_weight",
    help: "Weight of the position prior taken out of single reads (fitted strength times shrink; 0: declined or not learned)",
    labels: &["model", "shape"],
};

/// `prior_syncs_total`.
const PRIOR_SYNCS: Family = Family {
    name: "prior_syncs_total",
    help: "Exchanges of a model's position prior with its store (state-dir file or Redis), by store and outcome (ok, failed)",
    labels: &["store", "outcome"],
};

/// `prior_store_set_aside_total`.
const PRIOR_SET_ASIDE: Family = Family {
    name: "prior_store_set_aside_total",
    help: "What a position prior's store held that could not be read, set aside (a shape's sums not a finite number or beyond what samples make, or the whole file), by store and reason (not_a_number, implausible, unreadable)",
    labels: &["store", "reason"],
};

/// `prior_declined_total`.
const PRIOR_DECLINED: Family = Family {
    name: "prior_declined_total",
    help: "Single reads answered raw because the position prior declined, by reason (too_few_scored: under 4 questions scored; no_gain: no held-out gain over 2 standard errors; flips_answers: the corrected reads agree with the rotation average less often than the raw reads)",
    labels: &["reason"],
};

/// `trace_spans_dropped_total`.
const TRACE_SPANS_DROPPED: Family = Family {
    name: "trace_spans_dropped_total",
    help: "Spans the trace exporter dropped, by reason (queue_full, export_failed)",
    labels: &["reason"],
};

/// `limit_store_errors_total`.
const LIMIT_STORE_ERRORS: Family = Family {
    name: "limit_store_errors_total",
    help: "Failed calls to the per-key limit store, by store, operation and kind",
    labels: &["store", "op", "kind"],
};

/// `limit_store_decisions_total`.
const LIMIT_STORE_DECISIONS: Family = Family {
    name: "limit_store_decisions_total",
    help: "Failure-policy decisions after a failed limit-store call, by store and decision",
    labels: &["store", "decision"],
};

/// `limit_store_up`.
const LIMIT_STORE_UP: Family = Family {
    name: "limit_store_up",
    help: "1 when the per-key limit store answered its last call, else 0",
    labels: &["store"],
};

/// `batch_lines_total`.
const BATCH_LINES: Family = Family {
    name: "batch_lines_total",
    help: "Batch lines finished, by endpoint and outcome (answered, refused)",
    labels: &["endpoint", "outcome"],
};

/// `batches_total`.
const BATCHES: Family = Family {
    name: "batches_total",
    help:
        "Batches that reached each status (in_progress, completed, expired, cancelling, cancelled)",
    labels: &["status"],
};

/// `escalations_total`.
const ESCALATIONS: Family = Family {
    name: "escalations_total",
    help:
        "Escalations when unsure, by first model, escalation model and outcome (answered, failed)",
    labels: &["from", "to", "outcome"],
};

/// `escalated_answers_total`.
const ESCALATED_ANSWERS: Family = Family {
    name: "escalated_answers_total",
    help: "Answers replaced by an escalation model's, by first model and escalation model",
    labels: &["from", "to"],
};

/// `ledger_records_total`.
const LEDGER_RECORDS: Family = Family {
    name: "ledger_records_total",
    help: "Decision-ledger records by store and result: committed (while the request waited), late (written after it stopped waiting, as it was answered or refused), lost (never on record)",
    labels: &["store", "result"],
};

/// `ledger_missed_waits_total`.
const LEDGER_MISSED_WAITS: Family = Family {
    name: "ledger_missed_waits_total",
    help: "Requests whose record was not committed within --ledger-timeout-ms, by store and the policy applied (fail_open: answered, fail_closed: refused 503); the record itself is counted in ledger_records_total when it lands late or is lost",
    labels: &["store", "policy"],
};

/// `ledger_commit_seconds`.
const LEDGER_COMMIT: Family = Family {
    name: "ledger_commit_seconds",
    help: "Seconds one decision-ledger transaction (a batch of records) took to commit, by store",
    labels: &["store"],
};

/// `ledger_batch_rows`.
const LEDGER_BATCH_ROWS: Family = Family {
    name: "ledger_batch_rows",
    help: "Records per decision-ledger transaction (group commit), by store",
    labels: &["store"],
};

/// `ledger_outcomes`.
const LEDGER_OUTCOMES: Family = Family {
    name: "ledger_outcomes",
    help: "Answered questions with a recorded outcome, per model, over the newest 10,000 ledger records with outcomes",
    labels: &["model"],
};

/// `ledger_accuracy`.
const LEDGER_ACCURACY: Family = Family {
    name: "ledger_accuracy",
    help: "Share of answered questions with an outcome whose answer was the outcome, per model (same window)",
    labels: &["model"],
};

/// `ledger_brier`.
const LEDGER_BRIER: Family = Family {
    name: "ledger_brier",
    help: "Mean Brier score (sum over options of (p - 1[outcome])^2) of answered questions with an outcome, per model (same window)",
    labels: &["model"],
};

/// The calibration gauges' labels: the shape the watch keeps figures by (no caller text:
/// configured model names, question types, option counts, layouts, classes) and the
/// window (`hour`, `day`, `week`: the one holding now).
const CALIBRATION_LABELS: &[&str] = &["model", "type", "options", "layout", "class", "window"];

/// The calibration watch's gauges (`calibration/watch/`), name and help.
pub const CALIBRATION_FIGURES: &[(&str, &str)] = &[
    ("calibration_answers", "Answers in the window, per model and shape"),
    ("calibration_mean_confidence", "Mean confidence (1 - H/ln n) of the window's answers"),
    ("calibration_mean_option_mass", "Mean option_mass of the window's answers that report it"),
    ("calibration_confidence_psi", "PSI of the window's top-probability histogram (15 bins) against the reference window's"),
    ("calibration_expected_accuracy", "Expected accuracy from the confidences, recalibrated by the reference window (CBPE)"),
    ("calibration_em_prior_shift", "Total variation between the label prior re-estimated by EM on the window and the reference window's"),
    ("calibration_below_threshold_share", "Share of the window's answers under the model's escalation threshold"),
    ("calibration_outcomes", "Answers of the window with a current outcome"),
    ("calibration_accuracy", "Share of the window's answers with an outcome that were right"),
    ("calibration_ece", "ECE over 15 equal-width bins of the window's answers with an outcome"),
    ("calibration_brier", "Mean Brier score of the window's answers with an outcome"),
];

/// `ledger_batch_rows`'s buckets.
const LEDGER_BATCH_ROWS_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// `connections_closed_total`.
const CONNECTIONS_CLOSED: Family = Family {
    name: "connections_closed_total",
    help: "Client connections the edge refused or closed, by rule",
    labels: &["rule"],
};

/// `option_mass`.
const OPTION_MASS: Family = Family {
    name: "option_mass",
    help: "Share of the model's probability on the options, per answer asked",
    labels: &["model"],
};

/// `option_mass`'s buckets.
const OPTION_MASS_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0];

/// `request_duration_seconds`.
const REQUEST_DURATION: Family = Family {
    name: "request_duration_seconds",
    help: "Seconds from a request's arrival to its response, by route and status class",
    labels: &["route", "status"],
};

/// `request_duration_seconds`'s buckets.
const REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// `upstream_latency_seconds`.
const UPSTREAM_LATENCY: Family = Family {
    name: "upstream_latency_seconds",
    help: "Seconds one upstream read took, slot wait excluded",
    labels: &["dialect"],
};

/// `upstream_latency_seconds`'s buckets.
const UPSTREAM_LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// `limit_store_latency_seconds`.
const LIMIT_STORE_LATENCY: Family = Family {
    name: "limit_store_latency_seconds",
    help: "Seconds one call to the per-key limit store took, by store and operation",
    labels: &["store", "op"],
};

/// `limit_store_latency_seconds`'s buckets.
const LIMIT_STORE_LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];

impl Registrar<'_> {
    fn register<M: prometheus::core::Collector + Clone + 'static>(
        &self,
        metric: prometheus::Result<M>,
    ) -> M {
        let metric = metric.expect("valid metric");
        self.0
            .register(Box::new(metric.clone()))
            .expect("metric names are unique");
        self.note(&metric);
        metric
    }

    /// Adds `metric` to the catalogue: a vector with no series yet still describes itself.
    fn note(&self, metric: &dyn prometheus::core::Collector) {
        let kinds = metric.collect().into_iter().map(|f| f.get_field_type());
        for (desc, kind) in metric.desc().into_iter().zip(kinds) {
            self.1.borrow_mut().push(MetricInfo {
                name: format!("systemone_{}", desc.fq_name),
                kind: match kind {
                    prometheus::proto::MetricType::COUNTER => "counter",
                    prometheus::proto::MetricType::GAUGE => "gauge",
                    prometheus::proto::MetricType::HISTOGRAM => "histogram",
                    _ => "untyped",
                },
                labels: desc.variable_labels.clone(),
                help: desc.help.clone(),
            });
        }
    }

    fn counters(&self, f: &Family) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(f.name, f.help), f.labels))
    }

    fn gauges(&self, f: &Family) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(f.name, f.help), f.labels))
    }

    fn histograms(&self, f: &Family, buckets: &[f64]) -> HistogramVec {
        self.register(HistogramVec::new(
            HistogramOpts::new(f.name, f.help).buckets(buckets.to_vec()),
            f.labels,
        ))
    }
}
