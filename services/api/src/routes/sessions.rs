//! `/v1/login`, `/v1/logout` and `/v1/me`: a user logs in with email and password and
//! gets a session token; logging out ends it; `me` says who the caller is and where it may
//! act.
//!
//! Login needs no credentials. Its failures all answer the same `401` (an unknown email,
//! a wrong password, input no account can have), and it is rate-limited per account and
//! per source address before any password is checked. Neither the password nor the token
//! is ever logged.

use crate::auth::{Identified, Identity};
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::ApiJson;
use crate::state::AppState;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use baton_core::users::{LoggedIn, Login, LoginError, TenantRole, User, normalize_email};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::net::IpAddr;

/// The address of the connection's peer, when the server was started with it.
pub struct Peer(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(crate::auth::peer_address(parts)))
    }
}

/// Log in with email and password: the answer holds a session token, shown this once.
/// Every failure answers the same `401`; too many attempts on one account or from one
/// address answer `429` with `Retry-After`.
#[utoipa::path(post, path = "/v1/login", tag = "sessions", request_body = Login,
    responses((status = 200, body = LoggedIn), (status = "4XX", body = Problem)))]
pub async fn login(
    State(st): State<AppState>,
    Peer(address): Peer,
    ApiJson(login): ApiJson<Login>,
) -> ApiResult<axum::Json<LoggedIn>> {
    let limits = &st.accounts.login_limits;
    let limited = |e: crate::limits::Exceeded| ApiError::rate_limited(e.wait, e.what);
    limits.check_address(address).map_err(limited)?;
    limits
        .check_account(&normalize_email(&login.email))
        .map_err(limited)?;
    match st.accounts.users.login(&login.email, &login.password).await {
        Ok(done) => Ok(axum::Json(done)),
        Err(LoginError::InvalidCredentials) => {
            tracing::info!("login refused");
            Err(ApiError::new(
                Code::Unauthorized,
                LoginError::InvalidCredentials.to_string(),
            ))
        }
        Err(LoginError::Core(e)) => Err(e.into()),
    }
}

/// End the caller's session: its token fails from the next request on, on every replica.
/// Only a session token logs out (`400` for an API key).
#[utoipa::path(post, path = "/v1/logout", tag = "sessions",
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn logout(
    State(st): State<AppState>,
    Identified(identity): Identified,
) -> ApiResult<StatusCode> {
    let Identity::Session(session) = identity else {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "only a session token logs out: revoke an API key with DELETE /v1/api-keys/{key_id}",
        ));
    };
    st.accounts.users.logout(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who the caller is and where it may act.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Me {
    /// How the caller is recorded: `user:<id>` (a session), `key:<id>` (an API key) or
    /// `local` (the embedded tier's local owner).
    pub actor: String,
    /// The session's user; null for an API key and the local owner.
    pub user: Option<User>,
    /// When the session ends; null for an API key and the local owner.
    pub session_expires_at: Option<DateTime<Utc>>,
    /// The tenants the caller may act in and its role in each: a user's memberships, or
    /// the one tenant of an API key.
    pub tenants: Vec<TenantRole>,
}

/// The caller: its user (for a session), and its tenants and roles. A session needs no
/// `Baton-Tenant` header here.
#[utoipa::path(get, path = "/v1/me", tag = "sessions",
    responses((status = 200, body = Me), (status = "4XX", body = Problem)))]
pub async fn me(
    State(st): State<AppState>,
    Identified(identity): Identified,
) -> ApiResult<axum::Json<Me>> {
    let me = match identity {
        Identity::Session(session) => {
            let users = &st.accounts.users;
            Me {
                actor: format!("user:{}", session.user),
                user: Some(users.user(session.user).await?),
                session_expires_at: Some(session.expires_at),
                tenants: users.memberships(session.user).await?,
            }
        }
        other => {
            let p = other.principal(&st, None, None).await?;
            let tenant = st
                .tenants
                .get_tenant(p.tenant)
                .await
                .map_err(baton_core::CoreError::from)?
                .ok_or(baton_core::CoreError::NotFound("tenant"))?;
            Me {
                actor: p.actor,
                user: None,
                session_expires_at: None,
                tenants: vec![TenantRole {
                    tenant_id: tenant.id,
                    name: tenant.name,
                    role: p.role,
                }],
            }
        }
    };
    Ok(axum::Json(me))
}
