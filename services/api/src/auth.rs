//! The caller's identity, from the request: these extractors read the `Authorization` and
//! `Baton-Tenant` headers (or, without `Authorization`, the login session a browser keeps
//! in the [`SESSION_COOKIE`]) and the peer address, and hand them to
//! [`baton_core::auth::Authenticator`], the only place a [`Principal`] is made from
//! credentials. Then the caller's rate limits are counted.
//!
//! A request that changes anything (any method but `GET`, `HEAD` and `OPTIONS`) made
//! with the cookie must also send the session's anti-CSRF token as [`CSRF_HEADER`]:
//! another site's page can make a browser send the cookie (were `SameSite=Strict` and the
//! origin check of [`crate::browser`] ever bypassed), but cannot read the token.

use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::Method;
use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::request::Parts;
use baton_core::auth::Identity;
use baton_core::crypto::tokens;
use baton_core::{CoreError, Principal, TenantId};
use std::net::{IpAddr, SocketAddr};
use uuid::Uuid;

/// The header that names the tenant a session acts in.
pub const TENANT_HEADER: &str = "baton-tenant";

/// The cookie a browser keeps its login session's token in (`POST /v1/login` with
/// `cookie: true`). The `__Host-` prefix makes browsers keep it only when set `Secure`,
/// with `Path=/` and no `Domain`, by this very host: no sibling subdomain or plain-HTTP
/// page of the same name can plant one.
pub const SESSION_COOKIE: &str = "__Host-baton_session";

/// The header that carries a cookie session's anti-CSRF token.
pub const CSRF_HEADER: &str = "baton-csrf";

/// The authenticated caller of a request.
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    /// Authenticates the request, picks its tenant, then counts it against the caller's
    /// rate limits.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Caller(
            Streaming::from_request_parts(parts, state).await?.principal,
        ))
    }
}

/// The caller with what it authenticated as: its principal, its identity and the hash of
/// its bearer token, so a long-lived stream can end when those credentials do
/// ([`crate::revocations`]).
pub struct Streaming {
    pub principal: Principal,
    pub identity: Identity,
    pub token_hash: Option<Vec<u8>>,
}

impl FromRequestParts<AppState> for Streaming {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = credentials(parts)?;
        let identity = state.auth.identify(token).await.map_err(CoreError::from)?;
        let requested = requested_tenant(parts)?;
        let token_hash = token.map(tokens::hash_token);
        Streaming::acting(state, parts, identity, requested, token_hash).await
    }
}

impl Streaming {
    /// `identity` (whose token hashes to `token_hash`) acting in `requested`: its
    /// principal, recorded on the request's span and counted against its rate limits.
    async fn acting(
        state: &AppState,
        parts: &Parts,
        identity: Identity,
        requested: Option<TenantId>,
        token_hash: Option<Vec<u8>>,
    ) -> Result<Self, ApiError> {
        let principal = state
            .auth
            .principal(&identity, requested, peer_address(parts))
            .await
            .map_err(CoreError::from)?;
        tracing::Span::current().record("tenant_id", tracing::field::display(principal.tenant));
        state
            .limits
            .check(&principal)
            .map_err(|e| ApiError::rate_limited(e.wait, e.what))?;
        Ok(Streaming {
            principal,
            identity,
            token_hash,
        })
    }
}

/// The caller of a run's event stream: as [`Streaming`], or, with `?ticket=` and no
/// `Authorization` header, the credentials that asked for the ticket (which the ticket
/// opens the path's run for, once: [`baton_core::stream_tickets`]).
pub struct StreamCaller(pub Streaming);

#[derive(serde::Deserialize)]
struct TicketQuery {
    ticket: Option<String>,
}

impl FromRequestParts<AppState> for StreamCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let ticket = axum::extract::Query::<TicketQuery>::try_from_uri(&parts.uri)
            .ok()
            .and_then(|q| q.0.ticket);
        let Some(ticket) = ticket else {
            return Ok(StreamCaller(
                Streaming::from_request_parts(parts, state).await?,
            ));
        };
        if parts.headers.contains_key(AUTHORIZATION) {
            return Err(ApiError::new(
                Code::InvalidRequest,
                "send either a stream ticket or an Authorization header, not both",
            ));
        }
        let crate::extract::ApiPath(run) =
            crate::extract::ApiPath::<baton_core::RunId>::from_request_parts(parts, state).await?;
        let redeemed = state
            .stream_tickets
            .redeem(&ticket, run)
            .await
            .map_err(CoreError::from)?;
        let identity = state
            .auth
            .issuer(&redeemed.issued_by, redeemed.tenant)
            .await
            .map_err(CoreError::from)?;
        let token_hash = redeemed.issued_by.token_hash().map(<[u8]>::to_vec);
        let tenant = Some(redeemed.tenant);
        Ok(StreamCaller(
            Streaming::acting(state, parts, identity, tenant, token_hash).await?,
        ))
    }
}

/// The caller's identity without a tenant chosen (`GET /v1/me`, `POST /v1/logout`): a
/// session of a user of several tenants needs no `Baton-Tenant` header here. An API key
/// and the local owner count against their rate limits, as with [`Caller`].
pub struct Identified(pub Identity);

impl FromRequestParts<AppState> for Identified {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let identity = identify(parts, state).await?;
        if !matches!(identity, Identity::Session(_)) {
            let caller = state
                .auth
                .principal(&identity, None, peer_address(parts))
                .await
                .map_err(CoreError::from)?;
            state
                .limits
                .check(&caller)
                .map_err(|e| ApiError::rate_limited(e.wait, e.what))?;
        }
        Ok(Identified(identity))
    }
}

/// The address of the connection's peer, when the server was started with it (it always
/// is; a router served without it, as in some tests, has none).
pub fn peer_address(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
}

/// The tenant the `Baton-Tenant` header names, if it is there.
fn requested_tenant(parts: &Parts) -> Result<Option<TenantId>, ApiError> {
    let Some(value) = parts.headers.get(TENANT_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<Uuid>().ok())
        .map(|id| Some(TenantId::from(id)))
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidRequest,
                "the Baton-Tenant header must be a tenant id (a UUID)",
            )
        })
}

/// The token the request authenticates with, if any: its bearer token, or without an
/// `Authorization` header its session cookie, whose anti-CSRF token it must send too when
/// it changes anything.
fn credentials(parts: &Parts) -> Result<Option<&str>, ApiError> {
    if parts.headers.contains_key(AUTHORIZATION) {
        return bearer(parts);
    }
    let Some(token) = session_cookie(&parts.headers)? else {
        return Ok(None);
    };
    if !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        let presented = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !tokens::csrf_matches(token, presented) {
            return Err(ApiError::new(
                Code::CsrfFailed,
                "a request that changes anything with the session cookie must send the \
                 session's Baton-CSRF header (the csrf_token of the login, or of GET /v1/me)",
            ));
        }
    }
    Ok(Some(token))
}

/// The session token in the request's [`SESSION_COOKIE`], if it has one. Several of
/// them are refused rather than one picked: which one a browser sends first is not the
/// server's to guess.
pub fn session_cookie(headers: &axum::http::HeaderMap) -> Result<Option<&str>, ApiError> {
    let mut found = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim());
    let first = found.next();
    if found.next().is_some() {
        return Err(ApiError::new(
            Code::Unauthorized,
            "the request carries several session cookies: log out, or clear this site's \
             cookies, and log in again",
        ));
    }
    Ok(first.filter(|value| !value.is_empty()))
}

/// The anti-CSRF token of the request's session cookie, when it authenticates with one
/// (and sends no `Authorization` header).
pub fn cookie_csrf_token(headers: &axum::http::HeaderMap) -> Option<String> {
    if headers.contains_key(AUTHORIZATION) {
        return None;
    }
    session_cookie(headers)
        .ok()
        .flatten()
        .map(tokens::csrf_token)
}

/// The bearer token of the request, if it sends one.
fn bearer(parts: &Parts) -> Result<Option<&str>, ApiError> {
    let Some(value) = parts.headers.get(AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        // The scheme is case-insensitive (RFC 9110).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| Some(token.trim()))
        .ok_or_else(|| {
            ApiError::new(
                Code::Unauthorized,
                "the Authorization header must be `Bearer <api key or session token>`",
            )
        })
}

/// Reads the bearer token of the request, if any, and checks it.
async fn identify(parts: &Parts, state: &AppState) -> Result<Identity, ApiError> {
    let token = credentials(parts)?;
    Ok(state.auth.identify(token).await.map_err(CoreError::from)?)
}
