//! `/v1/login`, `/v1/logout` and `/v1/me`: a user logs in with email and password and
//! gets a session token (or, for a browser page on the server's own origin, a session
//! cookie and its anti-CSRF token); logging out ends it; `me` says who the caller is and
//! where it may act.
//!
//! Login needs no credentials. Its failures all answer the same `401` (an unknown email,
//! a wrong password, input no account can have), and it is rate-limited per account and
//! per source address before any password is checked. Neither the password nor the token
//! is ever logged.

use crate::auth::{Identified, SESSION_COOKIE};
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::ApiJson;
use crate::state::AppState;
use axum::extract::{FromRequestParts, State};
use axum::http::header::SET_COOKIE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use baton_core::auth::{Identity, Me};
use baton_core::crypto::tokens;
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

/// Log in with email and password: the answer holds a session token, shown this once,
/// or with `cookie: true` sets the `__Host-baton_session` cookie and answers the session's
/// anti-CSRF token instead. Every failure answers the same `401`; too many attempts on
/// one account or from one address answer `429` with `Retry-After`.
#[utoipa::path(post, path = "/v1/login", operation_id = "login", tag = "sessions", request_body = Login,
    security(()),
    responses((status = 200, body = LoggedIn,
        headers(("Set-Cookie" = String, description = "With `cookie: true`: the session"))),
        (status = "4XX", body = Problem)))]
pub async fn login(
    State(st): State<AppState>,
    Peer(address): Peer,
    ApiJson(login): ApiJson<Login>,
) -> ApiResult<Response> {
    let limits = &st.accounts.login_limits;
    let limited = |e: crate::limits::Exceeded| ApiError::rate_limited(e.wait, e.what);
    limits.check_address(address).map_err(limited)?;
    limits
        .check_account(&normalize_email(&login.email))
        .map_err(limited)?;
    let mut answer = st
        .accounts
        .users
        .login(&login.email, &login.password)
        .await
        .map_err(baton_core::CoreError::from)?;
    if !login.cookie {
        return Ok(axum::Json(answer).into_response());
    }
    let token = answer.token.take().unwrap_or_default();
    answer.csrf_token = Some(tokens::csrf_token(&token));
    // The session was made just now: it lasts the configured lifetime from here.
    let lifetime = st.accounts.users.session_lifetime.num_seconds();
    // Always `Secure`: browsers keep it from HTTPS pages and from plain-HTTP pages of a
    // loopback address (`localhost`, `127.0.0.1`), and never send it over plain HTTP
    // elsewhere.
    let cookie = format!(
        "{SESSION_COOKIE}={token}; Path=/; Max-Age={lifetime}; HttpOnly; Secure; SameSite=Strict"
    );
    Ok(([(SET_COOKIE, cookie)], axum::Json(answer)).into_response())
}

/// End the caller's session: its token fails from the next request on, on every replica,
/// and a browser forgets its session cookie. Only a session token logs out (`400` for an
/// API key).
#[utoipa::path(post, path = "/v1/logout", operation_id = "logout", tag = "sessions",
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn logout(
    State(st): State<AppState>,
    Identified(identity): Identified,
) -> ApiResult<Response> {
    let Identity::Session(session) = identity else {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "only a session token logs out: revoke an API key with DELETE /v1/api-keys/{key_id}",
        ));
    };
    st.accounts.users.logout(&session).await?;
    // Whatever the browser kept, it forgets.
    let forget = format!("{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict");
    Ok(([(SET_COOKIE, forget)], StatusCode::NO_CONTENT).into_response())
}

/// The caller: its user (for a session), and its tenants and roles. A session needs no
/// `Baton-Tenant` header here. A session kept in a cookie also gets its anti-CSRF token,
/// so a page loaded again can go on.
#[utoipa::path(get, path = "/v1/me", operation_id = "getMe", tag = "sessions",
    responses((status = 200, body = Me), (status = "4XX", body = Problem)))]
pub async fn me(
    State(st): State<AppState>,
    Identified(identity): Identified,
    headers: HeaderMap,
) -> ApiResult<axum::Json<Me>> {
    let mut me = st.auth.whoami(&identity).await?;
    if matches!(identity, Identity::Session(_)) {
        me.csrf_token = crate::auth::cookie_csrf_token(&headers);
    }
    Ok(axum::Json(me))
}
