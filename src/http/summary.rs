//! What the one "request finished" line says beyond status and latency: the key, the model,
//! the question count and the upstream requests, noted by the handlers as they learn them.
//!
//! Why not fields of the request's tracing span, recorded as they come: the fmt layer
//! formats a span's fields when it opens and again at every `record`, and writes them all
//! into every line of the span; a line at the end that carries them once costs less. The
//! span keeps the request id alone, so a warning inside the request still names it.

use std::sync::{Mutex, MutexGuard};

/// The summary fields of one request, noted as the steps learn them (the request's
/// [`super::context::RequestContext`] carries it); each stays out of the line until noted.
#[derive(Debug, Default)]
pub(super) struct Summary {
    fields: Mutex<Fields>,
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
}

impl Summary {
    /// What was noted so far.
    pub(super) fn fields(&self) -> Fields {
        self.lock().clone()
    }

    /// Notes the caller's key name.
    pub(super) fn note_key(&self, name: &str) {
        self.lock().key = Some(name.to_owned());
    }

    /// Notes the model that serves and how many questions it is asked.
    pub(super) fn note_model(&self, name: &str, questions: usize) {
        let mut fields = self.lock();
        fields.model = Some(name.to_owned());
        fields.questions = Some(questions);
    }

    /// Notes the upstream requests sent.
    pub(super) fn note_upstream_requests(&self, count: u64) {
        self.lock().upstream_requests = Some(count);
    }

    fn lock(&self) -> MutexGuard<'_, Fields> {
        // Plain values: still usable after a panic elsewhere.
        self.fields.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_reach_their_summary_only() {
        let summary = Summary::default();
        summary.note_key("acme");
        summary.note_model("gemma", 3);
        summary.note_upstream_requests(6);
        let fields = summary.fields();
        assert_eq!(fields.key.as_deref(), Some("acme"));
        assert_eq!(fields.model.as_deref(), Some("gemma"));
        assert_eq!(fields.questions, Some(3));
        assert_eq!(fields.upstream_requests, Some(6));
        assert!(Summary::default().fields().key.is_none());
    }
}
