//! `systemone`: System One semantics (calibrated typed decisions) over any chat LLM.
//!
//! Callers send TypeSafe's typed-decision request (`POST /v1/systemone`: a `state` plus
//! named `choice` / `noul` / `score` questions), or the same questions through another
//! client's front door: OpenAI's Decisions API (`POST /v1/decisions`) and Cohere's rerank
//! (`POST /v2/rerank`, one noul per document). Each question becomes masked chat
//! completions: the prompt numbers the options, the assistant turn is prefilled with
//! `answer=`, generation is restricted to the option-number tokens, and the distribution
//! is read from their log-probabilities.
//!
//! # Layout
//! The folders are the layers; every `use crate::…` points down this list (the test
//! `tests/hermetic/architecture.rs` fails on one that climbs):
//!
//! ```text
//! cli/          every command (serve, tokens, eval, calibrate, usage, ledger, openapi, docs)
//! http/         by role: doors/ (one file or folder per front door, one Door trait and handler), flow/ (the
//!               steps every door shares: run, escalate, usage, ledger_step, headers), ops/ (health, metrics,
//!               models, usage, ledger routes); the router, the request middleware and context, callers
//!               (auth: API keys, signed tokens, tiers, scopes, cache salts),
//!               body extraction, wire types, the shared state, the edge (serving, graceful shutdown),
//!               the playground page
//! engine/       the orchestrator (fan-out, staging, in-flight cap, timeouts), decoding and the
//!               position prior's step (position_prior.rs: sample reads, learning, correction)
//! quota/        beside engine/: per-key limits, daily caps and usage behind one LimitStore
//!               (memory, an embedded redb file, or Redis shared by replicas) and its failure policy
//! batch/        beside engine/: batch jobs' store (files, batches, per-line progress in SQLite, group
//!               commit), input files' rules, ids, when a line may start (behind online requests);
//!               http/batches/ runs their lines through the doors
//! ledger/       beside engine/: the decision ledger (a record per answer or refusal, keyed
//!               hashes of the caller's text; SQLite or PostgreSQL through sqlx; group commit)
//! request/      caller JSON → ValidRequest → prompt bytes; pure
//! models/       the registry at run time, failover, the circuit breaker, token tables and
//!               their live check, a model's replicas (fleet/: rendezvous hashing, bounded load)
//! backend/      the trait, the shared OpenAI chat wire types, one file per dialect, the native
//!               upstream (systemone/: a model either reads or forwards, `models::Serving`)
//! calibration/  temperatures, profiles (apply, prediction sets), the calibrated answer; fit/:
//!               the fitting maths (optimisers, temperature fits, conformal sets, metrics); prior/:
//!               the position prior's estimator (per model, tenant and question shape), kept
//!               and shared by models/prior_sync/ (a redb file or Redis)
//! question.rs   the domain vocabulary: lowering questions to numbered options, the preamble
//! telemetry/    traces: the exported spans' target, W3C propagation, the OTLP/HTTP export
//!               queue off the request path (every layer above makes spans)
//! stores/       the setup the limits (quota/) and the prior (models/prior_sync/) share: a
//!               Redis client for `--redis-url`, a redb file under `--state-dir`
//! config/       serve flags (one file per flag group), one model's config, the TOML registry
//! days.rs draw.rs error.rs in_flight.rs json/ metrics.rs secret.rs shipped.rs   leaves (days.rs:
//!               UTC day numbers and dates; draw.rs: the SVG charts; in_flight.rs: the cap on
//!               upstream requests in flight; json/: a caller's body parsed strictly, values
//!               written as Python's bytes)
//! ```
//!
//! # Request lifecycle
//! 1. [`http`]'s middleware (`http/middleware.rs`) gives the request its context
//!    (`http/context.rs`: `req_<hex>`, route, arrival, summary), which the door's handler
//!    (`http/doors/handler.rs`) takes and passes down; before the body is read the bearer is
//!    checked against the API keys and counted against its key's requests per minute
//!    ([`http::auth`]); then content type and size are checked and the body parsed strictly
//!    (`http/body.rs`), on the blocking pool when it is large (a multipart body: its
//!    `request` part, the other parts kept as image bytes).
//! 2. The other front doors first turn their body into the System One body that asks the
//!    same (`http/doors/decisions/translate.rs`; `http/doors/rerank.rs`, in batches), checking only
//!    what that body cannot say. Then [`request::validate()`] applies every schema and size
//!    rule and lowers the questions ([`question`]), against the model that will serve: the
//!    requested one, or its fallback while its [`models::circuit`] is open
//!    ([`models::Routes::serving`]). Counting tokens and decoding images run on the
//!    blocking pool too ([`http`]'s `blocking.rs` weighs each step's work per byte against
//!    the hop).
//! 3. Every door hands its validated requests to the one front-door flow
//!    (`http/flow/run.rs`): it takes the circuit's ticket (an open circuit refuses the request
//!    here), counts the key's questions per minute and per day, runs
//!    [`engine::Pipeline::run`] (its [`engine::Answers`]), gives back the questions of whatever sent no read, asks
//!    the serving model's unsure answers again of its escalation model (`http/flow/escalate.rs`),
//!    and records usage, metrics and the ledger's record (`http/flow/ledger_step.rs`). A model served by a native System One upstream
//!    ([`backend::systemone`]) is not read: the pipeline forwards its requests whole
//!    (`engine/native.rs`) under the same cap, deadline and circuit. The model's token-table check and host probe are not on
//!    this path: they run in its background upkeep task ([`models::upkeep`]), and a
//!    request only reads their last verdict.
//! 4. The pipeline first settles what the byte estimate could not: a request it put over
//!    a token limit is counted with the backend's tokenizer and refused only on that count,
//!    and a prompt longer than the backend's context window is counted against it
//!    ([`engine::context_window`]). Where the model learns a position prior, a share of
//!    single-read requests is asked once more in the order rotated by one, in the request's
//!    own layout, as the prior's sample ([`engine::position_prior`]). Then it renders each
//!    (question, option order) with [`request::prompt::plan`],
//!    sends one read per node of the question's [`request::trie::ReadPlan`] (one node for
//!    single-token labels, a trie for multi-token ones) and slice of ≤128 ids through the
//!    model's [`backend::Backend`] while holding an in-flight permit ([`in_flight`]), and
//!    joins them into one log-probability per option.
//! 5. A question read in two or more orders teaches the caller's (tenant's) position prior;
//!    a single read has the learned position bias taken out, when the prior's held-out check
//!    says it helps ([`engine::position_prior`], [`calibration::prior`]). Then
//!    [`engine::decode`] turns log-probabilities into answers calibrated by
//!    [`calibration`] (the model's temperature formula, or a named profile).
//! 6. The door writes the answers in its own client's shape (its `Door::respond`;
//!    `http/wire.rs` for `/v1/systemone`: question order, full `f64` precision; a noul is
//!    P(option 1), a score Σ i·p, both [`calibration::Decoded`]'s) with the flow's headers
//!    (`http/flow/headers.rs`); every failure on the way became one [`error::ApiError`],
//!    whose code decides the status, said in the door's shape (`Door::refuse`).
//!
//! # Words used throughout
//! - **door**: a front door, one client family's route and wire shape (`http/doors/`);
//!   every door ends in the same **flow** (`http/flow/`), the steps all share.
//! - **question**, **option**, **label**: a caller's question has options; the prompt
//!   numbers them and a label is the text the model answers with (`"1"`, `"12"`, `"A"`).
//!   A **label scheme** says which texts; a **token table** maps each label to the serving
//!   tokenizer's ids and is checked against it while serving (`models/tokens/`).
//! - **read**: one masked completion upstream, returning the labels' log-probabilities
//!   ([`backend::ReadRequest`] → [`backend::ReadReply`]); a question takes one read per option order (and per node
//!   of its label trie). **layout**: how a request's prompts are cut into reads (`accuracy`:
//!   the reference's bytes, `cost`: a shared head, `compact`: the project's own short prompt).
//! - **dialect**: how one kind of host is asked for a read (`backend/vllm.rs`,
//!   `llamacpp.rs`, `openai/`); a model either reads through a dialect or forwards whole
//!   requests to a native System One upstream ([`models::Serving`]).
//! - **call**: one HTTP request to a door; it holds one validated request, or several
//!   (rerank: one per batch of documents).
//! - **answers** ([`engine::Answers`]) and **token usage** ([`engine::TokenUsage`]): what
//!   the pipeline returns for one request (the wire's `AnswersWire` writes them, the
//!   ledger's `RequestAnswers` borrows them); an **answered call** (`http/flow/`'s
//!   `AnsweredCall`, borrowed by `ledger/draft.rs`'s) is every request's answers and their
//!   usage summed; **usage** (`quota/usage.rs`) is a key's running count of requests,
//!   questions and tokens.
//! - **limits**: [`config::Limits`] are the size limits of one request; per-key rates and
//!   caps live in `quota/`; the in-flight cap ([`in_flight`]) bounds upstream requests for
//!   the whole process.
//! - **circuit**, **fallback**, **escalation**: a model's circuit opens on failures and its
//!   requests go to its fallback; escalation asks a stronger model again when an answer is
//!   unsure (`http/flow/escalate.rs`).
//! - **upkeep**: a model's background task (token-table check, host probe) whose last
//!   verdict requests read ([`models::upkeep`]).
//! - **profile** and **formula**: a temperature formula by option count calibrates every
//!   answer; a named profile (fitted on labelled rows) replaces it when asked for.
//! - **ledger record** and **outcome**: the ledger keeps a record per answer or refusal; an
//!   outcome is the ground truth a caller posts later for a recorded decision, and nothing
//!   else (what a run of `eval` finds is its **evaluation**).
//! - **position prior**: how much a model favours each label position, learned per model,
//!   tenant and question shape from questions read in several orders, and taken out of
//!   single reads (`calibration/prior/`, `engine/position_prior.rs`).
//! - **edge**: the listener in front of the router: connection caps, header and body
//!   deadlines, graceful shutdown (`http/edge/`).

// Nothing is `pub` that no one outside its module tree can reach: the public surface is
// what `main.rs`, the benches and the tests use (the tests and benches, being other
// crates, are not held to it).
#![warn(unreachable_pub)]

pub mod backend;
pub mod batch;
pub mod calibration;
pub mod cli;
pub mod config;
pub mod days;
pub mod draw;
pub mod engine;
pub mod error;
pub mod http;
pub mod in_flight;
pub mod json;
pub mod ledger;
pub mod metrics;
pub mod models;
pub mod question;
pub mod quota;
pub mod request;
pub mod secret;
pub mod shipped;
pub mod stores;
pub mod telemetry;

pub use http::edge::{serve, Edge};
pub use http::state::{build_state, upstream_client, AppState};

/// The service's router for a state (what `serve` runs).
pub fn app(state: AppState) -> axum::Router {
    http::router(state)
}
