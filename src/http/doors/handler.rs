//! The one handler every door runs under: parse → plan → run → answer, with what is the
//! door's own asked of its [`Door`].

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tracing::Instrument;

use super::Door;
use crate::batch::OnlineRequest;
use crate::error::{ApiError, Code};
use crate::http::auth::scope::Scope;
use crate::http::auth::Caller;
use crate::http::blocking;
use crate::http::body;
use crate::http::context::RequestContext;
use crate::http::flow;
use crate::http::flow::headers::{set_escalation_headers, set_model_header};
use crate::http::trace;
use crate::http::AppState;

/// The handler of door `D`: the caller is authenticated (and must have the `ask` scope)
/// before the body is read, and every refusal goes out in `D`'s shape. No batch line starts
/// from the request's arrival until its answer is written ([`crate::batch::Online`]).
pub(in crate::http) async fn serve<D: Door>(
    State(state): State<AppState>,
    context: RequestContext,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let online = state.batches.online.arrive();
    let answered = match caller.and_then(|c| c.require(Scope::Ask).map(|()| c)) {
        Ok(caller) => answer::<D>(&state, &context, &caller, &headers, body).await,
        Err(e) => Err(e),
    };
    held_until_written(answered.unwrap_or_else(D::refuse), online)
}

/// `response`, its body holding `online` until the server has written it (or dropped it,
/// the caller gone): the middleware's work after the handler (a refusal's ledger record)
/// and the write itself still count as the request in progress.
fn held_until_written(response: Response, online: OnlineRequest) -> Response {
    response.map(|body| {
        Body::new(Held {
            body,
            _online: online,
        })
    })
}

/// A response body and the online request it answers, released together; the body's length
/// and end are the inner body's, so the server still sends `content-length`.
struct Held {
    body: Body,
    _online: OnlineRequest,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Door `D`'s answer to `body` (JSON text) from `caller`, in this process: the same steps
/// and the same bytes as the route's, for a batch line. The caller's `ask` scope is checked
/// and its tier's routes as the route checks them; its requests per minute are not counted (the batch was one
/// request), its questions per minute and per day are, line by line.
pub(in crate::http) async fn serve_in_process<D: Door>(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    body: String,
) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    let allowed = caller
        .require(Scope::Ask)
        .and_then(|()| caller.allow_route(&context.route).map_err(ApiError::from));
    let span = trace::batch_line(&context.route, &context.id.0);
    let answered = match allowed {
        Ok(()) => {
            answer::<D>(state, context, caller, &headers, Body::from(body))
                .instrument(span.clone())
                .await
        }
        Err(e) => Err(e),
    };
    let response = answered.unwrap_or_else(D::refuse);
    let code = response.extensions().get::<Code>().map(|c| c.as_str());
    trace::ended(&span, response.status().as_u16(), code, None);
    response
}

/// Body → the door's plan (on the blocking pool when heavy) → [`flow::run`] → the door's
/// answer, with the model that served and what escalation did.
async fn answer<D: Door>(
    state: &AppState,
    context: &RequestContext,
    caller: &Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let validation = trace::validation();
    let body = validation
        .clone()
        .scope(body::read_request(
            headers,
            body,
            state.limits.max_body_bytes,
            &state.body_budget,
        ))
        .await?;
    D::admit(&body)?;
    state.models.tables_built().await;
    let weight = D::weight(&body, &state.models);
    let (models, limits) = (state.models.clone(), state.limits.clone());
    // The image parts are dropped with the closure: they live on, re-encoded, in the plan.
    let plan = validation
        .scope(blocking::run(body.len, weight, move || {
            D::plan(body.json, &body.parts, &models.routes(), &limits)
        }))
        .await??;
    let requests = D::requests(&plan);
    // Validated: the body's memory goes back to the budget before the upstream reads,
    // unless a request is still to be counted by the backend's tokenizer: its texts are
    // copied into that count, so the share covers them until the flow ends.
    let _counting = requests
        .iter()
        .any(|r| r.recount().is_some())
        .then_some(body.share);
    let answered = flow::run(state, context, caller, requests)
        .await
        .map_err(|e| D::in_door_terms(e, &plan))?;
    let mut response = D::respond(&plan, &answered, context)?;
    set_model_header(&requests[0].model().name, response.headers_mut());
    set_escalation_headers(&answered, response.headers_mut());
    Ok(response)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::batch::Online;

    #[tokio::test]
    async fn an_online_request_lasts_until_its_answer_is_written() {
        let online = Online::new(Duration::ZERO);
        let response = held_until_written(Response::new(Body::from("{}")), online.arrive());
        assert_eq!(online.in_progress(), 1, "made is not yet written");
        assert_eq!(http_body::Body::size_hint(response.body()).exact(), Some(2));
        let written = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        assert_eq!(written.expect("a body").as_ref(), b"{}");
        assert_eq!(online.in_progress(), 0);
    }
}
