//! The per-question CPU hot path, without any I/O:
//!
//! * `render`: [`prompt::plan`] plus every vLLM body the pipeline would send for the
//!   question (one per order and slice of ≤128 ids), encoded as the dialect sends them
//!   (`VllmBackend::encode`);
//! * `decode`: [`decode::decode`] on synthetic log-probabilities, with the model's default
//!   temperature;
//! * `render+decode`: both, i.e. what one question costs the service besides HTTP;
//! * `parse+validate`: the caller's body bytes (state and the one question) through the
//!   strict parse and validation, as `POST /v1/systemone` runs them: the inline cost that
//!   `http::blocking::INLINE_LIGHT_BYTES` weighs against a hop to the blocking pool.
//!
//! For a 4-option and a 150-option choice question over a state of about 1,000 characters,
//! with the `golden-fake` token table. Throughput is reported in questions per second.
//!
//! `cargo bench --bench hot_path`

#[path = "support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::json;

use systemone::backend::vllm::VllmBackend;
use systemone::backend::{Backend, ReadRequest};
use systemone::config::Limits;
use systemone::engine::decode::{decode, OrderRead};
use systemone::json::parse_strict;
use systemone::models::tokens::TokenTable;
use systemone::models::{Model, Models};
use systemone::request::prompt::plan;
use systemone::request::{validate_with_parts, ValidRequest};

use support::{label_ids, one_question, route_criteria, route_question, ticket_state};

const MODEL: &str = "glm-5.3-flash";

/// The vLLM dialect; never called: the URL points at the discard port.
fn backend() -> VllmBackend {
    VllmBackend::new(
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool"),
        "http://127.0.0.1:9/v1",
        MODEL.into(),
        None,
        128,
    )
}

fn model() -> Arc<Model> {
    Arc::new(Model::new(
        MODEL,
        Arc::new(backend()),
        TokenTable::load("golden-fake").expect("golden-fake table"),
    ))
}

/// The options of a choice question with `n` of them.
fn criteria(n: usize) -> Vec<(String, serde_json::Value)> {
    if n == 4 {
        route_criteria()
    } else {
        (0..n)
            .map(|i| {
                (
                    format!("category_{i:03}"),
                    json!(format!(
                        "Tickets about topic number {i} of the support taxonomy"
                    )),
                )
            })
            .collect()
    }
}

/// A one-question request whose choice has `n` options.
fn request(model: &Arc<Model>, n: usize) -> ValidRequest {
    one_question(model, &ticket_state(), route_question(criteria(n)))
}

/// The caller's body of that request, as a client sends it.
fn body(n: usize) -> Vec<u8> {
    let criteria: serde_json::Map<_, _> = criteria(n).into_iter().collect();
    let question = json!({"type": "choice", "instructions": support::ROUTE_INSTRUCTIONS, "criteria": criteria});
    serde_json::to_vec(&json!({"state": ticket_state(), "questions": {"route": question}}))
        .expect("serialises")
}

/// Parses and validates `body` as the route does (no multipart parts).
fn parse_and_validate(body: &[u8], models: &Models, limits: &Limits) -> ValidRequest {
    let json = parse_strict(body).expect("parses");
    validate_with_parts(json, &Default::default(), &models.routes(), limits).expect("valid")
}

/// Everything the pipeline renders for one request: the plan and every upstream body.
/// Returns the serialised bytes so nothing is optimised away.
fn render(req: &ValidRequest, backend: &VllmBackend, ids: &[u32], prefix: &str) -> usize {
    let asks = plan(req);
    let per_read = backend.max_ids_per_read(ids.len());
    let mut bytes = 0;
    for question in &asks {
        for ask in question {
            for chunk in ids.chunks(per_read) {
                let read = ReadRequest {
                    content: &ask.content,
                    prefix,
                    allowed_ids: ids,
                    read_ids: chunk,
                    chained: false,
                    routing: None,
                    cache_salt: None,
                };
                let body = backend.encode(&read).expect("serialises");
                bytes += black_box(body).len();
            }
        }
    }
    bytes
}

/// Synthetic pre-mask log-probabilities: most mass on one option, the rest spread out.
fn logprobs(n: usize) -> Vec<OrderRead> {
    let logprobs = (0..n)
        .map(|i| {
            if i == 1 {
                (0.7f64).ln()
            } else {
                (0.25 / n as f64).ln() - 0.01 * i as f64
            }
        })
        .collect();
    vec![OrderRead {
        shift: 0,
        logprobs,
        pre_mask: true,
    }]
}

fn hot_path(c: &mut Criterion) {
    let model = model();
    // The same backend type the model holds; `body` needs the concrete type.
    let backend = backend();
    let models = Models::new(vec![model.clone()], 0).expect("one model");
    // The 150-option question is ~17 k bytes, estimated as as many tokens.
    let limits = Limits {
        max_question_tokens: 32768,
        ..Limits::default()
    };
    let mut group = c.benchmark_group("hot_path");
    group.throughput(Throughput::Elements(1));
    for n in [4usize, 150] {
        let req = request(&model, n);
        if n == 4 {
            eprintln!(
                "state_json: {} characters",
                req.state_json().chars().count()
            );
        }
        let ids = label_ids(&model, n);
        let prefix = model.table.get().expect("a fixed table").prefix.clone();
        let reads = logprobs(n);
        let t = model.calibration.temperature(n);
        eprintln!(
            "{n} options: {} upstream bodies, {} bytes in all",
            n.div_ceil(backend.max_ids_per_read(n)),
            render(&req, &backend, &ids, &prefix)
        );

        group.bench_with_input(BenchmarkId::new("render", n), &req, |b, req| {
            b.iter(|| render(black_box(req), &backend, &ids, &prefix))
        });
        group.bench_with_input(BenchmarkId::new("decode", n), &reads, |b, reads| {
            b.iter(|| decode(black_box(reads), black_box(t)).expect("decodes"))
        });
        group.bench_with_input(BenchmarkId::new("render+decode", n), &req, |b, req| {
            b.iter(|| {
                let bytes = render(black_box(req), &backend, &ids, &prefix);
                let decoded = decode(black_box(&reads), t).expect("decodes");
                (bytes, decoded)
            })
        });
        let body = body(n);
        eprintln!("{n} options: a caller's body of {} bytes", body.len());
        group.bench_with_input(BenchmarkId::new("parse+validate", n), &body, |b, body| {
            b.iter(|| parse_and_validate(black_box(body), &models, &limits))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = hot_path
}
criterion_main!(benches);
