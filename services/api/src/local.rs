//! Guards the embedded tier's local-owner mode, where requests without credentials act
//! as the owner of the default tenant: only requests addressed to a loopback name are
//! served, and browsers may call only from loopback origins. This stops a web page that
//! rebinds its own domain to 127.0.0.1 (DNS rebinding) or posts across sites from driving
//! a local Baton.

use crate::auth::AuthMode;
use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if matches!(st.auth, AuthMode::LocalOwner { .. }) {
        let host = req
            .headers()
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| req.uri().authority().map(|a| a.to_string()));
        if !host.as_deref().is_some_and(is_loopback_authority) {
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
                    matches!(scheme, "http" | "https") && is_loopback_authority(rest)
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
    next.run(req).await
}

/// `host[:port]` naming a loopback address.
fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(h, _)| h),
        None => authority.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::is_loopback_authority;

    #[test]
    fn only_loopback_names_pass() {
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "127.1.2.3",
            "[::1]:80",
            "LOCALHOST",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.1",
            "localhost.evil.example",
            "[::2]",
            "",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }
}
