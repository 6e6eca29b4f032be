//! The rows of `users`, `memberships` (with the user's email or the tenant's name) and
//! `sessions`; never a password or token hash but where a login needs it.

use super::corrupt;
use baton_core::{Role, StoreError};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Expands to the columns of `users` a [`UserRow`] reads (never the password hash).
macro_rules! user_columns {
    () => {
        "id, email, created_at"
    };
}
pub(crate) use user_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct UserRow {
    pub id: Uuid,
    pub email: String,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<UserRow> for baton_core::model::User {
    type Error = StoreError;

    fn try_from(r: UserRow) -> Result<Self, StoreError> {
        Ok(baton_core::model::User {
            id: r.id,
            email: r.email,
            created_at: r.created_at,
        })
    }
}

/// A row of `users` with its password hash, for logging in.
#[derive(sqlx::FromRow)]
pub(crate) struct UserCredentialsRow {
    #[sqlx(flatten)]
    pub user: UserRow,
    pub password_hash: String,
}

impl TryFrom<UserCredentialsRow> for baton_core::ports::UserCredentials {
    type Error = StoreError;

    fn try_from(r: UserCredentialsRow) -> Result<Self, StoreError> {
        Ok(baton_core::ports::UserCredentials {
            user: r.user.try_into()?,
            password_hash: r.password_hash,
        })
    }
}

/// Expands to the columns of `memberships m JOIN users u` a [`MemberRow`] reads.
macro_rules! member_columns {
    () => {
        "m.user_id, u.email, m.role, m.created_at"
    };
}
pub(crate) use member_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct MemberRow {
    pub user_id: Uuid,
    pub email: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<MemberRow> for baton_core::model::Member {
    type Error = StoreError;

    fn try_from(r: MemberRow) -> Result<Self, StoreError> {
        let role = Role::parse(&r.role).ok_or_else(|| {
            corrupt(format!(
                "membership of user {} has unknown role {:?}",
                r.user_id, r.role
            ))
        })?;
        Ok(baton_core::model::Member {
            user_id: r.user_id,
            email: r.email,
            role,
            created_at: r.created_at,
        })
    }
}

/// Expands to the columns of `memberships m JOIN tenants t` a [`TenantRoleRow`] reads.
macro_rules! tenant_role_columns {
    () => {
        "m.tenant_id, t.name, m.role"
    };
}
pub(crate) use tenant_role_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TenantRoleRow {
    pub tenant_id: Uuid,
    pub name: String,
    pub role: String,
}

impl TryFrom<TenantRoleRow> for baton_core::model::TenantRole {
    type Error = StoreError;

    fn try_from(r: TenantRoleRow) -> Result<Self, StoreError> {
        let role = Role::parse(&r.role).ok_or_else(|| {
            corrupt(format!(
                "membership in tenant {} has unknown role {:?}",
                r.tenant_id, r.role
            ))
        })?;
        Ok(baton_core::model::TenantRole {
            tenant_id: r.tenant_id.into(),
            name: r.name,
            role,
        })
    }
}

/// Expands to the columns of `sessions` a [`SessionRow`] reads (never the token hash).
macro_rules! session_columns {
    () => {
        "id, user_id, created_at, expires_at, revoked_at"
    };
}
pub(crate) use session_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SessionRow {
    pub id: Uuid,
    pub user_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TryFrom<SessionRow> for baton_core::model::Session {
    type Error = StoreError;

    fn try_from(r: SessionRow) -> Result<Self, StoreError> {
        Ok(baton_core::model::Session {
            id: r.id,
            user: r.user_id,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        })
    }
}
