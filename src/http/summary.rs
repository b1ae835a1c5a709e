//! What the one "request finished" line says beyond status and latency: the key, the model,
//! the question count and the upstream requests, noted by the handlers as they learn them.
//!
//! Why not fields of the request's tracing span, recorded as they come: the fmt layer
//! formats a span's fields when it opens and again at every `record`, and writes them all
//! into every line of the span; a line at the end that carries them once costs less. The
//! span keeps the request id alone, so a warning inside the request still names it.

use std::sync::{Arc, Mutex, MutexGuard};

tokio::task_local! {
    /// The summary of the request whose task this is.
    static CURRENT: Arc<Summary>;
}

/// The summary fields of one request; each stays out of the line until noted.
#[derive(Debug, Default)]
pub(super) struct Summary {
    fields: Mutex<Fields>,
    /// Which request this is (the ledger's record names it).
    identity: Option<Identity>,
}

/// The request a summary belongs to.
#[derive(Debug, Clone)]
pub(super) struct Identity {
    /// `req_<hex>`.
    pub request_id: String,
    /// The matched route.
    pub route: String,
    /// When it arrived.
    pub started: std::time::Instant,
    /// When it arrived, in milliseconds since the Unix epoch.
    pub at_ms: i64,
}

/// The fields, as plain values.
#[derive(Debug, Default, Clone)]
pub(super) struct Fields {
    /// The API key's name (never the key).
    pub key: Option<String>,
    /// The configured model that served.
    pub model: Option<String>,
    /// Questions asked (rerank: documents).
    pub questions: Option<usize>,
    /// Upstream requests sent.
    pub upstream_requests: Option<u64>,
    /// The ledger holds this request's record (or its miss was counted).
    pub recorded: bool,
}

impl Summary {
    /// The summary of the request `request_id` on `route`, arriving now.
    pub(super) fn for_request(request_id: &str, route: &str) -> Self {
        Summary {
            fields: Mutex::default(),
            identity: Some(Identity {
                request_id: request_id.to_owned(),
                route: route.to_owned(),
                started: std::time::Instant::now(),
                at_ms: crate::ledger::now_ms(),
            }),
        }
    }

    /// Which request this is (none outside the request middleware).
    pub(super) fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    /// Runs `request` with this summary as its task's current one.
    pub(super) async fn scope<F: std::future::Future>(self: &Arc<Self>, request: F) -> F::Output {
        CURRENT.scope(self.clone(), request).await
    }

    /// What was noted so far.
    pub(super) fn fields(&self) -> Fields {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, Fields> {
        // Plain values: still usable after a panic elsewhere.
        self.fields.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Notes a field on the current request's summary; outside a request (a test calling a
/// handler directly) there is none, and nothing happens.
fn note(set: impl FnOnce(&mut Fields)) {
    let _ = CURRENT.try_with(|summary| set(&mut summary.lock()));
}

/// The current request's identity and what was noted so far (none outside a request).
pub(super) fn current() -> Option<(Identity, Fields)> {
    CURRENT
        .try_with(|summary| Some((summary.identity.clone()?, summary.fields())))
        .ok()
        .flatten()
}

/// Notes that the ledger holds the current request's record.
pub(super) fn note_recorded() {
    note(|f| f.recorded = true);
}

/// Notes the caller's key name.
pub(super) fn note_key(name: &str) {
    note(|f| f.key = Some(name.to_owned()));
}

/// Notes the model that serves and how many questions it is asked.
pub(super) fn note_model(name: &str, questions: usize) {
    note(|f| {
        f.model = Some(name.to_owned());
        f.questions = Some(questions);
    });
}

/// Notes the upstream requests sent.
pub(super) fn note_upstream_requests(count: u64) {
    note(|f| f.upstream_requests = Some(count));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notes_reach_the_scoped_summary_only() {
        note_key("outside");
        let summary = Arc::new(Summary::default());
        summary
            .scope(async {
                note_key("acme");
                note_model("gemma", 3);
                note_upstream_requests(6);
            })
            .await;
        let fields = summary.fields();
        assert_eq!(fields.key.as_deref(), Some("acme"));
        assert_eq!(fields.model.as_deref(), Some("gemma"));
        assert_eq!(fields.questions, Some(3));
        assert_eq!(fields.upstream_requests, Some(6));
        assert!(Arc::new(Summary::default()).fields().key.is_none());
    }
}
