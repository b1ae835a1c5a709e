//! [`Routing`]: the routing key every read of one request carries, for a router in front of
//! several replicas (vllm-router, SGLang's model gateway, production-stack's session
//! router) to keep a request's reads, and a state asked again, on one replica.
//!
//! The key is the hex of a hash of what the prompts' shared head holds (model, state,
//! images, layout), computed by the engine; never the caller's text, API key or identity.
//! A backend sees the text itself in the body, so the hash tells it nothing more.

use hyper::header::{HeaderName, HeaderValue};

/// The headers (by the model's configuration) and the key they carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// Each configured header with the key as its value.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Routing {
    /// `key` (hex digits) in each of `names`; `None` when no header is configured (or the
    /// key is not a header value, which hex always is).
    pub fn new(names: &[HeaderName], key: &str) -> Option<Self> {
        let value = HeaderValue::from_str(key).ok()?;
        let headers: Vec<_> = names.iter().map(|n| (n.clone(), value.clone())).collect();
        (!headers.is_empty()).then_some(Routing { headers })
    }

    /// The headers, for a dialect's request.
    pub(crate) fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_goes_in_every_configured_header_and_none_without_one() {
        let names = [
            HeaderName::from_static("x-session-id"),
            HeaderName::from_static("x-smg-routing-key"),
        ];
        let routing = Routing::new(&names, "0a1b").expect("configured");
        let sent: Vec<(&str, &str)> = routing
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().expect("ascii")))
            .collect();
        assert_eq!(
            sent,
            [("x-session-id", "0a1b"), ("x-smg-routing-key", "0a1b")]
        );
        assert_eq!(Routing::new(&[], "0a1b"), None);
        assert_eq!(Routing::new(&names, "bad\nvalue"), None);
    }
}
