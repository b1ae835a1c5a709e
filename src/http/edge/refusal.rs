//! What the edge checks in a request head, the contract response it writes itself when it
//! refuses one (hyper never saw the request, so no handler can answer it), and the
//! lingering close that lets a client read an answer given before it finished sending.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

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

/// Most bytes read and dropped in a brief linger, and for how long, so the client reads the
/// answer instead of a reset (closing a socket with unread data sends RST).
const LINGER_BYTES: u64 = 64 * 1024;
const LINGER: Duration = Duration::from_secs(1);
/// The largest unread rest of a request body that is drained after its response: a client
/// that writes its whole body before reading (most do) can then read the answer. Beyond
/// it the client is sending far more than any request may carry, and gets the brief linger.
const DRAIN_MAX_BYTES: u64 = 32 * 1024 * 1024;
/// The longest a drain may take in all; it also ends when nothing arrived for [`LINGER`].
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Closing a connection the client may still be sending on (Apache's and nginx's lingering
/// close): a half-close, then what the client still sends is read and dropped until it
/// closes, the byte budget is spent, nothing arrived for [`LINGER`], or the time is up.
pub(super) struct Linger {
    shut: bool,
    /// Bytes still to read and drop.
    budget: u64,
    /// When the linger ends at the latest.
    end: Instant,
    /// Fires [`LINGER`] after the last byte read, or at `end`.
    timer: Pin<Box<Sleep>>,
}

impl Linger {
    /// After a refused head, or a response whose request body had all arrived: at most
    /// [`LINGER_BYTES`] for [`LINGER`].
    pub(super) fn brief() -> Self {
        Self::new(LINGER_BYTES, LINGER)
    }

    /// After a response to a request whose body was not all read: its unread `rest`
    /// (`None`: unknown, a chunked body) is drained when it is at most
    /// [`DRAIN_MAX_BYTES`], for at most [`DRAIN_TIME`].
    pub(super) fn draining(rest: Option<u64>) -> Self {
        match rest.unwrap_or(DRAIN_MAX_BYTES) {
            rest @ 1..=DRAIN_MAX_BYTES => Self::new(rest + LINGER_BYTES, DRAIN_TIME),
            _ => Self::brief(),
        }
    }

    fn new(budget: u64, total: Duration) -> Self {
        let now = Instant::now();
        let end = now + total;
        Linger {
            shut: false,
            budget,
            end,
            timer: Box::pin(tokio::time::sleep_until((now + LINGER).min(end))),
        }
    }

    /// Half-closes `io`, then reads and drops what the client still sends, to the linger's
    /// end. Ends `Ok` however the linger ends: the answer is out.
    pub(super) fn poll_close<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.shut {
            ready!(Pin::new(&mut *io).poll_shutdown(cx))?;
            self.shut = true;
        }
        let mut scratch = [0u8; 16 * 1024];
        while self.budget > 0 {
            let mut read = ReadBuf::new(&mut scratch);
            match Pin::new(&mut *io).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) if !read.filled().is_empty() => {
                    self.budget = self.budget.saturating_sub(read.filled().len() as u64);
                    let next = (Instant::now() + LINGER).min(self.end);
                    self.timer.as_mut().reset(next);
                }
                Poll::Ready(_) => break,
                Poll::Pending => {
                    ready!(self.timer.as_mut().poll(cx));
                    break;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// A refusal on its way out: the response bytes, then a half-close and a brief linger.
pub(super) struct Refusal {
    bytes: Vec<u8>,
    written: usize,
    linger: Linger,
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
            linger: Linger::brief(),
        }
    }

    /// Writes the response, then closes with the linger.
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
        self.linger.poll_close(io, cx)
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

    #[tokio::test]
    async fn a_drain_takes_the_declared_rest_and_a_brief_linger_takes_less() {
        let mib = 1024 * 1024;
        assert_eq!(
            Linger::draining(Some(8 * mib)).budget,
            8 * mib + LINGER_BYTES
        );
        assert_eq!(
            Linger::draining(None).budget,
            DRAIN_MAX_BYTES + LINGER_BYTES
        );
        for nothing_or_too_much in [Some(0), Some(DRAIN_MAX_BYTES + 1)] {
            assert_eq!(Linger::draining(nothing_or_too_much).budget, LINGER_BYTES);
        }
    }

    /// A client writing 100 kB more than the pipe holds finishes its write (the linger
    /// reads it), then reads a clean end of stream (the half-close); the linger ends when
    /// the client closes.
    #[tokio::test(start_paused = true)]
    async fn a_drain_lets_the_writer_finish_then_see_the_close() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, mut server) = tokio::io::duplex(4096);
        let mut linger = Linger::draining(Some(100_000));
        let closing = tokio::spawn(async move {
            std::future::poll_fn(|cx| linger.poll_close(&mut server, cx)).await
        });
        client
            .write_all(&[b' '; 100_000])
            .await
            .expect("the rest is taken");
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.expect("a clean end");
        assert!(rest.is_empty());
        drop(client);
        closing.await.expect("task").expect("closed");
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
