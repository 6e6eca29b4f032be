//! `UserStore` for both adapters: users, tenant memberships and login sessions. Users and
//! sessions belong to no tenant (`Scope::NoTenant`); the lookups by email, by session hash
//! and of a user's memberships are how a login finds its tenants, and the last is the one
//! cross-tenant path here (`Scope::CrossTenant`). Everything about a tenant's members is
//! filtered by the tenant and runs scoped to it.
//!
//! A change of role and a removal run in one transaction that first locks the tenant's
//! owner memberships, then decides the last-owner rule and writes: two owners demoting
//! each other at once are serialized, and the second finds itself the last owner.

/// Implements `UserStore` for `$store` (a `$db` store), mapping driver errors with
/// `$classify`; `$lock` appended to a `SELECT` locks the rows it reads until the
/// transaction ends (`""` when write transactions are serialized already). Everything
/// runs on the `app` pool. Invoked through [`super::impl_ports!`].
macro_rules! impl_user_store {
    ($store:ty, $db:ty, $classify:path, $lock:literal) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::model::AuditEntry;
            use baton_core::model::{Member, Session, TenantRole, User};
            use baton_core::ports::{MemberChange, UserCredentials, UserStore};
            use baton_core::{Role, StoreError};
            use baton_events::TenantId;
            use chrono::{DateTime, Utc};
            use sqlx::QueryBuilder;
            use uuid::Uuid;
            use $crate::plan::micros;
            use $crate::pools::{PoolKind, Scope};
            use $crate::rows::{
                MemberRow, SessionRow, TenantRoleRow, UserCredentialsRow, UserRow, map_all,
                member_columns, session_columns, tenant_role_columns, user_columns,
            };

            type Connection = <$db as sqlx::Database>::Connection;

            /// What a membership change becomes, decided inside its transaction once the
            /// tenant's owners are locked: `None` when the write may go ahead.
            async fn refusal(
                tx: &mut Connection,
                tenant: TenantId,
                user: Uuid,
                from: Role,
                leaves_owner: bool,
            ) -> Result<Option<MemberChange>, StoreError> {
                let owners: Vec<Uuid> = sqlx::query_scalar(concat!(
                    "SELECT user_id FROM memberships \
                     WHERE tenant_id = $1 AND role = 'owner' ORDER BY user_id",
                    $lock
                ))
                .bind(tenant.as_uuid())
                .fetch_all(&mut *tx)
                .await
                .map_err($classify)?;
                let current: Option<String> = sqlx::query_scalar(concat!(
                    "SELECT role FROM memberships WHERE tenant_id = $1 AND user_id = $2",
                    $lock
                ))
                .bind(tenant.as_uuid())
                .bind(user)
                .fetch_optional(&mut *tx)
                .await
                .map_err($classify)?;
                Ok(match current {
                    None => Some(MemberChange::NotFound),
                    Some(role) if role != from.as_str() => Some(MemberChange::Stale),
                    Some(_)
                        if from == Role::Owner
                            && leaves_owner
                            && owners.iter().all(|o| *o == user) =>
                    {
                        Some(MemberChange::LastOwner)
                    }
                    Some(_) => None,
                })
            }

            #[async_trait]
            impl UserStore for $store {
                #[tracing::instrument(name = "store.create_user", skip_all)]
                async fn create_user(
                    &self,
                    user: &User,
                    password_hash: &str,
                ) -> Result<(), StoreError> {
                    let mut tx = self.pools.write(PoolKind::App, Scope::NoTenant).await?;
                    sqlx::query(concat!(
                        "INSERT INTO users (",
                        user_columns!(),
                        ", password_hash) VALUES ($1, $2, $3, $4)"
                    ))
                    .bind(user.id)
                    .bind(&user.email)
                    .bind(micros(user.created_at))
                    .bind(password_hash)
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    tx.commit().await.map_err($classify)
                }

                #[tracing::instrument(name = "store.find_user_by_email", skip_all)]
                async fn find_user_by_email(
                    &self,
                    email: &str,
                ) -> Result<Option<UserCredentials>, StoreError> {
                    let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
                    let row: Option<UserCredentialsRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        user_columns!(),
                        ", password_hash FROM users WHERE email = $1"
                    ))
                    .bind(email)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(UserCredentials::from))
                }

                async fn get_user(&self, id: Uuid) -> Result<Option<User>, StoreError> {
                    let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
                    let row: Option<UserRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        user_columns!(),
                        " FROM users WHERE id = $1"
                    ))
                    .bind(id)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(User::from))
                }

                /// An existing membership is `Conflict { expected: 0, actual: 0 }`; an
                /// unknown tenant or user `NotFound`.
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
                    sqlx::query(
                        "INSERT INTO memberships (tenant_id, user_id, role, created_at) \
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(tenant.as_uuid())
                    .bind(member.user_id)
                    .bind(member.role.as_str())
                    .bind(micros(member.created_at))
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    $crate::adapter::audit::write_audit(&mut tx, tenant, audit).await?;
                    tx.commit().await.map_err($classify)
                }

                #[tracing::instrument(name = "store.get_member", skip_all)]
                async fn get_member(
                    &self,
                    tenant: TenantId,
                    user: Uuid,
                ) -> Result<Option<Member>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let row: Option<MemberRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        member_columns!(),
                        " FROM memberships m JOIN users u ON u.id = m.user_id \
                          WHERE m.tenant_id = $1 AND m.user_id = $2"
                    ))
                    .bind(tenant.as_uuid())
                    .bind(user)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
                    row.map(Member::try_from).transpose()
                }

                #[tracing::instrument(name = "store.list_members", skip_all)]
                async fn list_members(
                    &self,
                    tenant: TenantId,
                    after: Option<&str>,
                    limit: u32,
                ) -> Result<Vec<Member>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let mut q: QueryBuilder<$db> = QueryBuilder::new(concat!(
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
                    let rows: Vec<MemberRow> = q
                        .build_query_as()
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($classify)?;
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
                    if let Some(refused) =
                        refusal(&mut tx, tenant, user, from, leaves_owner).await?
                    {
                        let _ = tx.rollback().await;
                        return Ok(refused);
                    }
                    sqlx::query(
                        "UPDATE memberships SET role = $3 WHERE tenant_id = $1 AND user_id = $2",
                    )
                    .bind(tenant.as_uuid())
                    .bind(user)
                    .bind(to.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    $crate::adapter::audit::write_audit(&mut tx, tenant, audit).await?;
                    tx.commit().await.map_err($classify)?;
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
                    sqlx::query("DELETE FROM memberships WHERE tenant_id = $1 AND user_id = $2")
                        .bind(tenant.as_uuid())
                        .bind(user)
                        .execute(&mut *tx)
                        .await
                        .map_err($classify)?;
                    $crate::adapter::audit::write_audit(&mut tx, tenant, audit).await?;
                    tx.commit().await.map_err($classify)?;
                    Ok(MemberChange::Done)
                }

                /// Tenant ids are UUIDs, which both databases compare byte-wise.
                #[tracing::instrument(name = "store.memberships_of", skip_all)]
                async fn memberships_of(
                    &self,
                    user: Uuid,
                    limit: u32,
                ) -> Result<Vec<TenantRole>, StoreError> {
                    let mut conn = self.pools.read(PoolKind::App, Scope::CrossTenant).await?;
                    let rows: Vec<TenantRoleRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        tenant_role_columns!(),
                        " FROM memberships m JOIN tenants t ON t.id = m.tenant_id \
                          WHERE m.user_id = $1 ORDER BY m.tenant_id LIMIT $2"
                    ))
                    .bind(user)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($classify)?;
                    map_all(rows)
                }

                /// Timestamps compare correctly as SQLite's RFC 3339 text (see
                /// `touch_api_key`), so the purge is one statement on both databases.
                #[tracing::instrument(name = "store.create_session", skip_all)]
                async fn create_session(
                    &self,
                    session: &Session,
                    hash: &[u8],
                ) -> Result<(), StoreError> {
                    let mut tx = self.pools.write(PoolKind::App, Scope::NoTenant).await?;
                    sqlx::query("DELETE FROM sessions WHERE user_id = $1 AND expires_at < $2")
                        .bind(session.user)
                        .bind(micros(session.created_at))
                        .execute(&mut *tx)
                        .await
                        .map_err($classify)?;
                    sqlx::query(concat!(
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
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    tx.commit().await.map_err($classify)
                }

                async fn lookup_session(&self, hash: &[u8]) -> Result<Option<Session>, StoreError> {
                    let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
                    let row: Option<SessionRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        session_columns!(),
                        " FROM sessions WHERE token_hash = $1"
                    ))
                    .bind(hash)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(Session::from))
                }

                #[tracing::instrument(name = "store.revoke_session", skip_all)]
                async fn revoke_session(
                    &self,
                    id: Uuid,
                    at: DateTime<Utc>,
                ) -> Result<bool, StoreError> {
                    let mut tx = self.pools.write(PoolKind::App, Scope::NoTenant).await?;
                    let done = sqlx::query(
                        "UPDATE sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
                    )
                    .bind(id)
                    .bind(micros(at))
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    tx.commit().await.map_err($classify)?;
                    Ok(done.rows_affected() > 0)
                }
            }
        };
    };
}
pub(crate) use impl_user_store;
