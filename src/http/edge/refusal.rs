//! What the edge checks in a request head, and the contract response it writes itself
//! when it refuses one (hyper never saw the request, so no handler can answer it).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{ApiError, Code, ERROR_CODE_HEADER, RETRY_AFTER_MS};
use crate::http::{RequestId, REQUEST_ID, TYPESAFE_REQUEST_ID};

/// A complete, acceptable head: its length, and its body's (`None`: chunked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    pub len: usize,
    pub body: Option<u64>,
}

/// Why a head is refused, as the caller and the metrics see it. Messages name the rule
/// and the limit, never a byte of the head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused {
    pub code: Code,
    pub message: String,
    pub rule: &'static str,
}

/// Checks the bytes of a head collected so far: `Ok(None)` while incomplete.
pub(super) fn check_head(
    bytes: &[u8],
    max_bytes: usize,
    max_headers: usize,
) -> Result<Option<Head>, Refused> {
    let too_large = |what: String| Refused {
        code: Code::HeadersTooLarge,
        message: what,
        rule: "headers_too_large",
    };
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() > max_bytes => {
            return Err(too_large(format!(
                "the request head is larger than the limit of {max_bytes} bytes"
            )))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(too_large(format!(
                "the request has more than the limit of {max_headers} header lines"
            )))
        }
        Err(e) => return Err(malformed(&format!("{e}"))),
    };
    if len > max_bytes {
        return Err(too_large(format!(
            "the request head is {len} bytes, more than the limit of {max_bytes}"
        )));
    }
    let target = request.path.unwrap_or_default();
    if target.parse::<axum::http::Uri>().is_err() {
        return Err(malformed("invalid request target"));
    }
    Ok(Some(Head {
        len,
        body: body_length(request.headers)?,
    }))
}

fn malformed(what: &str) -> Refused {
    Refused {
        code: Code::BadRequestHead,
        message: format!("the request head is malformed: {what}"),
        rule: "bad_request_head",
    }
}

/// The body's framing as hyper will read it: chunked (`None`), one agreed
/// `Content-Length`, or none (empty). What hyper would refuse is refused here.
fn body_length(headers: &[httparse::Header<'_>]) -> Result<Option<u64>, Refused> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for header in headers {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = header
                .value
                .rsplit(|b| *b == b',')
                .next()
                .unwrap_or_default();
            chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            if !chunked {
                return Err(malformed(
                    "a transfer-encoding that does not end in chunked",
                ));
            }
        } else if header.name.eq_ignore_ascii_case("content-length") {
            for value in header.value.split(|b| *b == b',') {
                let value = std::str::from_utf8(value.trim_ascii())
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| malformed("an invalid content-length"))?;
                if length.is_some_and(|l| l != value) {
                    return Err(malformed("content-length values that disagree"));
                }
                length = Some(value);
            }
        }
    }
    Ok(if chunked {
        None
    } else {
        Some(length.unwrap_or(0))
    })
}

/// Most bytes read and dropped after a refusal, and for how long, so the client reads the
/// answer instead of a reset (closing a socket with unread data sends RST).
const LINGER_BYTES: usize = 64 * 1024;
const LINGER: Duration = Duration::from_secs(1);

/// A refusal on its way out: the response bytes, then a half-close and a short linger.
pub(super) struct Refusal {
    bytes: Vec<u8>,
    written: usize,
    shut: bool,
    drained: usize,
    linger: Pin<Box<tokio::time::Sleep>>,
}

impl Refusal {
    /// The refusal `error`, logged once (by rule and request id) as it is made.
    pub(super) fn new(error: ApiError, rule: &'static str) -> Self {
        let code = error.code;
        let id = RequestId::new();
        tracing::info!(
            request_id = %id.0,
            rule,
            status = code.status().as_u16(),
            error_code = code.as_str(),
            "request refused at the edge"
        );
        Refusal {
            bytes: response_bytes(&error, &id),
            written: 0,
            shut: false,
            drained: 0,
            linger: Box::pin(tokio::time::sleep(LINGER)),
        }
    }

    /// Writes the response, half-closes, then reads and drops what the client still sends
    /// until it closes, [`LINGER_BYTES`] or [`LINGER`].
    pub(super) fn poll_send<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while self.written < self.bytes.len() {
            let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.bytes[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        if !self.shut {
            ready!(Pin::new(&mut *io).poll_shutdown(cx))?;
            self.shut = true;
        }
        let mut scratch = [0u8; 4096];
        while self.drained < LINGER_BYTES {
            let mut read = ReadBuf::new(&mut scratch);
            match Pin::new(&mut *io).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) if !read.filled().is_empty() => {
                    self.drained += read.filled().len();
                }
                Poll::Ready(_) => break,
                Poll::Pending => {
                    ready!(self.linger.as_mut().poll(cx));
                    break;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// A whole HTTP/1.1 response for `error`, closing the connection: the status, the JSON
/// body and the headers every error response carries.
pub(super) fn response_bytes(error: &ApiError, id: &RequestId) -> Vec<u8> {
    let status = error.status();
    let body = serde_json::to_vec(&error.body()).unwrap_or_default();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{}: {}\r\n{}: {}\r\n{}: {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len(),
        ERROR_CODE_HEADER.as_str(),
        error.code.as_str(),
        REQUEST_ID.as_str(),
        id.0,
        TYPESAFE_REQUEST_ID.as_str(),
        id.0,
    );
    if let Some(secs) = error.retry_after {
        head.push_str(&format!(
            "retry-after: {secs}\r\n{}: {}\r\n",
            RETRY_AFTER_MS.as_str(),
            secs * 1000
        ));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(head: &str) -> Result<Option<Head>, Refused> {
        check_head(head.as_bytes(), 1024, 8)
    }

    #[test]
    fn a_good_head_is_measured_with_its_body() {
        let head = "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-length: 12\r\n\r\n";
        assert_eq!(
            check(head),
            Ok(Some(Head {
                len: head.len(),
                body: Some(12)
            }))
        );
        let get = "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
        assert_eq!(
            check(get),
            Ok(Some(Head {
                len: get.len(),
                body: Some(0)
            }))
        );
        let chunked = "POST / HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n";
        assert_eq!(check(chunked).map(|h| h.map(|h| h.body)), Ok(Some(None)));
        assert_eq!(check("GET / HTTP/1.1\r\nhost: x"), Ok(None));
    }

    #[test]
    fn bad_heads_are_refused_by_rule_without_their_bytes() {
        let refused = |head: &str| check(head).expect_err(head);
        let del = refused("GET / HTTP/1.1\r\nx-secret: ab\x7fcd\r\n\r\n");
        assert_eq!(del.code, Code::BadRequestHead);
        assert!(!del.message.contains("secret"), "{}", del.message);
        let many: String = (0..9).map(|i| format!("h{i}: v\r\n")).collect();
        let too_many = refused(&format!("GET / HTTP/1.1\r\n{many}\r\n"));
        assert_eq!(too_many.code, Code::HeadersTooLarge);
        assert!(too_many.message.contains("limit of 8 header lines"));
        let long = refused(&format!("GET / HTTP/1.1\r\nx: {}", "a".repeat(1100)));
        assert!(
            long.message.contains("limit of 1024 bytes"),
            "{}",
            long.message
        );
        for bad in [
            "POST / HTTP/1.1\r\ncontent-length: 1x\r\n\r\n",
            "POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            "POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
        ] {
            assert_eq!(refused(bad).code, Code::BadRequestHead, "{bad:?}");
        }
    }

    #[test]
    fn the_response_is_a_contract_error_that_closes() {
        let error = ApiError::new(Code::Overloaded, "too many connections").retry_after(1);
        let id = RequestId("req_0".into());
        let text = String::from_utf8(response_bytes(&error, &id)).unwrap_or_default();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        for line in [
            "connection: close",
            "x-request-id: req_0",
            "x-systemone-error-code: system_one_overloaded",
            "retry-after: 1",
            &format!("content-length: {}", body.len()),
        ] {
            assert!(head.contains(line), "{line} missing from {head}");
        }
        let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        assert_eq!(json["error"]["code"], "system_one_overloaded");
    }
}
