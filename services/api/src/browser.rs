//! What keeps browsers and proxies honest, in every tier: headers no larger than
//! `http.header_limit_bytes` (`431`), a `Host` among `http.allowed_hosts` when that is set
//! (`403 host_not_allowed`, against DNS rebinding and host-header tricks; the probes
//! `/livez` and `/readyz` answer any host), and no
//! state-changing request from another site's page (`403 origin_not_allowed`): a browser
//! sends `Origin` with every cross-site `POST`, `PUT` or `DELETE`, so one that names
//! neither an `http.allowed_origins` entry nor the API itself is refused before anything
//! runs. CORS headers for the allowed origins come from [`cors`].
//!
//! In the embedded tier's local-owner mode, where requests without credentials act as the
//! owner of the default tenant, the same checks are stricter: only requests addressed to a
//! loopback name are served, and browsers may call only from loopback origins, whatever
//! the method. This stops a web page that rebinds its own domain to 127.0.0.1 (DNS
//! rebinding) or posts across sites from driving a local Baton.

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
    if st.auth.local_owner().is_some() {
        if !host.as_deref().is_some_and(is_loopback) {
            return ApiError::new(
                Code::HostNotAllowed,
                "without authentication this server answers only requests addressed to \
                 localhost, 127.0.0.1 or [::1]",
            )
            .into_response();
        }
        if let Some(origin) = req.headers().get(ORIGIN) {
            let local = origin
                .to_str()
                .ok()
                .and_then(|o| o.split_once("://"))
                .is_some_and(|(scheme, rest)| {
                    matches!(scheme, "http" | "https") && is_loopback(rest)
                });
            if !local {
                return ApiError::new(
                    Code::OriginNotAllowed,
                    "without authentication this server accepts browser requests only from \
                     loopback origins",
                )
                .into_response();
            }
        }
    }
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
    let name = host_name(host);
    http.allowed_hosts
        .iter()
        .any(|allowed| allowed == host || allowed == name)
}

/// The host of a `host[:port]` authority, an IPv6 address with its brackets.
fn host_name(authority: &str) -> &str {
    match authority.strip_prefix('[') {
        Some(rest) => rest
            .split_once(']')
            .map_or(authority, |(ip, _)| &authority[..ip.len() + 2]),
        None => authority.split(':').next().unwrap_or(authority),
    }
}

/// `host[:port]` naming a loopback address.
fn is_loopback(authority: &str) -> bool {
    let host = host_name(authority);
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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
                HeaderName::from_static(crate::auth::TENANT_HEADER),
                HeaderName::from_static("traceparent"),
                HeaderName::from_static("x-request-id"),
            ])
            .expose_headers([HeaderName::from_static("x-request-id"), RETRY_AFTER])
            .max_age(Duration::from_secs(600)),
    )
}

#[cfg(test)]
mod tests {
    use super::{host_name, is_loopback};

    #[test]
    fn only_loopback_names_pass() {
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "127.1.2.3",
            "[::1]:80",
            "[::1]",
            "LOCALHOST",
        ] {
            assert!(is_loopback(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.1",
            "localhost.evil.example",
            "[::2]",
            "",
        ] {
            assert!(!is_loopback(bad), "{bad}");
        }
    }

    #[test]
    fn a_host_name_drops_only_the_port() {
        assert_eq!(host_name("api.example.com:8443"), "api.example.com");
        assert_eq!(host_name("api.example.com"), "api.example.com");
        assert_eq!(host_name("[::1]:80"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
    }
}
