//! The caller's identity. This extractor is the only place a [`Principal`] is made from
//! credentials: a bearer API key, or — in the embedded tier on loopback with auth off —
//! the local owner of the default tenant.

use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use baton_core::{Principal, Role, TenantId, keys};

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

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get(AUTHORIZATION) else {
            return match state.auth {
                AuthMode::LocalOwner { tenant } => Ok(Caller(Principal {
                    tenant,
                    role: Role::Owner,
                    actor: "local".into(),
                })),
                AuthMode::Required => Err(unauthorized(
                    "missing credentials: send `Authorization: Bearer <api key>`",
                )),
            };
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <api key>`"))?;
        if !keys::is_well_formed(token) {
            return Err(unauthorized("the API key is malformed"));
        }
        let key = state
            .tenants
            .find_api_key(&keys::hash_token(token))
            .await
            .map_err(baton_core::CoreError::from)?
            .ok_or_else(|| unauthorized("the API key is not valid"))?;
        if key.revoked_at.is_some() {
            return Err(unauthorized("the API key has been revoked"));
        }
        if key.expires_at.is_some_and(|t| t <= chrono::Utc::now()) {
            return Err(unauthorized("the API key has expired"));
        }
        Ok(Caller(Principal {
            tenant: key.tenant,
            role: key.role,
            actor: format!("key:{}", key.id),
        }))
    }
}

fn unauthorized(detail: &str) -> ApiError {
    ApiError::new(Code::Unauthorized, detail)
}
