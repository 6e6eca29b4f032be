//! The skeletons the port methods share, written once: reading rows on a connection of
//! `pools` (all of them, or the one there is), a tenant's row by id, a page of a tenant's
//! rows newest first (ids are UUIDv7, so id order is creation order; both databases
//! compare UUIDs byte-wise) or in the order of a key, a page of a run's rows after a
//! position, a statement run alone in its own write transaction, and the commit that ends
//! every write. Each names its pool and scope, as every port method does.

use super::Result;
use crate::backend::{Backend, Decode};
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::map_all;
use crate::store::Store;
use baton_core::StoreError;
use baton_events::{RunId, TenantId};
use sqlx::Transaction;
use uuid::Uuid;

/// The tenant's row whose `id` is `id`: `select` is `SELECT <columns> FROM <table>`.
pub(crate) fn by_id<B: Backend>(select: &'static str, tenant: TenantId, id: Uuid) -> Query<B> {
    let mut q = Query::new(select);
    q.push(" WHERE tenant_id = ")
        .push_bind(tenant.as_uuid())
        .push(" AND id = ")
        .push_bind(id);
    q
}

/// A page of a run's rows after a position: `sql` binds `$1` the run, `$2` the tenant,
/// `$3` the position and `$4` the limit.
pub(crate) fn page_of<B: Backend>(
    sql: &'static str,
    tenant: TenantId,
    run: RunId,
    after: i64,
    limit: u32,
) -> Query<B> {
    Query::new(sql)
        .bind(run.as_uuid())
        .bind(tenant.as_uuid())
        .bind(after)
        .bind(i64::from(limit))
}

impl<B: Backend> Store<B> {
    /// Every row `q` returns, read on `kind`'s pool in `scope`, as the model.
    pub(crate) async fn read_all<R, T>(
        &self,
        kind: PoolKind,
        scope: Scope,
        q: Query<B>,
    ) -> Result<Vec<T>>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        let mut conn = self.pools.read(kind, scope).await?;
        map_all(q.fetch_all::<R>(&mut conn).await?)
    }

    /// The row `q` returns, if any, read on `kind`'s pool in `scope`, as the model.
    pub(crate) async fn read_optional<R, T>(
        &self,
        kind: PoolKind,
        scope: Scope,
        q: Query<B>,
    ) -> Result<Option<T>>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        let mut conn = self.pools.read(kind, scope).await?;
        let row = q.fetch_optional::<R>(&mut conn).await?;
        row.map(T::try_from).transpose()
    }

    /// Every row `q` returns, as the model, read on the `app` pool scoped to `tenant`.
    pub(crate) async fn tenant_rows<R, T>(&self, tenant: TenantId, q: Query<B>) -> Result<Vec<T>>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        self.read_all::<R, T>(PoolKind::App, Scope::Tenant(tenant), q)
            .await
    }

    /// The row `q` returns, if any, as the model, read on the `app` pool scoped to
    /// `tenant`.
    pub(crate) async fn tenant_row<R, T>(&self, tenant: TenantId, q: Query<B>) -> Result<Option<T>>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        self.read_optional::<R, T>(PoolKind::App, Scope::Tenant(tenant), q)
            .await
    }

    /// The tenant's row whose `id` is `id`, on the `app` pool: `select` is `SELECT
    /// <columns> FROM <table>`.
    pub(crate) async fn one_by_id<R, T>(
        &self,
        tenant: TenantId,
        select: &'static str,
        id: Uuid,
    ) -> Result<Option<T>>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        self.tenant_row::<R, T>(tenant, by_id(select, tenant, id))
            .await
    }

    /// A page of the tenant's rows on the `app` pool, newest first: those older than
    /// `before` when given, whose `filter.0` column equals `filter.1` when given, that
    /// meet `condition` (fixed SQL starting with ` AND`, or empty), at most `limit`.
    /// `select` is `SELECT <columns> FROM <table>`.
    pub(crate) async fn newest_first<R, T>(
        &self,
        tenant: TenantId,
        select: &'static str,
        filter: Option<(&'static str, &str)>,
        condition: &'static str,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<T>>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        let mut q = Query::new(select);
        q.push(" WHERE tenant_id = ").push_bind(tenant.as_uuid());
        if let Some((column, value)) = filter {
            q.push(" AND ")
                .push(column)
                .push(" = ")
                .push_bind(value.to_string());
        }
        q.push(condition);
        if let Some(before) = before {
            q.push(" AND id < ").push_bind(before);
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit));
        self.tenant_rows::<R, T>(tenant, q).await
    }

    /// Sets the archived flag of the tenant's row `id` of `table` (`agents`, `tools`) to
    /// `archived_at`, with `audit`, when it is not so already: whether it changed.
    pub(crate) async fn set_archived(
        &self,
        tenant: TenantId,
        update: &'static str,
        id: Uuid,
        archived_at: Option<chrono::DateTime<chrono::Utc>>,
        audit: &baton_core::model::AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        let changed = Query::new(update)
            .bind(archived_at.map(crate::plan::micros))
            .bind(tenant.as_uuid())
            .bind(id)
            .bind(archived_at.is_some())
            .execute(&mut change.tx)
            .await?;
        if changed == 1 {
            change.commit().await?;
        } else {
            change.rollback().await;
        }
        Ok(changed == 1)
    }

    /// A page of a run's rows after a position (a version, a sequence number) in order, on
    /// the `app` pool scoped to `tenant`: `sql` binds `$1` the run, `$2` the tenant, `$3`
    /// the position and `$4` the limit.
    pub(crate) async fn run_page<R, T>(
        &self,
        tenant: TenantId,
        sql: &'static str,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<T>>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        self.tenant_rows::<R, T>(tenant, page_of(sql, tenant, run, after, limit))
            .await
    }

    /// A page of the tenant's rows in `key` order on the `app` pool: those after `after`
    /// when given, at most `limit`. `select` is `SELECT <columns> FROM <table> WHERE
    /// <tenant column> = `.
    pub(crate) async fn key_order<R, T>(
        &self,
        tenant: TenantId,
        select: &'static str,
        key: &'static str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<T>>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        let mut q = Query::new(select);
        q.push_bind(tenant.as_uuid());
        if let Some(after) = after {
            q.push(" AND ").push(key).push(" > ").push_bind(after);
        }
        q.push(" ORDER BY ")
            .push(key)
            .push(" LIMIT ")
            .push_bind(i64::from(limit));
        self.tenant_rows::<R, T>(tenant, q).await
    }

    /// Runs `q` alone in a write transaction on `kind`'s pool in `scope`, and commits;
    /// the number of rows it changed.
    pub(crate) async fn write_one(&self, kind: PoolKind, scope: Scope, q: Query<B>) -> Result<u64> {
        let mut tx = self.pools.write(kind, scope).await?;
        let changed = q.execute(&mut tx).await?;
        commit(tx).await?;
        Ok(changed)
    }
}

/// Commits `tx`, the transaction of a write.
pub(crate) async fn commit<B: Backend>(tx: Transaction<'static, B>) -> Result<()> {
    tx.commit().await.map_err(B::classify)
}
