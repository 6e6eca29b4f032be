//! What keeps browsers and proxies honest, in every tier: headers no larger than
//! `http.header_limit_bytes` (`431`), a `Host` among `http.allowed_hosts` when that is set
//! (`403 host_not_allowed`, against DNS rebinding and host-header tricks; the probes
//! `/livez` and `/readyz` answer any host), and no
//! state-changing request from another site's page (`403 origin_not_allowed`): a browser
//! sends `Origin` with every cross-site `POST`, `PUT` or `DELETE`, so one that names
//! neither an `http.allowed_origins` entry nor the API itself is refused before anything
//! runs. CORS headers for the allowed origins come from [`cors`].

use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, RETRY_AFTER};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

pub async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let http = &st.http;
    // Name, value and the `: ` and CRLF around them, as on the wire.
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if header_bytes > http.header_limit_bytes {
        return ApiError::new(
            Code::HeadersTooLarge,
            format!(
                "the request's headers take {header_bytes} bytes, more than the {} allowed",
                http.header_limit_bytes
            ),
        )
        .into_response();
    }
    let host = req
        .headers()
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase)
        .or_else(|| {
            req.uri()
                .authority()
                .map(|a| a.as_str().to_ascii_lowercase())
        });
    // Probes come from the kubelet, addressed to the pod's IP: they answer whatever the Host.
    let probe = matches!(req.uri().path(), "/livez" | "/readyz");
    if !probe
        && !http.allowed_hosts.is_empty()
        && !host.as_deref().is_some_and(|h| host_allowed(http, h))
    {
        return ApiError::new(
            Code::HostNotAllowed,
            "this server does not answer requests addressed to that host",
        )
        .into_response();
    }
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes_state && let Some(origin) = req.headers().get(ORIGIN) {
        let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
        let same_site = host.as_deref().is_some_and(|h| {
            origin
                .split_once("://")
                .is_some_and(|(_, authority)| authority == h)
        });
        if !same_site && !http.allowed_origins.contains(&origin) {
            return ApiError::new(
                Code::OriginNotAllowed,
                "browser requests that change state are accepted only from the API's own \
                 origin and from `http.allowed_origins`",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// `host` (maybe with a port) against the allowed hosts: an entry without a port allows
/// the name on any port.
fn host_allowed(http: &crate::HttpSettings, host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest
            .split_once(']')
            .map_or(host, |(ip, _)| &host[..ip.len() + 2]),
        None => host.split(':').next().unwrap_or(host),
    };
    http.allowed_hosts
        .iter()
        .any(|allowed| allowed == host || allowed == name)
}

/// CORS for `origins`: preflights answered, credentials (the `Authorization` header)
/// allowed, the headers a client of this API sends and reads.
pub fn cors(origins: &[String]) -> Option<CorsLayer> {
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
            .allow_headers([
                AUTHORIZATION,
                CONTENT_TYPE,
                HeaderName::from_static("last-event-id"),
                HeaderName::from_static("traceparent"),
                HeaderName::from_static("x-request-id"),
            ])
            .expose_headers([HeaderName::from_static("x-request-id"), RETRY_AFTER])
            .max_age(Duration::from_secs(600)),
    )
}
