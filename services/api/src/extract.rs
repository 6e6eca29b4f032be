//! Wrappers around axum's `Json`, `Path` and `Query` whose rejections are problem+json
//! with a code and a detail naming what was wrong.

use crate::error::{ApiError, Code};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// A JSON body; unknown fields are refused by the target types themselves.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rej) => Err(json_rejection(rej)),
        }
    }
}

fn json_rejection(rej: JsonRejection) -> ApiError {
    match rej {
        JsonRejection::JsonDataError(e) => ApiError::new(
            Code::InvalidBody,
            format!("invalid request body: {}", source_of(&e)),
        ),
        JsonRejection::JsonSyntaxError(e) => ApiError::new(
            Code::InvalidBody,
            format!("malformed JSON: {}", source_of(&e)),
        ),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            Code::UnsupportedMediaType,
            "the request body must be JSON with `Content-Type: application/json`",
        ),
        other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            Code::PayloadTooLarge,
            "the request body is larger than the configured limit",
        ),
        other => ApiError::new(Code::InvalidBody, other.body_text()),
    }
}

/// The innermost message of an extractor error (serde's, naming the field and position).
fn source_of(e: &dyn std::error::Error) -> String {
    let mut cur: &dyn std::error::Error = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Path parameters; a malformed id is a 400 naming the parameter's problem.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => Err(ApiError::new(
                Code::InvalidPath,
                format!("invalid path parameter: {}", e.body_text()),
            )),
            Err(other) => Err(ApiError::new(Code::InvalidPath, other.body_text())),
        }
    }
}

/// Query parameters.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(QueryRejection::FailedToDeserializeQueryString(e)) => Err(ApiError::new(
                Code::InvalidQuery,
                format!("invalid query: {}", source_of(&e)),
            )),
            Err(other) => Err(ApiError::new(Code::InvalidQuery, other.body_text())),
        }
    }
}

/// An optional JSON body: empty means `T::default()`; otherwise it must be JSON with a
/// JSON content type, like [`ApiJson`].
pub struct OptionalJson<T>(pub T);

impl<S, T> FromRequest<S> for OptionalJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Default,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json_type = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(is_json_type);
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|rej| {
                if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        Code::PayloadTooLarge,
                        "the request body is larger than the configured limit",
                    )
                } else {
                    ApiError::new(Code::InvalidBody, rej.body_text())
                }
            })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        if !json_type {
            return Err(ApiError::new(
                Code::UnsupportedMediaType,
                "the request body must be JSON with `Content-Type: application/json`",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(OptionalJson)
            .map_err(|e| ApiError::new(Code::InvalidBody, format!("invalid request body: {e}")))
    }
}

fn is_json_type(value: &str) -> bool {
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}
