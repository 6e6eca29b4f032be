//! Middleware that finishes every problem+json response: adds the request id to the body
//! and logs the cause of server errors exactly once.

use crate::error::{ApiError, Code, ErrorCause, PROBLEM_JSON};
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Problem bodies are small; anything bigger is not ours to rewrite.
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

pub async fn finish_problems(req: Request, next: Next) -> Response {
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let res = next.run(req).await;
    if let Some(ErrorCause(cause)) = res.extensions().get::<ErrorCause>() {
        tracing::error!(status = res.status().as_u16(), cause = %cause, "request failed");
    }
    let is_problem = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == PROBLEM_JSON.as_bytes());
    let Some(request_id) = request_id.filter(|_| is_problem) else {
        return res;
    };
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_PROBLEM_BYTES).await else {
        return ApiError::new(Code::Internal, "error body unreadable").into_response();
    };
    let body = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.insert("request_id".into(), request_id.into());
            serde_json::to_vec(&map).unwrap_or_else(|_| bytes.to_vec())
        }
        _ => bytes.to_vec(),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}
