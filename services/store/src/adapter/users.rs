//! `UserStore`: users, tenant memberships and login sessions, on the `app` pool. Users and
//! sessions belong to no tenant (`Scope::NoTenant`); the lookups by email, by session hash
//! and of a user's memberships are how a login finds its tenants, and the last is the one
//! cross-tenant path here (`Scope::CrossTenant`). Everything about a tenant's members is
//! filtered by the tenant and runs scoped to it.
//!
//! A change of role and a removal run in one transaction that first locks the tenant's
//! owner memberships (the backend's [`Backend::LOCK_ROWS`]), then decides the last-owner
//! rule and writes: two owners demoting each other at once are serialized, and the second
//! finds itself the last owner.

use super::audit::write_audit;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::map_all;
use crate::rows::users::{
    MemberRow, SessionRow, TenantRoleRow, UserCredentialsRow, UserRow, member_columns,
    session_columns, tenant_role_columns, user_columns,
};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{AuditEntry, Member, Session, TenantRole, User};
use baton_core::ports::{MemberChange, UserCredentials, UserStore};
use baton_core::{Role, StoreError};
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use sqlx::Transaction;
use uuid::Uuid;

#[async_trait]
impl<B: Backend> UserStore for Store<B> {
    #[tracing::instrument(name = "store.create_user", skip_all)]
    async fn create_user(&self, user: &User, password_hash: &str) -> Result<(), StoreError> {
        let q = Query::new(concat!(
            "INSERT INTO users (",
            user_columns!(),
            ", password_hash) VALUES ($1, $2, $3, $4)"
        ))
        .bind(user.id)
        .bind(&user.email)
        .bind(micros(user.created_at))
        .bind(password_hash);
        self.write_one(PoolKind::App, Scope::NoTenant, q)
            .await
            .map(drop)
    }

    #[tracing::instrument(name = "store.find_user_by_email", skip_all)]
    async fn find_user_by_email(&self, email: &str) -> Result<Option<UserCredentials>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            user_columns!(),
            ", password_hash FROM users WHERE email = $1"
        ))
        .bind(email);
        let row: Option<UserCredentialsRow> = self
            .read_optional(PoolKind::App, Scope::NoTenant, q)
            .await?;
        Ok(row.map(UserCredentials::from))
    }

    async fn get_user(&self, id: Uuid) -> Result<Option<User>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            user_columns!(),
            " FROM users WHERE id = $1"
        ))
        .bind(id);
        let row: Option<UserRow> = self
            .read_optional(PoolKind::App, Scope::NoTenant, q)
            .await?;
        Ok(row.map(User::from))
    }

    /// An existing membership is `Conflict { expected: 0, actual: 0 }`; an unknown tenant
    /// or user `NotFound`.
    #[tracing::instrument(name = "store.add_member", skip_all)]
    async fn add_member(
        &self,
        tenant: TenantId,
        member: &Member,
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        Query::new(
            "INSERT INTO memberships (tenant_id, user_id, role, created_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(tenant.as_uuid())
        .bind(member.user_id)
        .bind(member.role.as_str())
        .bind(micros(member.created_at))
        .execute(&mut tx)
        .await?;
        write_audit(&mut tx, tenant, audit).await?;
        commit(tx).await
    }

    #[tracing::instrument(name = "store.get_member", skip_all)]
    async fn get_member(&self, tenant: TenantId, user: Uuid) -> Result<Option<Member>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            member_columns!(),
            " FROM memberships m JOIN users u ON u.id = m.user_id \
              WHERE m.tenant_id = $1 AND m.user_id = $2"
        ))
        .bind(tenant.as_uuid())
        .bind(user);
        let row: Option<MemberRow> = self
            .read_optional(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        row.map(Member::try_from).transpose()
    }

    #[tracing::instrument(name = "store.list_members", skip_all)]
    async fn list_members(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Member>, StoreError> {
        let mut q = Query::new(concat!(
            "SELECT ",
            member_columns!(),
            " FROM memberships m JOIN users u ON u.id = m.user_id \
              WHERE m.tenant_id = "
        ));
        q.push_bind(tenant.as_uuid());
        if let Some(after) = after {
            q.push(" AND u.email > ").push_bind(after);
        }
        q.push(" ORDER BY u.email LIMIT ")
            .push_bind(i64::from(limit));
        let rows: Vec<MemberRow> = self
            .read_all(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        map_all(rows)
    }

    #[tracing::instrument(name = "store.change_member_role", skip_all)]
    async fn change_member_role(
        &self,
        tenant: TenantId,
        user: Uuid,
        from: Role,
        to: Role,
        audit: &AuditEntry,
    ) -> Result<MemberChange, StoreError> {
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        let leaves_owner = to != Role::Owner;
        if let Some(refused) = refusal(&mut tx, tenant, user, from, leaves_owner).await? {
            let _ = tx.rollback().await;
            return Ok(refused);
        }
        Query::new("UPDATE memberships SET role = $3 WHERE tenant_id = $1 AND user_id = $2")
            .bind(tenant.as_uuid())
            .bind(user)
            .bind(to.as_str())
            .execute(&mut tx)
            .await?;
        write_audit(&mut tx, tenant, audit).await?;
        commit(tx).await?;
        Ok(MemberChange::Done)
    }

    #[tracing::instrument(name = "store.remove_member", skip_all)]
    async fn remove_member(
        &self,
        tenant: TenantId,
        user: Uuid,
        from: Role,
        audit: &AuditEntry,
    ) -> Result<MemberChange, StoreError> {
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        if let Some(refused) = refusal(&mut tx, tenant, user, from, true).await? {
            let _ = tx.rollback().await;
            return Ok(refused);
        }
        Query::new("DELETE FROM memberships WHERE tenant_id = $1 AND user_id = $2")
            .bind(tenant.as_uuid())
            .bind(user)
            .execute(&mut tx)
            .await?;
        write_audit(&mut tx, tenant, audit).await?;
        commit(tx).await?;
        Ok(MemberChange::Done)
    }

    /// Tenant ids are UUIDs, which both databases compare byte-wise.
    #[tracing::instrument(name = "store.memberships_of", skip_all)]
    async fn memberships_of(&self, user: Uuid, limit: u32) -> Result<Vec<TenantRole>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            tenant_role_columns!(),
            " FROM memberships m JOIN tenants t ON t.id = m.tenant_id \
              WHERE m.user_id = $1 ORDER BY m.tenant_id LIMIT $2"
        ))
        .bind(user)
        .bind(i64::from(limit));
        let rows: Vec<TenantRoleRow> = self.read_all(PoolKind::App, Scope::CrossTenant, q).await?;
        map_all(rows)
    }

    /// Timestamps compare correctly as SQLite's RFC 3339 text (see `touch_api_key`), so
    /// the purge is one statement on both databases.
    #[tracing::instrument(name = "store.create_session", skip_all)]
    async fn create_session(&self, session: &Session, hash: &[u8]) -> Result<(), StoreError> {
        let mut tx = self.pools.write(PoolKind::App, Scope::NoTenant).await?;
        Query::new("DELETE FROM sessions WHERE user_id = $1 AND expires_at < $2")
            .bind(session.user)
            .bind(micros(session.created_at))
            .execute(&mut tx)
            .await?;
        Query::new(concat!(
            "INSERT INTO sessions (",
            session_columns!(),
            ", token_hash) VALUES ($1, $2, $3, $4, $5, $6)"
        ))
        .bind(session.id)
        .bind(session.user)
        .bind(micros(session.created_at))
        .bind(micros(session.expires_at))
        .bind(session.revoked_at.map(micros))
        .bind(hash)
        .execute(&mut tx)
        .await?;
        commit(tx).await
    }

    async fn lookup_session(&self, hash: &[u8]) -> Result<Option<Session>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE token_hash = $1"
        ))
        .bind(hash);
        let row: Option<SessionRow> = self
            .read_optional(PoolKind::App, Scope::NoTenant, q)
            .await?;
        Ok(row.map(Session::from))
    }

    #[tracing::instrument(name = "store.revoke_session", skip_all)]
    async fn revoke_session(&self, id: Uuid, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let q =
            Query::new("UPDATE sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
                .bind(id)
                .bind(micros(at));
        let revoked = self.write_one(PoolKind::App, Scope::NoTenant, q).await?;
        Ok(revoked > 0)
    }
}

/// What a membership change becomes, decided inside its transaction once the tenant's
/// owners are locked: `None` when the write may go ahead.
async fn refusal<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    user: Uuid,
    from: Role,
    leaves_owner: bool,
) -> Result<Option<MemberChange>, StoreError> {
    let owners: Vec<(Uuid,)> = Query::new(
        "SELECT user_id FROM memberships \
         WHERE tenant_id = $1 AND role = 'owner' ORDER BY user_id",
    )
    .suffix(B::LOCK_ROWS)
    .bind(tenant.as_uuid())
    .fetch_all(&mut *tx)
    .await?;
    let current: Option<(String,)> =
        Query::new("SELECT role FROM memberships WHERE tenant_id = $1 AND user_id = $2")
            .suffix(B::LOCK_ROWS)
            .bind(tenant.as_uuid())
            .bind(user)
            .fetch_optional(&mut *tx)
            .await?;
    Ok(match current {
        None => Some(MemberChange::NotFound),
        Some((role,)) if role != from.as_str() => Some(MemberChange::Stale),
        Some(_) if from == Role::Owner && leaves_owner && owners.iter().all(|(o,)| *o == user) => {
            Some(MemberChange::LastOwner)
        }
        Some(_) => None,
    })
}
