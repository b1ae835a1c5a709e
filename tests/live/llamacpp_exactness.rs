//! End to end against a real llama.cpp `llama-server` serving Gemma 3 270M (`docs/backends.md`):
//! the service's probabilities are exactly the backend's own raw log-probabilities
//! renormalised (then tempered by the default formula), checked against the same prompts
//! sent straight to llama-server.
//!
//! Needs, as exported by `scripts/test.sh`:
//! * `SYSTEMONE_LLAMA_URL`: base URL of a llama-server with Gemma 3 270M, ending in `/v1`
//!   (`scripts/start-llama.sh` starts one and prints it).
//!
//! Without it the test fails with a message that says so; it never skips. The service
//! listens on 127.0.0.1:0; `tests/live/setup/llama.rs` has the setup and the shape checks.

use crate::support;
use std::time::Instant;

use serde_json::{json, Value};

use systemone::backend::llamacpp::LlamaCppBackend;
use systemone::backend::ReadRequest;
use systemone::request::prompt::plan;
use systemone::request::validate;

use crate::setup::llama::{
    answer, ask, assert_close, backend_turn, check_mixed, check_usage, default_temperature,
    llama_config, mixed_body, num, raw_logprobs,
};

/// Proves the llama.cpp decoding is exact. With `--cache-prompt false`, each question's
/// prompt is sent directly to llama-server (the same body the service builds, from
/// `validate` → `prompt::plan` → `LlamaCppBackend::body`), and the test computes the softmax
/// over the options' raw log-probabilities itself. The service's `temperature: 1`
/// probabilities equal it to 1e-6 and its `option_mass` equals Σ exp(logprob) to 1e-6; with
/// the default temperature its probabilities equal p_i^(1/T)/Σ p_j^(1/T) with
/// T from the formula shipped for Gemma 3 270M (`calibration/gemma-3-270m.json`), which is
/// also the answer's `temperature`; P(no) + P(yes) = 1
/// and every distribution sums to 1 within 1e-9; and the same request again gives the same
/// answers to 1e-6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probabilities_are_the_renormalised_raw_logprobs_tempered_by_the_default_formula() {
    let (url, _turn) = backend_turn().await;
    let started = Instant::now();
    let service = support::start(llama_config(&url, &["--cache-prompt", "false"])).await;

    let raw = ask(&service, &mixed_body(Some(json!(1)))).await;
    assert_eq!(raw.status, 200, "{}", raw.body);
    let calibrated = ask(&service, &mixed_body(None)).await;
    assert_eq!(calibrated.status, 200, "{}", calibrated.body);
    let again = ask(&service, &mixed_body(None)).await;
    assert_eq!(again.status, 200, "{}", again.body);
    for reply in [&raw, &calibrated, &again] {
        let usage = check_usage(&reply.body, 3);
        assert_eq!(
            usage["cached_tokens"], 0,
            "--cache-prompt false reaches llama-server: nothing is served from its cache"
        );
    }
    let raw_p = check_mixed(&raw.body);
    let cal_p = check_mixed(&calibrated.body);
    let again_p = check_mixed(&again.body);
    let service_elapsed = started.elapsed();

    // The same prompts, straight to llama-server.
    let request = validate(
        mixed_body(None),
        &service.state.models.routes(),
        &service.state.limits,
    )
    .expect("the body is valid");
    let asks = plan(&request);
    let model = request.model();
    let direct = LlamaCppBackend::new(
        systemone::backend::pool::pool(std::time::Duration::from_secs(10), 16).expect("a pool"),
        &url,
        model.upstream_model.clone(),
        None,
        false,
        None,
    );
    let client = reqwest::Client::new();
    let table = model.table.get().expect("a fixed table");
    for (qi, q) in request.questions().iter().enumerate() {
        let n = q.options.len();
        let ids: Vec<u32> = table.labels[..n].iter().map(|l| l.id).collect();
        let read = ReadRequest {
            content: &asks[qi][0].content,
            prefix: &table.prefix,
            allowed_ids: &ids,
            read_ids: &ids,
            chained: false,
            routing: None,
            cache_salt: None,
        };
        let body = serde_json::to_value(direct.body(&read, false)).expect("the body serialises");
        assert_eq!(body["cache_prompt"], false, "{body}");
        assert_eq!(body["top_logprobs"], 1000, "{body}");
        let response: Value = client
            .post(format!("{url}/chat/completions"))
            .json(&body)
            .send()
            .await
            .expect("llama-server answers")
            .error_for_status()
            .expect("llama-server accepts the body")
            .json()
            .await
            .expect("llama-server answers JSON");
        let lp = raw_logprobs(&response, &ids);
        let weights: Vec<f64> = lp.iter().map(|x| x.exp()).collect();
        let mass: f64 = weights.iter().sum();
        let softmax: Vec<f64> = weights.iter().map(|w| w / mass).collect();

        let (id, p1) = &raw_p[qi];
        assert_eq!(*id, q.id);
        let what = |s: &str| format!("{id} {s}");
        let raw_answer = answer(&raw.body, id);
        assert_close(num(&raw_answer["temperature"]), 1.0, 0.0, &what("T = 1"));
        for (i, (got, want)) in p1.iter().zip(&softmax).enumerate() {
            assert_close(*got, *want, 1e-6, &what(&format!("p[{i}] at T = 1")));
        }
        for reply in [&raw, &calibrated, &again] {
            assert_close(
                num(&answer(&reply.body, id)["option_mass"]),
                mass.min(1.0),
                1e-6,
                &what("option_mass = sum of exp(logprob)"),
            );
        }

        let t = default_temperature(n);
        let cal_answer = answer(&calibrated.body, id);
        assert_close(
            num(&cal_answer["temperature"]),
            t,
            1e-12,
            &what("default T"),
        );
        let tempered: Vec<f64> = softmax.iter().map(|p| p.powf(1.0 / t)).collect();
        let z: f64 = tempered.iter().sum();
        for (i, (got, want)) in cal_p[qi]
            .1
            .iter()
            .zip(tempered.iter().map(|x| x / z))
            .enumerate()
        {
            assert_close(*got, want, 1e-6, &what(&format!("p[{i}] at the default T")));
        }

        for (i, (a, b)) in cal_p[qi].1.iter().zip(&again_p[qi].1).enumerate() {
            assert_close(*b, *a, 1e-6, &what(&format!("p[{i}] asked again")));
        }
        for field in ["confidence", "option_mass", "temperature"] {
            assert_close(
                num(&answer(&again.body, id)[field]),
                num(&cal_answer[field]),
                1e-6,
                &what(&format!("{field} asked again")),
            );
        }
        eprintln!(
            "exactness: {id} n={n} mass={mass:.4} raw={softmax:.4?} tempered(T={t:.4})={:.4?}",
            cal_p[qi].1
        );
    }
    eprintln!(
        "exactness: 3 service requests in {service_elapsed:.2?}, total with 3 direct reads {:.2?}",
        started.elapsed()
    );
}
