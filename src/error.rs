//! The one error table: every failure of every layer becomes a [`Code`], and the code alone
//! decides the HTTP status, the stable `system_one_*` string and the error `type` a
//! workflow engine branches on. Handlers never pick a status.
//!
//! Messages meant for the caller name the field, the limit and the value the caller sent;
//! they never carry the backend's own text, URL or key (its failure is logged once, at `warn`,
//! where it is first seen, by status and length: never the text, which may echo the prompt).

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Longest `Retry-After` (seconds) any answer carries.
pub const MAX_RETRY_AFTER_SECS: u64 = 60;

/// The error `type` values: a small fixed set a client can branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    Invalid,
    Auth,
    RateLimited,
    Quota,
    CapExceeded,
    Unavailable,
    Timeout,
    Protocol,
    NotConfigured,
}

macro_rules! codes {
    ($( $variant:ident => ($status:expr, $ty:ident, $text:literal), )*) => {
        /// Every error this service returns. The table below is the whole mapping.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code { $( $variant, )* }

        impl Code {
            /// Every code, for tests and documentation.
            pub const ALL: &'static [Code] = &[$( Code::$variant, )*];

            /// The stable string in the body and in `x-systemone-error-code`.
            pub fn as_str(self) -> &'static str {
                match self { $( Code::$variant => $text, )* }
            }
            /// The HTTP status this code is answered with.
            pub fn status(self) -> StatusCode {
                match self { $( Code::$variant => $status, )* }
            }
            /// The error class.
            pub fn error_type(self) -> ErrorType {
                match self { $( Code::$variant => ErrorType::$ty, )* }
            }
        }
    };
}

codes! {
    // 400 / 415: the body cannot be read.
    InvalidJson => (StatusCode::BAD_REQUEST, Invalid, "system_one_invalid_json"),
    UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, Invalid, "system_one_unsupported_media_type"),
    UnsupportedEncoding => (StatusCode::UNSUPPORTED_MEDIA_TYPE, Invalid, "system_one_unsupported_encoding"),
    InvalidMultipart => (StatusCode::BAD_REQUEST, Invalid, "system_one_invalid_multipart"),
    // 422: schema rules.
    InvalidBody => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_body"),
    DuplicateKey => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_duplicate_key"),
    UnsupportedModel => (StatusCode::UNPROCESSABLE_ENTITY, NotConfigured, "system_one_unsupported_model"),
    MissingState => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_missing_state"),
    InvalidState => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_state"),
    InvalidNumber => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_number"),
    InvalidQuestions => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_questions"),
    NoQuestions => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_no_questions"),
    TooManyQuestions => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_too_many_questions"),
    InvalidQuestionId => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_question_id"),
    InvalidQuestion => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_question"),
    UnsupportedQuestionType => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_unsupported_question_type"),
    UnknownField => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_unknown_field"),
    InvalidInstructions => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_instructions"),
    InvalidCriteria => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_criteria"),
    TooManyOptions => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_too_many_options"),
    TooManyLevels => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_too_many_levels"),
    InvalidLabel => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_label"),
    InvalidDescription => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_description"),
    NothingToAsk => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_nothing_to_ask"),
    BadTemperature => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_temperature"),
    BadCalibration => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_calibration"),
    UnknownCalibration => (StatusCode::UNPROCESSABLE_ENTITY, NotConfigured, "system_one_unknown_calibration"),
    BadLayout => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_layout"),
    BadPermutations => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_permutations"),
    BadPriorCorrection => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_prior_correction"),
    PriorCorrectionOff => (StatusCode::UNPROCESSABLE_ENTITY, NotConfigured, "system_one_prior_correction_off"),
    BadHistory => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_history"),
    ImagesUnsupported => (StatusCode::UNPROCESSABLE_ENTITY, NotConfigured, "system_one_images_unsupported"),
    InvalidImage => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_image"),
    UnsupportedImageFormat => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_unsupported_image_format"),
    ImageUrlRefused => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_image_url_refused"),
    InvalidAsset => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_asset"),
    // 422: the rerank body's own rules (`/v2/rerank`, `/v1/rerank`).
    InvalidQuery => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_query"),
    InvalidDocuments => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_documents"),
    TooManyDocuments => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_too_many_documents"),
    BadTopN => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_top_n"),
    BadMaxTokensPerDoc => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_max_tokens_per_doc"),
    UnsupportedRerankOption => (StatusCode::UNPROCESSABLE_ENTITY, NotConfigured, "system_one_unsupported_rerank_option"),
    // 422 (400 on that route): the Decisions body's own rules (`/v1/decisions`).
    InvalidInput => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_invalid_input"),
    UnsupportedInput => (StatusCode::UNPROCESSABLE_ENTITY, NotConfigured, "system_one_unsupported_input"),
    // 413: size rules.
    BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_body_too_large"),
    StateTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_state_too_large"),
    QuestionTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_question_too_large"),
    RequestTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_request_too_large"),
    TooManyImages => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_too_many_images"),
    ImageTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_image_too_large"),
    ImagesTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_images_too_large"),
    // 401 / 403 / 429: API keys and their limits.
    MissingKey => (StatusCode::FORBIDDEN, Auth, "system_one_missing_key"),
    InvalidKey => (StatusCode::UNAUTHORIZED, Auth, "system_one_invalid_key"),
    RateLimited => (StatusCode::TOO_MANY_REQUESTS, RateLimited, "system_one_rate_limited"),
    DailyCap => (StatusCode::TOO_MANY_REQUESTS, Quota, "system_one_daily_cap"),
    // 401 / 503: signed tokens (`[jwt]` in the keys file), each refusal its own code.
    TokenInvalid => (StatusCode::UNAUTHORIZED, Auth, "system_one_token_invalid"),
    TokenExpired => (StatusCode::UNAUTHORIZED, Auth, "system_one_token_expired"),
    TokenNotYetValid => (StatusCode::UNAUTHORIZED, Auth, "system_one_token_not_yet_valid"),
    TokenWrongIssuer => (StatusCode::UNAUTHORIZED, Auth, "system_one_token_wrong_issuer"),
    TokenWrongAudience => (StatusCode::UNAUTHORIZED, Auth, "system_one_token_wrong_audience"),
    TokenUnknownKey => (StatusCode::UNAUTHORIZED, Auth, "system_one_token_unknown_key"),
    TokenAlgorithmRefused => (StatusCode::UNAUTHORIZED, Auth, "system_one_token_algorithm_refused"),
    TokenBadClaims => (StatusCode::UNAUTHORIZED, Auth, "system_one_token_bad_claims"),
    TokenKeysUnavailable => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_token_keys_unavailable"),
    // 403: what a caller's tier or scopes do not allow.
    TierModelRefused => (StatusCode::FORBIDDEN, Auth, "system_one_tier_model_refused"),
    TierRouteRefused => (StatusCode::FORBIDDEN, Auth, "system_one_tier_route_refused"),
    ScopeMissing => (StatusCode::FORBIDDEN, Auth, "system_one_scope_missing"),
    // The shared limit store (Redis) could not answer in time under `fail_closed`.
    LimitsUnavailable => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_limits_unavailable"),
    // The decision ledger did not commit the record in time under `fail_closed`.
    LedgerUnavailable => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_ledger_unavailable"),
    // The ledger's read-back and outcomes (`/v1/ledger/…`).
    LedgerOff => (StatusCode::NOT_FOUND, NotConfigured, "system_one_ledger_off"),
    DecisionNotFound => (StatusCode::NOT_FOUND, Invalid, "system_one_decision_not_found"),
    BadLedgerQuery => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_ledger_query"),
    BadOutcome => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_outcome"),
    OutcomeExists => (StatusCode::CONFLICT, Invalid, "system_one_outcome_exists"),
    // Batch jobs (`/v1/files`, `/v1/batches`): the input file's rules, then the batch's.
    BatchNotJsonl => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_batch_not_jsonl"),
    BatchLineNotObject => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_batch_line_not_object"),
    BatchMissingCustomId => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_batch_missing_custom_id"),
    BatchDuplicateCustomId => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_batch_duplicate_custom_id"),
    BatchUrlMismatch => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_batch_url_mismatch"),
    BatchTooManyLines => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_batch_too_many_lines"),
    BatchFileTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, CapExceeded, "system_one_batch_file_too_large"),
    BadBatchRequest => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_batch_request"),
    BatchNotFound => (StatusCode::NOT_FOUND, Invalid, "system_one_batch_not_found"),
    FileNotFound => (StatusCode::NOT_FOUND, Invalid, "system_one_file_not_found"),
    BatchNotCancellable => (StatusCode::CONFLICT, Invalid, "system_one_batch_not_cancellable"),
    BatchesUnavailable => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_batches_unavailable"),
    // `GET /v1/usage`: another key's usage, or a bad query.
    UsageForbidden => (StatusCode::FORBIDDEN, Auth, "system_one_usage_forbidden"),
    BadUsageQuery => (StatusCode::UNPROCESSABLE_ENTITY, Invalid, "system_one_bad_usage_query"),
    // Upstream outcomes.
    UpstreamRateLimited => (StatusCode::TOO_MANY_REQUESTS, RateLimited, "system_one_upstream_rate_limited"),
    UpstreamRejected => (StatusCode::BAD_REQUEST, Invalid, "system_one_upstream_rejected"),
    UpstreamError => (StatusCode::BAD_GATEWAY, Protocol, "system_one_upstream_error"),
    UpstreamProtocol => (StatusCode::BAD_GATEWAY, Protocol, "system_one_upstream_protocol"),
    UpstreamOverloaded => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_upstream_overloaded"),
    UpstreamUnavailable => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_upstream_unavailable"),
    TokenTableMismatch => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_token_table_mismatch"),
    TokenTablePending => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_token_table_pending"),
    CircuitOpen => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_circuit_open"),
    BackendUnsupported => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_backend_unsupported"),
    UpstreamTimeout => (StatusCode::GATEWAY_TIMEOUT, Timeout, "system_one_upstream_timeout"),
    DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, Timeout, "system_one_deadline_exceeded"),
    // The edge: refused before or while a request is read (`src/http/edge/`).
    BadRequestHead => (StatusCode::BAD_REQUEST, Invalid, "system_one_bad_request_head"),
    HeadersTooLarge => (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, CapExceeded, "system_one_headers_too_large"),
    RequestTimeout => (StatusCode::REQUEST_TIMEOUT, Timeout, "system_one_request_timeout"),
    Overloaded => (StatusCode::SERVICE_UNAVAILABLE, Unavailable, "system_one_overloaded"),
    // Routing and the unexpected.
    NotFound => (StatusCode::NOT_FOUND, Invalid, "system_one_not_found"),
    MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, Invalid, "system_one_method_not_allowed"),
    Internal => (StatusCode::INTERNAL_SERVER_ERROR, Unavailable, "system_one_internal"),
}

/// One entry of a 422's FastAPI-style `detail` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detail {
    /// Path into the body, starting with `"body"`.
    pub loc: Vec<String>,
    /// What is wrong, naming the limit and the value.
    pub msg: String,
    /// A short machine-readable reason (the code without its prefix).
    #[serde(rename = "type")]
    pub kind: String,
}

/// One failure as the caller sees it: its code (which alone decides the status), what
/// went wrong and, for a schema rule, where in the body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The row of the table this failure is.
    pub code: Code,
    /// Where in the body (`["questions", "q", "criteria"]`); empty when not about a field.
    pub loc: Vec<String>,
    /// What is wrong, without the location.
    pub msg: String,
    /// Seconds for `Retry-After`, when retrying later can succeed.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A failure not tied to a field.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            loc: Vec::new(),
            msg: message.into(),
            retry_after: None,
        }
    }

    /// A failure at `loc` in the body; the message is prefixed with the dotted location.
    pub fn at(code: Code, loc: Vec<String>, msg: impl Into<String>) -> Self {
        ApiError {
            loc,
            ..ApiError::new(code, msg)
        }
    }

    /// Adds a `Retry-After` of `seconds`.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The HTTP status: the code's.
    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// `error.message`: `loc.joined: msg`, or `msg` alone.
    pub fn message(&self) -> String {
        if self.loc.is_empty() {
            self.msg.clone()
        } else {
            format!("{}: {}", self.loc.join("."), self.msg)
        }
    }

    /// The JSON body: `{"error": {message, code, type}}`, plus FastAPI's `detail` list
    /// (location under `body`, the bare message, the code without its prefix) for a 422.
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "error": {
                "message": self.message(),
                "code": self.code.as_str(),
                "type": self.code.error_type(),
            }
        });
        if self.status() == StatusCode::UNPROCESSABLE_ENTITY {
            let mut loc = vec!["body".to_string()];
            loc.extend(self.loc.iter().cloned());
            let detail = Detail {
                loc,
                msg: self.msg.clone(),
                kind: self
                    .code
                    .as_str()
                    .trim_start_matches("system_one_")
                    .to_string(),
            };
            body["detail"] = serde_json::json!([detail]);
        }
        body
    }
}

impl ApiError {
    /// The answer with `status` and `body` (a front door's own error shape) and this
    /// error's headers: the code in [`ERROR_CODE_HEADER`], `Retry-After` (and
    /// `retry-after-ms`, which OpenAI's SDKs read first) when set, and the code as a
    /// response extension so the request's log line and metrics see it.
    pub fn respond(&self, status: StatusCode, body: &serde_json::Value) -> Response {
        let body = serde_json::to_vec(body).unwrap_or_default();
        let mut response = (
            status,
            [(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response();
        let headers = response.headers_mut();
        headers.insert(
            ERROR_CODE_HEADER.clone(),
            HeaderValue::from_static(self.code.as_str()),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
            headers.insert(RETRY_AFTER_MS.clone(), HeaderValue::from(secs * 1000));
        }
        response.extensions_mut().insert(self.code);
        response
    }
}

/// The header that repeats the error code.
pub static ERROR_CODE_HEADER: HeaderName = HeaderName::from_static("x-systemone-error-code");
/// `Retry-After` in milliseconds, as OpenAI's SDKs read it.
pub static RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.respond(self.status(), &self.body())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_prefixed_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert!(code.as_str().starts_with("system_one_"), "{code:?}");
            assert!(seen.insert(code.as_str()), "duplicate {}", code.as_str());
        }
    }

    #[test]
    fn a_422_carries_a_detail_list_with_the_location() {
        let e = ApiError::at(
            Code::TooManyOptions,
            vec!["questions".into(), "q".into(), "criteria".into()],
            "300 options is more than the limit of 255",
        );
        let body = e.body();
        assert_eq!(
            body["error"]["message"],
            "questions.q.criteria: 300 options is more than the limit of 255"
        );
        assert_eq!(body["error"]["type"], "invalid");
        assert_eq!(
            body["detail"][0]["loc"],
            serde_json::json!(["body", "questions", "q", "criteria"])
        );
        assert_eq!(
            body["detail"][0]["msg"],
            "300 options is more than the limit of 255"
        );
        let not_422 = ApiError::new(Code::UpstreamError, "x").body();
        assert!(not_422.get("detail").is_none());
    }
}

#[cfg(test)]
mod readme {
    /// The book's error code page lists every code the service can answer.
    #[test]
    fn readme_lists_every_code() {
        let readme = include_str!("../docs/reference/errors.md");
        for code in super::Code::ALL {
            assert!(
                readme.contains(&format!("`{}`", code.as_str())),
                "{} missing from docs/reference/errors.md (run `cargo run -- docs`)",
                code.as_str()
            );
        }
    }
}
