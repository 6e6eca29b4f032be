//! The one place where errors become HTTP responses: problem+json bodies with a stable
//! snake_case `code`. Codes are public API: add, never rename. A 5xx gets an opaque body;
//! its cause is logged once by the problem middleware, not here.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use baton_core::CoreError;
use serde::Serialize;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// How long a client is told to wait (`Retry-After`) when a backing service is unavailable.
const UNAVAILABLE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Declares [`Code`] from one table: each public error code once, with its status and
/// its stable name.
macro_rules! error_codes {
    ($($code:ident => ($status:ident, $name:literal),)*) => {
        /// Every public error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Code {
            $($code,)*
        }

        impl Code {
            /// Every code, for documentation checks.
            pub const ALL: &[Code] = &[$(Code::$code,)*];

            pub fn status_and_name(self) -> (StatusCode, &'static str) {
                match self {
                    $(Code::$code => (StatusCode::$status, $name),)*
                }
            }
        }
    };
}

// Codes are public API: add a row, never rename one.
error_codes! {
    InvalidRequest => (BAD_REQUEST, "invalid_request"),
    MalformedRequest => (BAD_REQUEST, "malformed_request"),
    InvalidBody => (BAD_REQUEST, "invalid_body"),
    InvalidPath => (BAD_REQUEST, "invalid_path"),
    InvalidQuery => (BAD_REQUEST, "invalid_query"),
    InvalidCursor => (BAD_REQUEST, "invalid_cursor"),
    InvalidLastEventId => (BAD_REQUEST, "invalid_last_event_id"),
    UnsupportedMediaType => (UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
    PayloadTooLarge => (PAYLOAD_TOO_LARGE, "payload_too_large"),
    HeadersTooLarge => (REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large"),
    UriTooLong => (URI_TOO_LONG, "uri_too_long"),
    Unauthorized => (UNAUTHORIZED, "unauthorized"),
    Forbidden => (FORBIDDEN, "forbidden"),
    HostNotAllowed => (FORBIDDEN, "host_not_allowed"),
    OriginNotAllowed => (FORBIDDEN, "origin_not_allowed"),
    CsrfFailed => (FORBIDDEN, "csrf_failed"),
    NotFound => (NOT_FOUND, "not_found"),
    RouteNotFound => (NOT_FOUND, "route_not_found"),
    MethodNotAllowed => (METHOD_NOT_ALLOWED, "method_not_allowed"),
    RunBusy => (CONFLICT, "run_busy"),
    QueueFull => (CONFLICT, "queue_full"),
    RunEnded => (CONFLICT, "run_ended"),
    Conflict => (CONFLICT, "conflict"),
    WrongState => (CONFLICT, "wrong_state"),
    AlreadyExists => (CONFLICT, "already_exists"),
    InUse => (CONFLICT, "in_use"),
    QuotaExceeded => (CONFLICT, "quota_exceeded"),
    PreconditionFailed => (PRECONDITION_FAILED, "precondition_failed"),
    IdempotencyKeyReused => (UNPROCESSABLE_ENTITY, "idempotency_key_reused"),
    EgressDenied => (UNPROCESSABLE_ENTITY, "egress_denied"),
    RateLimited => (TOO_MANY_REQUESTS, "rate_limited"),
    RequestTimeout => (REQUEST_TIMEOUT, "request_timeout"),
    Unavailable => (SERVICE_UNAVAILABLE, "unavailable"),
    UpstreamFailed => (BAD_GATEWAY, "upstream_failed"),
    Internal => (INTERNAL_SERVER_ERROR, "internal"),
}

/// An error answered to a client.
#[derive(Debug)]
pub struct ApiError {
    pub code: Code,
    pub detail: String,
    /// The cause of a 5xx, for the log only.
    pub cause: Option<String>,
    /// When the client may try again (`Retry-After`, in whole seconds).
    pub retry_after: Option<std::time::Duration>,
}

/// The cause of a server error, carried to the problem middleware for logging.
#[derive(Debug, Clone)]
pub struct ErrorCause(pub String);

#[derive(Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// `about:blank` or a link to the code's documentation.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Stable, machine-readable error code.
    pub code: String,
    /// The request's `x-request-id`, for support.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Problem {
    /// The body of an answer with `code`; the problem middleware adds the request id.
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        let (status, name) = code.status_and_name();
        Self {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail: detail.into(),
            code: name.into(),
            request_id: None,
        }
    }
}

impl ApiError {
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            cause: None,
            retry_after: None,
        }
    }

    /// `429 rate_limited`, to be tried again after `wait`.
    pub fn rate_limited(wait: std::time::Duration, what: &str) -> Self {
        Self {
            retry_after: Some(wait),
            ..Self::new(
                Code::RateLimited,
                format!("too many requests for {what}; retry after the Retry-After delay"),
            )
        }
    }

    pub fn internal(cause: impl Into<String>) -> Self {
        Self {
            code: Code::Internal,
            detail: "the server failed to handle the request; it has been logged".into(),
            cause: Some(cause.into()),
            retry_after: None,
        }
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        let detail = e.to_string();
        match e {
            CoreError::NotFound(_) => ApiError::new(Code::NotFound, detail),
            CoreError::Invalid(_) => ApiError::new(Code::InvalidRequest, detail),
            CoreError::Forbidden(_) | CoreError::NoAccess(_) => {
                ApiError::new(Code::Forbidden, detail)
            }
            CoreError::Unauthenticated(_) => ApiError::new(Code::Unauthorized, detail),
            CoreError::RunBusy => ApiError::new(Code::RunBusy, detail),
            CoreError::QueueFull(_) => ApiError::new(Code::QueueFull, detail),
            CoreError::RunEnded(_) => ApiError::new(Code::RunEnded, detail),
            CoreError::IdempotencyKeyReused(_) => ApiError::new(Code::IdempotencyKeyReused, detail),
            CoreError::Conflict => ApiError::new(Code::Conflict, detail),
            CoreError::WrongState(_) => ApiError::new(Code::WrongState, detail),
            CoreError::AlreadyExists(_) => ApiError::new(Code::AlreadyExists, detail),
            CoreError::InUse(_) => ApiError::new(Code::InUse, detail),
            CoreError::EgressDenied(_) => ApiError::new(Code::EgressDenied, detail),
            CoreError::Upstream(_) => ApiError::new(Code::UpstreamFailed, detail),
            CoreError::InvalidPath(_) => ApiError::new(Code::InvalidPath, detail),
            CoreError::TooLarge(_) => ApiError::new(Code::PayloadTooLarge, detail),
            CoreError::QuotaExceeded(_) => ApiError::new(Code::QuotaExceeded, detail),
            CoreError::PreconditionFailed(_) => ApiError::new(Code::PreconditionFailed, detail),
            CoreError::Unavailable(cause) => ApiError {
                code: Code::Unavailable,
                detail: "a backing service is unavailable; retry shortly".into(),
                cause: Some(cause),
                retry_after: Some(UNAVAILABLE_RETRY),
            },
            CoreError::Internal(cause) => ApiError::internal(cause),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, _) = self.code.status_and_name();
        let body = Problem::new(self.code, self.detail);
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut res = (status, bytes).into_response();
        res.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.code == Code::Unauthorized {
            // A 401 must name the scheme that would be accepted (RFC 9110, 11.6.1).
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(wait) = self.retry_after {
            // Whole seconds, rounded up: never earlier than the limiter allows.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        if let Some(cause) = self.cause {
            res.extensions_mut().insert(ErrorCause(cause));
        }
        res
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::Code;

    #[test]
    fn every_error_code_is_documented_with_its_status_in_the_api_guide() {
        let guide = include_str!("../../../docs/api.md");
        for &code in Code::ALL {
            let (status, name) = code.status_and_name();
            let row = format!("| {} | `{name}` |", status.as_u16());
            assert!(guide.contains(&row), "docs/api.md lacks the row {row:?}");
        }
    }

    #[test]
    fn an_unavailable_backing_service_answers_503_with_retry_after() {
        use axum::response::IntoResponse;
        let unavailable = baton_core::CoreError::Unavailable("the pool timed out".into());
        let res = super::ApiError::from(unavailable).into_response();
        assert_eq!(res.status(), 503);
        assert_eq!(res.headers()["retry-after"], "1");
    }

    #[test]
    fn error_codes_are_unique() {
        let mut names: Vec<_> = Code::ALL.iter().map(|c| c.status_and_name().1).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Code::ALL.len());
    }
}
