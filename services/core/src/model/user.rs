//! Users, their memberships of tenants and their login sessions. Users and sessions belong
//! to no tenant: a user may be a member of several.

use crate::model::Role;
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct User {
    pub id: Uuid,
    /// Lower case, unique.
    pub email: String,
    pub created_at: DateTime<Utc>,
}

/// A user's membership of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Member {
    pub user_id: Uuid,
    pub email: String,
    pub role: Role,
    /// When the user was added to the tenant.
    pub created_at: DateTime<Utc>,
}

/// A tenant the user belongs to, and its role there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TenantRole {
    pub tenant_id: TenantId,
    pub name: String,
    pub role: Role,
}

/// A login session as stored (its token is not: only the token's hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: Uuid,
    pub user: Uuid,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}
