//! The caller's identity, from the request: these extractors read the `Authorization` and
//! `Baton-Tenant` headers and the peer address, and hand them to
//! [`baton_core::auth::Authenticator`], the only place a [`Principal`] is made from
//! credentials. Then the caller's rate limits are counted.

use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use baton_core::auth::Identity;
use baton_core::{CoreError, Principal, TenantId};
use std::net::{IpAddr, SocketAddr};
use uuid::Uuid;

/// The header that names the tenant a session acts in.
pub const TENANT_HEADER: &str = "baton-tenant";

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
        let token = bearer(parts)?;
        let identity = state.auth.identify(token).await.map_err(CoreError::from)?;
        let requested = requested_tenant(parts)?;
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
            token_hash: token.map(baton_core::crypto::tokens::hash_token),
        })
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
    let token = bearer(parts)?;
    Ok(state.auth.identify(token).await.map_err(CoreError::from)?)
}
