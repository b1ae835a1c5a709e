//! The headers every door sets on an answer: the model that served, what escalation did,
//! and the top-level fields the body held that this service ignored.

use axum::http::{HeaderMap, HeaderValue};

use super::AnsweredCall;
use crate::request::Ignored;

/// The header that names the configured model that served (its public name; the fallback
/// while the requested model's circuit is open), which a later request may use. The body's
/// `model` is the backend's own id, as the contract says.
const MODEL_HEADER: &str = "x-systemone-model";

/// Names the model that served in [`MODEL_HEADER`].
pub(in crate::http) fn set_model_header(name: &str, headers: &mut HeaderMap) {
    if let Ok(value) = HeaderValue::from_str(name) {
        headers.insert(MODEL_HEADER, value);
    }
}

/// The header with the count of answers another model gave (sent when the serving model
/// escalates, 0 included).
const ESCALATED_HEADER: &str = "x-systemone-escalated";
/// The header that says an escalation failed and the first answers stand (`failed`).
const ESCALATION_HEADER: &str = "x-systemone-escalation";

/// Says what escalation when unsure did: [`ESCALATED_HEADER`] when the serving model
/// escalates, and [`ESCALATION_HEADER`] when an escalation failed.
pub(in crate::http) fn set_escalation_headers(answered: &AnsweredCall, headers: &mut HeaderMap) {
    let report = &answered.escalation;
    if !report.configured {
        return;
    }
    headers.insert(ESCALATED_HEADER, HeaderValue::from(report.answers));
    if report.failed {
        headers.insert(ESCALATION_HEADER, HeaderValue::from_static("failed"));
    }
}

/// The header that names the top-level fields a request held and this service ignored.
const IGNORED_FIELDS_HEADER: &str = "x-systemone-ignored-fields";

/// Names the ignored top-level fields in [`IGNORED_FIELDS_HEADER`] (to the caller, who sent
/// them) and counts them in a debug line (the log gets no names: they are the caller's).
pub(in crate::http) fn set_ignored_header(ignored: &Ignored, headers: &mut HeaderMap) {
    if ignored.count == 0 {
        return;
    }
    tracing::debug!(
        ignored_fields = ignored.count,
        "the body has top-level fields this service does not read"
    );
    let listed = ignored.names.join(", ");
    let value = if ignored.names.len() == ignored.count {
        listed
    } else {
        let unlisted = ignored.count - ignored.names.len();
        format!(
            "{listed}{}({unlisted} more)",
            if listed.is_empty() { "" } else { ", " }
        )
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(IGNORED_FIELDS_HEADER, value);
    }
}
