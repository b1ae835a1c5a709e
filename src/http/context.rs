//! Which request this is: its id, as every response and the ledger name it.

use axum::http::HeaderName;

/// The request id every response carries (`req_<32 hex>`).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl RequestId {
    /// A fresh id: a UUIDv7 (RFC 9562), whose first 48 bits are the Unix time in ms and the
    /// rest random, so ids made later sort later. The ledger's primary key is the request
    /// id: in time order, a batch of records adds to one end of its index instead of
    /// touching a random page of it per record, which SQLite writes whole into its WAL.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        RequestId(format!("req_{}", uuid::Uuid::now_v7().simple()))
    }
}

/// `x-typesafe-request-id`, which the Python SDK reads.
pub static TYPESAFE_REQUEST_ID: HeaderName = HeaderName::from_static("x-typesafe-request-id");
/// `x-request-id`, the same value for everything else.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
