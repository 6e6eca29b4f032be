//! The caller's identity. This extractor is the only place a [`Principal`] is made from
//! credentials: a bearer API key, or — in the embedded tier on loopback with auth off —
//! the local owner of the default tenant.
//!
//! A key is read from the database on every request, so a revoked or expired key fails at
//! once on every replica. The same read brings the key's last recorded use; when that is
//! over a minute old, the use is recorded by a task of its own, off the request's path.

use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use baton_core::api_keys;
use baton_core::ports::{ApiKeyRecord, Clock, SystemClock, TenantStore};
use baton_core::{Principal, Role, TenantId, keys};
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use uuid::Uuid;

/// How requests without credentials are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Every request needs an API key.
    Required,
    /// Requests without credentials act as the owner of this tenant (embedded tier,
    /// loopback only; the server refuses this mode on any other address).
    LocalOwner { tenant: TenantId },
}

/// The authenticated caller of a request.
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    /// Authenticates the request, then counts it against the caller's rate limits.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = authenticate(parts, state).await?;
        state
            .limits
            .check(&caller)
            .map_err(|e| ApiError::rate_limited(e.wait, e.what))?;
        Ok(Caller(caller))
    }
}

async fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    let Some(value) = parts.headers.get(AUTHORIZATION) else {
        return match state.auth {
            AuthMode::LocalOwner { tenant } => Ok(Principal {
                tenant,
                role: Role::Owner,
                actor: "local".into(),
            }),
            AuthMode::Required => Err(unauthorized(
                "missing credentials: send `Authorization: Bearer <api key>`",
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
        .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <api key>`"))?;
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
    Ok(Principal {
        tenant: key.tenant,
        role: key.role,
        actor: format!("key:{}", key.id),
    })
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
