//! Every route's operation: documentation-only functions (the real handlers take raw
//! bodies) whose `utoipa::path` attributes say the method, the path, the bodies and the
//! refusals.

#![allow(dead_code)] // Documentation only: utoipa reads these functions, nothing calls them.

use super::refusals::{ContractErrors, DecisionErrors, KeyErrors, LedgerErrors};
use super::schemas::*;

/// Answer typed questions about a state (TypeSafe's System One request).
#[utoipa::path(post, path = "/v1/systemone", tag = "decisions",
    request_body(content = SystemOneRequest, content_type = "application/json"),
    responses((status = 200, description = "Every answer, in question order.", body = SystemOneResponse), ContractErrors),
    security((), ("bearer" = [])))]
pub(super) fn systemone() {}

/// OpenAI's Decisions API (`client.decisions.create`).
#[utoipa::path(post, path = "/v1/decisions", tag = "decisions",
    request_body(content = DecisionRequest, content_type = "application/json"),
    responses((status = 200, description = "OpenAI's Decision.", body = Decision), DecisionErrors),
    security((), ("bearer" = [])))]
pub(super) fn decisions() {}

/// Cohere's rerank: one noul per document.
#[utoipa::path(post, path = "/v2/rerank", tag = "rerank",
    request_body(content = RerankRequest, content_type = "application/json"),
    responses((status = 200, description = "Results by score, descending.", body = RerankResponse), ContractErrors),
    security((), ("bearer" = [])))]
pub(super) fn rerank_v2() {}

/// The same as `/v2/rerank` (TEI and Jina clients call this path).
#[utoipa::path(post, path = "/v1/rerank", tag = "rerank",
    request_body(content = RerankRequest, content_type = "application/json"),
    responses((status = 200, description = "Results by score, descending.", body = RerankResponse), ContractErrors),
    security((), ("bearer" = [])))]
pub(super) fn rerank_v1() {}

/// The models served, in TypeSafe's shape and OpenAI's.
#[utoipa::path(get, path = "/v1/models", tag = "service",
    responses((status = 200, description = "The models and every name for them.", body = ModelsResponse), KeyErrors),
    security((), ("bearer" = [])))]
pub(super) fn models() {}

/// Each key's answered requests and usage per UTC day: the admin key reads every key's,
/// any other key its own.
#[utoipa::path(get, path = "/v1/usage", tag = "service",
    params(
        ("key" = Option<String>, Query, description = "A configured key's name (default: the caller's; every key for the admin key)"),
        ("from" = Option<String>, Query, description = "First UTC day, YYYY-MM-DD (default today)"),
        ("to" = Option<String>, Query, description = "Last UTC day, YYYY-MM-DD, inclusive (default today; at most 366 days after from)")),
    responses(
        (status = 200, description = "The usage.", body = UsageReport),
        (status = 401, description = "A wrong key.", body = ErrorBody),
        (status = 403, description = "A missing key, or another key's usage asked by a key that is not the admin key.", body = ErrorBody),
        (status = 422, description = "A bad parameter.", body = ErrorBody),
        (status = 429, description = "The key's requests per minute.", body = ErrorBody),
        (status = 503, description = "The limit store is unavailable.", body = ErrorBody)),
    security((), ("bearer" = [])))]
pub(super) fn usage() {}

/// A page of decision records, newest first: a key's own, every key's for the admin key.
/// Names and labels come back as sent only where the query names them.
#[utoipa::path(get, path = "/v1/ledger/decisions", tag = "ledger",
    params(
        ("since" = Option<String>, Query, description = "At or after: Unix milliseconds or a UTC date YYYY-MM-DD"),
        ("until" = Option<String>, Query, description = "Before: Unix milliseconds or a UTC date YYYY-MM-DD"),
        ("model" = Option<String>, Query, description = "Only this configured model"),
        ("route" = Option<String>, Query, description = "Only this route, e.g. /v1/systemone"),
        ("has_outcome" = Option<bool>, Query, description = "Only records with (true) or without (false) an outcome"),
        ("limit" = Option<u32>, Query, description = "Records per page, 1 to 1000 (default 100)"),
        ("cursor" = Option<String>, Query, description = "The previous page's next_cursor"),
        ("question" = Option<Vec<String>>, Query, description = "Question ids to show by name (repeatable)"),
        ("label" = Option<Vec<String>>, Query, description = "Choice labels to show by name (repeatable)")),
    responses((status = 200, description = "The page.", body = LedgerPage), LedgerErrors),
    security((), ("bearer" = [])))]
pub(super) fn ledger_decisions() {}

/// The calibration watch's figures per model and question shape over the hours, days or
/// weeks kept, or over each shape's last 250 to 300 answers (`window=recent`): with outcomes (accuracy, ECE, Brier, NLL, reliability) and without (mean
/// confidence and option_mass, PSI, CBPE, the EM label prior). A key sees its own answers'
/// figures; the admin key every key's, merged.
#[utoipa::path(get, path = "/v1/calibration", tag = "ledger",
    params(CalibrationQuery),
    responses((status = 200, description = "The figures.", body = CalibrationPage), LedgerErrors),
    security((), ("bearer" = [])))]
pub(super) fn calibration() {}

/// The same figures drawn as SVG by the service (what the `/calibration` page shows): per
/// shape, the reliability diagram and the confidence histogram over the windows shown, and
/// each drift figure over them. JSON holding SVG text (no script, no external resource).
#[utoipa::path(get, path = "/v1/calibration/charts", tag = "ledger",
    params(CalibrationQuery),
    responses((status = 200, description = "The charts.", body = CalibrationCharts), LedgerErrors),
    security((), ("bearer" = [])))]
#[allow(dead_code)]
pub(super) fn calibration_charts() {}

/// One decision record.
#[utoipa::path(get, path = "/v1/ledger/decisions/{request_id}", tag = "ledger",
    params(
        ("request_id" = String, Path, description = "The answer's x-request-id"),
        ("question" = Option<Vec<String>>, Query, description = "Question ids to show by name (repeatable)"),
        ("label" = Option<Vec<String>>, Query, description = "Choice labels to show by name (repeatable)")),
    responses((status = 200, description = "The record.", body = LedgerDecision), LedgerErrors),
    security((), ("bearer" = [])))]
pub(super) fn ledger_decision() {}

/// Records what was true for one question of a decision (or a person's override): once per
/// question; `replace: true` replaces it and keeps the old one as history.
#[utoipa::path(post, path = "/v1/ledger/decisions/{request_id}/outcomes", tag = "ledger",
    params(("request_id" = String, Path, description = "The answer's x-request-id")),
    request_body = OutcomeRequest,
    responses(
        (status = 201, description = "Recorded.", body = OutcomeRecorded),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 409, description = "The question already has an outcome and replace was not asked.", body = ErrorBody),
        LedgerErrors),
    security((), ("bearer" = [])))]
pub(super) fn ledger_outcomes() {}

/// Liveness: 200 while the process runs.
#[utoipa::path(get, path = "/healthz", tag = "service",
    responses((status = 200, description = "Alive.", body = Health)))]
pub(super) fn healthz() {}

/// Readiness: every model's backend answered and its token table is verified.
#[utoipa::path(get, path = "/readyz", tag = "service",
    responses(
        (status = 200, description = "Every model is ready.", body = Readiness),
        (status = 503, description = "Some model is not ready.", body = Readiness)))]
pub(super) fn readyz() {}

/// Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "The metrics.", body = String, content_type = "text/plain")))]
pub(super) fn metrics() {}

/// The playground: a page that asks `/v1/systemone` and draws the answers (no key needed
/// for the page; its API calls need one when keys are configured).
#[utoipa::path(get, path = "/playground", tag = "service",
    responses((status = 200, description = "The page.", body = String, content_type = "text/html; charset=utf-8")))]
pub(super) fn playground() {}

/// The calibration watch's page: the charts of `/v1/calibration/charts` for the key typed
/// into it (no key needed for the page; its API calls need one when keys are configured).
#[utoipa::path(get, path = "/calibration", tag = "service",
    responses((status = 200, description = "The page.", body = String, content_type = "text/html; charset=utf-8")))]
#[allow(dead_code)]
pub(super) fn calibration_page() {}

/// To the playground.
#[utoipa::path(get, path = "/", tag = "service",
    responses((status = 307, description = "Redirects to `playground`.", headers(("location" = String, description = "The playground")))))]
pub(super) fn root() {}

/// This description.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "OpenAPI 3.1.", body = Object)))]
pub(super) fn openapi_json() {}
