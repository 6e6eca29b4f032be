//! The caller's identity. These extractors are the only place a [`Principal`] is made
//! from credentials: a bearer API key (`bk_…`), a login session token (`bs_…`), or — in
//! the embedded tier on loopback with auth off — the local owner of the default tenant.
//!
//! A key or session is read from the database on every request, so a revoked or expired
//! one fails at once on every replica. The same read brings a key's last recorded use;
//! when that is over a minute old, the use is recorded by a task of its own, off the
//! request's path.
//!
//! A session acts in one of its user's tenants with the membership's role: the tenant
//! named by the `Baton-Tenant` header, or the user's only tenant without one. Keys and the
//! local owner act in their own tenant; a header naming another is refused.

use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use baton_core::api_keys;
use baton_core::ports::{ApiKeyRecord, Clock, SystemClock, TenantStore};
use baton_core::users::{Session, SessionError};
use baton_core::{Principal, Role, TenantId, keys};
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use uuid::Uuid;

/// How requests without credentials are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Every request needs an API key or a session token.
    Required,
    /// Requests without credentials act as the owner of this tenant (embedded tier,
    /// loopback only; the server refuses this mode on any other address).
    LocalOwner { tenant: TenantId },
}

/// The authenticated caller of a request.
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    /// Authenticates the request, picks its tenant, then counts it against the caller's
    /// rate limits.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let identity = identify(parts, state).await?;
        let requested = requested_tenant(parts)?;
        let caller = identity
            .principal(state, requested, peer_address(parts))
            .await?;
        state
            .limits
            .check(&caller)
            .map_err(|e| ApiError::rate_limited(e.wait, e.what))?;
        Ok(Caller(caller))
    }
}

/// The header that names the tenant a session acts in.
pub const TENANT_HEADER: &str = "baton-tenant";

/// Who presented which credentials, before a tenant is chosen.
#[derive(Debug, Clone)]
pub enum Identity {
    /// The embedded tier's local owner (no credentials, auth off).
    Local { tenant: TenantId },
    /// A valid API key.
    Key(ApiKeyRecord),
    /// A live login session.
    Session(Session),
}

impl Identity {
    /// The principal acting in `requested` (the `Baton-Tenant` header), or in the
    /// identity's only tenant without one, calling from `source`.
    pub async fn principal(
        &self,
        state: &AppState,
        requested: Option<TenantId>,
        source: Option<IpAddr>,
    ) -> Result<Principal, ApiError> {
        let own = |tenant: TenantId, role: Role, actor: String| {
            if requested.is_some_and(|t| t != tenant) {
                return Err(ApiError::new(
                    Code::Forbidden,
                    "the credentials do not grant access to the tenant named by the \
                     Baton-Tenant header",
                ));
            }
            Ok(Principal {
                tenant,
                role,
                actor,
                source,
            })
        };
        match self {
            Identity::Local { tenant } => own(*tenant, Role::Owner, "local".into()),
            Identity::Key(record) => own(
                record.key.tenant,
                record.key.role,
                format!("key:{}", record.key.id),
            ),
            Identity::Session(session) => state
                .accounts
                .users
                .principal(session, requested, source)
                .await
                .map_err(session_error),
        }
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
            let caller = identity.principal(state, None, peer_address(parts)).await?;
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

/// A session that does not authenticate: 401 when the token is not (or no longer) good,
/// 403 when its user may not act in the tenant, 400 when the tenant must be named.
fn session_error(e: SessionError) -> ApiError {
    let detail = e.to_string();
    match e {
        SessionError::Unknown | SessionError::Revoked | SessionError::Expired => {
            unauthorized(&detail)
        }
        SessionError::NotMember | SessionError::NoTenant => ApiError::new(Code::Forbidden, detail),
        SessionError::TenantNeeded => ApiError::new(Code::InvalidRequest, detail),
        SessionError::Core(e) => e.into(),
    }
}

/// Reads and checks the request's credentials.
async fn identify(parts: &Parts, state: &AppState) -> Result<Identity, ApiError> {
    let Some(value) = parts.headers.get(AUTHORIZATION) else {
        return match state.auth {
            AuthMode::LocalOwner { tenant } => Ok(Identity::Local { tenant }),
            AuthMode::Required => Err(unauthorized(
                "missing credentials: send `Authorization: Bearer <api key or session token>`",
            )),
        };
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        // The scheme is case-insensitive (RFC 9110).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| {
            unauthorized("the Authorization header must be `Bearer <api key or session token>`")
        })?;
    if token.starts_with(keys::SESSION_PREFIX) {
        if !keys::is_well_formed_session(token) {
            return Err(unauthorized("the session token is malformed"));
        }
        let session = state
            .accounts
            .users
            .session(token)
            .await
            .map_err(session_error)?;
        return Ok(Identity::Session(session));
    }
    if !keys::is_well_formed(token) {
        return Err(unauthorized("the API key is malformed"));
    }
    let record = state
        .tenants
        .lookup_api_key(&keys::hash_token(token))
        .await
        .map_err(baton_core::CoreError::from)?
        .ok_or_else(|| unauthorized("the API key is not valid"))?;
    let key = &record.key;
    let now = SystemClock.now();
    if key.revoked_at.is_some() {
        return Err(unauthorized("the API key has been revoked"));
    }
    if key.expires_at.is_some_and(|t| t <= now) {
        return Err(unauthorized("the API key has expired"));
    }
    record_use(&state.tenants, &record, now);
    Ok(Identity::Key(record))
}

fn unauthorized(detail: &str) -> ApiError {
    ApiError::new(Code::Unauthorized, detail)
}

/// Keys whose use a task is recording right now: a burst of requests with the same key
/// makes one write, not one each, while the first is under way.
static RECORDING: Mutex<Option<HashSet<Uuid>>> = Mutex::new(None);

fn recording() -> MutexGuard<'static, Option<HashSet<Uuid>>> {
    // The set stays consistent whatever panicked while holding the lock.
    RECORDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes a key out of [`RECORDING`] when its task ends, or is dropped unrun.
struct Recording(Uuid);

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some(set) = recording().as_mut() {
            set.remove(&self.0);
        }
    }
}

/// Records the key's use at `now` if its last recorded one is stale, in a task of its
/// own: the request neither waits for the write nor fails with it. The store's write is
/// conditional too, so replicas racing over the same key write once.
fn record_use(store: &Arc<dyn TenantStore>, record: &ApiKeyRecord, now: DateTime<Utc>) {
    if !api_keys::use_worth_recording(record.last_used_at, now) {
        return;
    }
    let (tenant, id) = (record.key.tenant, record.key.id);
    if !recording().get_or_insert_with(HashSet::new).insert(id) {
        return;
    }
    let guard = Recording(id);
    let store = store.clone();
    tokio::spawn(async move {
        let _guard = guard;
        let stale_before = api_keys::stale_before(now);
        if let Err(e) = store.touch_api_key(tenant, id, now, stale_before).await {
            // Only the last-use time is lost; the next request tries again.
            tracing::warn!(key_id = %id, error = %e, "recording an API key's use failed");
        }
    });
}
