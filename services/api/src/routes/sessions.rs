//! `/v1/login`, `/v1/logout` and `/v1/me`: a user logs in with email and password and
//! gets a session token; logging out ends it; `me` says who the caller is and where it may
//! act.
//!
//! Login needs no credentials. Its failures all answer the same `401` (an unknown email,
//! a wrong password, input no account can have), and it is rate-limited per account and
//! per source address before any password is checked. Neither the password nor the token
//! is ever logged.

use crate::auth::Identified;
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::ApiJson;
use crate::state::AppState;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use baton_core::auth::{Identity, Me};
use baton_core::users::{LoggedIn, Login, normalize_email};
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
#[utoipa::path(post, path = "/v1/login", operation_id = "login", tag = "sessions", request_body = Login,
    security(()),
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
    Ok(axum::Json(
        st.accounts
            .users
            .login(&login.email, &login.password)
            .await
            .map_err(baton_core::CoreError::from)?,
    ))
}

/// End the caller's session: its token fails from the next request on, on every replica.
/// Only a session token logs out (`400` for an API key).
#[utoipa::path(post, path = "/v1/logout", operation_id = "logout", tag = "sessions",
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

/// The caller: its user (for a session), and its tenants and roles. A session needs no
/// `Baton-Tenant` header here.
#[utoipa::path(get, path = "/v1/me", operation_id = "getMe", tag = "sessions",
    responses((status = 200, body = Me), (status = "4XX", body = Problem)))]
pub async fn me(
    State(st): State<AppState>,
    Identified(identity): Identified,
) -> ApiResult<axum::Json<Me>> {
    Ok(axum::Json(st.auth.whoami(&identity).await?))
}
