//! The request middleware: each request's id, tracing span, summary line and metrics, the
//! ledger's record of a door's refusal, and the count of a request its client abandoned.

use axum::extract::{MatchedPath, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::context::{RequestContext, REQUEST_ID, TYPESAFE_REQUEST_ID};
use super::flow::ledger_step;
use super::summary;
use super::trace;
use super::AppState;
use crate::error::Code;
use crate::telemetry::StepSpan;

/// Gives each request its [`RequestContext`] (id, route, arrival, summary) as an extension
/// for the handlers, a tracing span and one summary log line; records a door's refusal in
/// the ledger; puts the id on the response. The log names the route and outcome only, never
/// the caller's content.
pub(super) async fn request_context(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let context = RequestContext::arriving(route);
    request.extensions_mut().insert(context.clone());
    let server = trace::server(
        request.method(),
        &context.route,
        &context.id.0,
        request.headers(),
    );
    // Made in the SERVER span, so that span is its parent: an event made under it (no step
    // current) finds its request's span by walking up the parents.
    let span = server.in_scope(|| tracing::info_span!("request", request_id = %context.id.0));
    let mut abandoned = Abandoned {
        state: &state,
        context: &context,
        span: &span,
        server: &server,
        armed: true,
    };
    // Its steps find the SERVER span's stand-in; the span itself need not be entered.
    let mut response = StepSpan::of(&server)
        .scope(next.run(request))
        .instrument(span.clone())
        .await;
    let code = response.extensions().get::<Code>().copied();
    ledger_step::refused(&state, &context, response.status().as_u16(), code).await;
    abandoned.armed = false;
    let code = response.extensions().get::<Code>().map(|c| c.as_str());
    let latency = context.started.elapsed();
    let route = context.route.as_str();
    let status = response.status().as_u16();
    state
        .metrics
        .count_request(route, status, code.unwrap_or(""), latency);
    let fields = context.summary.fields();
    trace::ended(&server, status, code, fields.key.as_deref());
    span.in_scope(|| {
        let code = code.unwrap_or("");
        log_summary(Ending::Finished, route, status, code, latency, &fields)
    });
    if let Ok(value) = HeaderValue::from_str(&context.id.0) {
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
/// request's handler when its client closes the connection before the response is made
/// (the middleware disarms it once the response is made).
struct Abandoned<'a> {
    state: &'a AppState,
    context: &'a RequestContext,
    span: &'a tracing::Span,
    /// The request's exported SERVER span.
    server: &'a tracing::Span,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let route = self.context.route.as_str();
        let elapsed = self.context.started.elapsed();
        self.state
            .metrics
            .count_request(route, CLIENT_CLOSED_STATUS, "client_closed", elapsed);
        let fields = self.context.summary.fields();
        let caller = fields.key.as_deref();
        trace::ended(
            self.server,
            CLIENT_CLOSED_STATUS,
            Some("client_closed"),
            caller,
        );
        self.span.in_scope(|| {
            log_summary(
                Ending::Abandoned,
                route,
                CLIENT_CLOSED_STATUS,
                "client_closed",
                elapsed,
                &fields,
            )
        });
    }
}
