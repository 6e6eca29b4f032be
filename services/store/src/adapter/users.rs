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

use super::Result;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::users::{
    MemberRow, SessionRow, TenantRoleRow, UserCredentialsRow, UserRow, member_columns,
    session_columns, tenant_role_columns, user_columns,
};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::Role;
use baton_core::model::{AuditEntry, Member, Session, TenantRole, User};
use baton_core::ports::{MemberChange, UserCredentials, UserStore};
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use sqlx::Transaction;
use uuid::Uuid;

/// A user by email, with the password hash.
const CREDENTIALS: &str = concat!(
    "SELECT ",
    user_columns!(),
    ", password_hash FROM users WHERE email = $1"
);

/// A user by id.
const USER: &str = concat!("SELECT ", user_columns!(), " FROM users WHERE id = $1");

/// A tenant's member by user id, with the user's email.
const MEMBER: &str = concat!(
    "SELECT ",
    member_columns!(),
    " FROM memberships m JOIN users u ON u.id = m.user_id \
     WHERE m.tenant_id = $1 AND m.user_id = $2"
);

/// A tenant's members with their emails; the tenant's id follows.
const MEMBERS_OF_TENANT: &str = concat!(
    "SELECT ",
    member_columns!(),
    " FROM memberships m JOIN users u ON u.id = m.user_id \
     WHERE m.tenant_id = "
);

/// A user's memberships with their tenants' names, in tenant order.
const MEMBERSHIPS: &str = concat!(
    "SELECT ",
    tenant_role_columns!(),
    " FROM memberships m JOIN tenants t ON t.id = m.tenant_id \
     WHERE m.user_id = $1 ORDER BY m.tenant_id LIMIT $2"
);

/// The session whose token hashes to `$1`.
const SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions WHERE token_hash = $1"
);

#[async_trait]
impl<B: Backend> UserStore for Store<B> {
    #[tracing::instrument(name = "store.create_user", skip_all)]
    async fn create_user(&self, user: &User, password_hash: &str) -> Result<()> {
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
    async fn find_user_by_email(&self, email: &str) -> Result<Option<UserCredentials>> {
        let q = Query::new(CREDENTIALS).bind(email);
        self.read_optional::<UserCredentialsRow, _>(PoolKind::App, Scope::NoTenant, q)
            .await
    }

    async fn get_user(&self, id: Uuid) -> Result<Option<User>> {
        let q = Query::new(USER).bind(id);
        self.read_optional::<UserRow, _>(PoolKind::App, Scope::NoTenant, q)
            .await
    }

    /// An existing membership is `Conflict { expected: 0, actual: 0 }`; an unknown tenant
    /// or user `NotFound`.
    #[tracing::instrument(name = "store.add_member", skip_all)]
    async fn add_member(
        &self,
        tenant: TenantId,
        member: &Member,
        audit: &AuditEntry,
    ) -> Result<()> {
        let mut change = self.audited(tenant, audit).await?;
        Query::new(
            "INSERT INTO memberships (tenant_id, user_id, role, created_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(tenant.as_uuid())
        .bind(member.user_id)
        .bind(member.role.as_str())
        .bind(micros(member.created_at))
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.get_member", skip_all)]
    async fn get_member(&self, tenant: TenantId, user: Uuid) -> Result<Option<Member>> {
        let q = Query::new(MEMBER).bind(tenant.as_uuid()).bind(user);
        self.tenant_row::<MemberRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.list_members", skip_all)]
    async fn list_members(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Member>> {
        self.key_order::<MemberRow, _>(tenant, MEMBERS_OF_TENANT, "u.email", after, limit)
            .await
    }

    #[tracing::instrument(name = "store.change_member_role", skip_all)]
    async fn change_member_role(
        &self,
        tenant: TenantId,
        user: Uuid,
        from: Role,
        to: Role,
        audit: &AuditEntry,
    ) -> Result<MemberChange> {
        let q =
            Query::new("UPDATE memberships SET role = $3 WHERE tenant_id = $1 AND user_id = $2")
                .bind(tenant.as_uuid())
                .bind(user)
                .bind(to.as_str());
        let leaves_owner = to != Role::Owner;
        self.change_member(tenant, user, from, leaves_owner, audit, q)
            .await
    }

    #[tracing::instrument(name = "store.remove_member", skip_all)]
    async fn remove_member(
        &self,
        tenant: TenantId,
        user: Uuid,
        from: Role,
        audit: &AuditEntry,
    ) -> Result<MemberChange> {
        let q = Query::new("DELETE FROM memberships WHERE tenant_id = $1 AND user_id = $2")
            .bind(tenant.as_uuid())
            .bind(user);
        self.change_member(tenant, user, from, true, audit, q).await
    }

    /// Tenant ids are UUIDs, which both databases compare byte-wise.
    #[tracing::instrument(name = "store.memberships_of", skip_all)]
    async fn memberships_of(&self, user: Uuid, limit: u32) -> Result<Vec<TenantRole>> {
        let q = Query::new(MEMBERSHIPS).bind(user).bind(i64::from(limit));
        self.read_all::<TenantRoleRow, _>(PoolKind::App, Scope::CrossTenant, q)
            .await
    }

    /// Timestamps compare correctly as SQLite's RFC 3339 text (see `touch_api_key`), so
    /// the purge is one statement on both databases.
    #[tracing::instrument(name = "store.create_session", skip_all)]
    async fn create_session(&self, session: &Session, hash: &[u8]) -> Result<()> {
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

    async fn lookup_session(&self, hash: &[u8]) -> Result<Option<Session>> {
        let q = Query::new(SESSION).bind(hash);
        self.read_optional::<SessionRow, _>(PoolKind::App, Scope::NoTenant, q)
            .await
    }

    #[tracing::instrument(name = "store.revoke_session", skip_all)]
    async fn revoke_session(&self, id: Uuid, at: DateTime<Utc>) -> Result<bool> {
        let q =
            Query::new("UPDATE sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
                .bind(id)
                .bind(micros(at));
        let revoked = self.write_one(PoolKind::App, Scope::NoTenant, q).await?;
        Ok(revoked > 0)
    }
}

impl<B: Backend> Store<B> {
    /// Changes `user`'s membership of `tenant`, which has role `from`, with `write` (and
    /// `audit`'s entry), unless the change is refused: the membership is gone or changed
    /// since, or it would leave the tenant without an owner (`leaves_owner`: the user
    /// would no longer be one).
    async fn change_member(
        &self,
        tenant: TenantId,
        user: Uuid,
        from: Role,
        leaves_owner: bool,
        audit: &AuditEntry,
        write: Query<B>,
    ) -> Result<MemberChange> {
        let mut change = self.audited(tenant, audit).await?;
        if let Some(refused) = refusal(&mut change.tx, tenant, user, from, leaves_owner).await? {
            change.rollback().await;
            return Ok(refused);
        }
        write.execute(&mut change.tx).await?;
        change.commit().await?;
        Ok(MemberChange::Done)
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
) -> Result<Option<MemberChange>> {
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
