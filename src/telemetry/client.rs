//! Posting a batch to the collector: OTLP/HTTP with a protobuf body, on the service's own
//! `reqwest` (a client of its own: no connection shared with the backends'), from the export
//! task on the service's runtime.

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

use super::encode;
use super::record::SpanRecord;

/// The OTLP default for one export, the collector's answer included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a collector's answer read (an OTLP answer is a few bytes).
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The instrumentation scope the spans are exported under.
const SCOPE: &str = "systemone";

/// Where and how batches are sent.
#[derive(Debug)]
pub(super) struct Exporter {
    client: reqwest::Client,
    endpoint: String,
    /// `OTEL_EXPORTER_OTLP_HEADERS`, then `_TRACES_HEADERS` (the more specific wins).
    headers: HeaderMap,
    /// The resource's attributes, sent with each batch.
    resource: Vec<(String, String)>,
}

impl Exporter {
    /// An exporter to `endpoint`, configured from the standard variables read through `env`.
    pub(super) fn new(
        endpoint: String,
        resource: Vec<(String, String)>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(timeout(&env))
            .build()
            .map_err(|e| format!("cannot build the trace exporter's HTTP client: {e}"))?;
        let mut headers = HeaderMap::new();
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some(list) = env(name) {
                add_headers(&list, &mut headers);
            }
        }
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        Ok(Exporter {
            client,
            endpoint,
            headers,
            resource,
        })
    }

    /// Encodes and posts `spans`; an error says why the collector did not take them.
    pub(super) async fn export(&self, spans: &[SpanRecord]) -> Result<(), String> {
        let body = encode::request(&self.resource, SCOPE, spans);
        let mut answer = self
            .client
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .body(body)
            .send()
            .await
            .map_err(|e| format!("cannot send to {}: {e}", self.endpoint))?;
        let status = answer.status();
        let mut read = 0;
        while let Ok(Some(chunk)) = answer.chunk().await {
            read += chunk.len();
            if read > MAX_ANSWER_BYTES {
                break;
            }
        }
        if status.is_success() {
            Ok(())
        } else {
            Err(format!(
                "the collector at {} answered {status}",
                self.endpoint
            ))
        }
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds),
/// else 10 s.
fn timeout(env: &impl Fn(&str) -> Option<String>) -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| env(name)?.trim().parse::<u64>().ok().filter(|ms| *ms > 0))
    .map_or(EXPORT_TIMEOUT, Duration::from_millis)
}

/// Adds the `key=value,key=value` list `list` (values percent-decoded, as the OTLP spec
/// says) to `headers`; an entry that is not a valid header is skipped, as the SDKs do.
fn add_headers(list: &str, headers: &mut HeaderMap) {
    for (key, value) in pairs(list) {
        let name = HeaderName::from_bytes(key.as_bytes());
        let value = HeaderValue::from_str(&value);
        if let (Ok(name), Ok(value)) = (name, value) {
            headers.insert(name, value);
        }
    }
}

/// The `key=value` pairs of a W3C-baggage-like list (OTLP headers, resource attributes):
/// trimmed, percent-decoded, those without a key or `=` left out.
pub(super) fn pairs(list: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s.trim())
            .decode_utf8_lossy()
            .into_owned()
    };
    list.split(',')
        .filter_map(|entry| entry.split_once('='))
        .filter(|(k, _)| !k.trim().is_empty())
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_parsed_decoded_and_the_traces_ones_win() {
        let env = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_HEADERS" => {
                Some("authorization=Bearer%20a, x-tenant=ops,bad".into())
            }
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS" => Some("x-tenant=traces".into()),
            "OTEL_EXPORTER_OTLP_TIMEOUT" => Some("2500".into()),
            _ => None,
        };
        let exporter = Exporter::new("http://c/v1/traces".into(), vec![], env).expect("built");
        assert_eq!(exporter.headers["authorization"], "Bearer a");
        assert_eq!(exporter.headers["x-tenant"], "traces");
        assert_eq!(exporter.headers.len(), 3, "{:?}", exporter.headers);
        assert_eq!(timeout(&env), Duration::from_millis(2500));
        assert_eq!(timeout(&|_: &str| None), EXPORT_TIMEOUT);
    }
}
